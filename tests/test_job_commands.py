"""Jobs from the chat and the command line: `/jobs`, private chats only, `memgate jobs` and status."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from gateway.automation.jobs import JobStore, new_job
from gateway.service.app import Runtime
from gateway.service.control import control_server, request, socket_path
from gateway.tools.jobs import JobTools
from tests.conftest import RuntimeFactory, inbound, memgate
from tests.fakes.llm import FakeLLM, text, tool_call

UTC = ZoneInfo("UTC")
ENV = {"OPENAI_API_KEY": "sk-cli-test-key-123456"}


def tool_names(body: dict[str, Any]) -> list[str]:
    tools = body.get("tools") or []
    return [t["function"]["name"] for t in tools]


async def test_jobs_command_lists_and_cancels_only_this_chats_jobs(
    runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """/jobs shows the chat's own jobs; /jobs cancel removes one of them, never another chat's."""
    fake_llm.push(tool_call("schedule", {"every": "1d", "message": "stretch"}))
    fake_llm.push(text("Scheduled."))
    await runtime.agent.handle(inbound("remind me daily to stretch", channel="telegram"))
    fake_llm.push(tool_call("schedule", {"cron": "0 9 * * *", "prompt": "plan my day"}))
    fake_llm.push(text("Scheduled."))
    await runtime.agent.handle(inbound("plan my days", chat_id="43", channel="telegram"))
    mine, theirs = (runtime.scheduler.jobs(f"telegram:{c}")[0] for c in ("42", "43"))

    listing = await runtime.agent.handle(inbound("/jobs", channel="telegram"))
    assert listing is not None and mine.id in listing.text and theirs.id not in listing.text
    refused = await runtime.agent.handle(inbound(f"/jobs cancel {theirs.id}", channel="telegram"))
    assert refused is not None and "No job" in refused.text
    done = await runtime.agent.handle(inbound(f"/jobs cancel {mine.id}", channel="telegram"))
    assert done is not None and done.text == f"Cancelled job {mine.id}."
    assert [j.id for j in runtime.scheduler.jobs()] == [theirs.id]
    empty = await runtime.agent.handle(inbound("/jobs", channel="telegram"))
    assert empty is not None and empty.text == "No scheduled jobs in this chat."


async def test_a_group_chat_cannot_schedule(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """A group is not offered the schedule tool; with shared memory it is offered but refused,
    and /jobs in a group says jobs are for private chats."""
    group: dict[str, Any] = {
        "is_group": True,
        "mentioned": True,
        "channel": "telegram",
        "chat_id": "-100",
    }
    async with make_runtime() as runtime:
        await runtime.agent.handle(inbound("remind us at noon", **group))
        assert "schedule" not in tool_names(fake_llm.chat_requests()[-1])
        answer = await runtime.agent.handle(inbound("/jobs", **group))
        assert answer is not None and "private chat" in answer.text
    async with make_runtime({"memory": {"groups": "shared"}}) as runtime:
        fake_llm.push(tool_call("schedule", {"every": "1h", "message": "drink water"}))
        fake_llm.push(text("Could not."))
        await runtime.agent.handle(inbound("remind us hourly", **group))
        result = fake_llm.chat_requests()[-1]["messages"][-1]
        assert result["role"] == "tool" and "only in a private chat" in result["content"]
        assert runtime.scheduler.jobs() == []


async def test_memgate_jobs_list_remove_and_status(tmp_path: Path) -> None:
    """`memgate jobs list` shows every job, `remove ID` deletes one (an unknown id is an error),
    and `memgate status` counts them with the next due time."""
    home = tmp_path / "home"
    await memgate("init", home=home)
    store = JobStore(home / "state")
    job = new_job(session="telegram:42", channel="telegram", chat_id="42", now=1.8e9, tz=UTC,
                  at="2027-12-24T18:00", message="gifts")  # fmt: skip
    store.put(job)
    code, out, err = await memgate("jobs", "list", home=home, env=ENV)
    assert code == 0 and job.id in out and "2027-12-24 18:00:00 UTC" in out, err
    code, out, _ = await memgate("status", home=home, env=ENV)
    assert "jobs:       1 scheduled (0 paused), next due 2027-12-24 18:00:00 UTC" in out
    code, _, err = await memgate("jobs", "remove", "nope", home=home, env=ENV)
    assert code == 1 and "no job 'nope'" in err
    code, out, _ = await memgate("jobs", "remove", job.id, home=home, env=ENV)
    assert code == 0 and out.strip() == f"Removed job {job.id}."
    assert JobStore(home / "state").all() == []
    code, out, _ = await memgate("jobs", home=home, env=ENV)
    assert (code, out.strip()) == (0, "No scheduled jobs.")


async def test_jobs_op_on_the_control_socket_changes_the_running_schedulers_jobs(
    runtime: Runtime,
) -> None:
    """While the service runs, `memgate jobs` goes through the control socket: pause and remove
    act on the running scheduler's own jobs, and an unknown id is an error."""
    job = runtime.scheduler.add(
        new_job(
            session="telegram:42",
            channel="telegram",
            chat_id="42",
            now=1.8e9,
            tz=UTC,
            every="1h",
            message="stretch",
        )
    )
    tools = JobTools(runtime.scheduler, UTC)
    path = socket_path(runtime.config.state_dir)
    async with control_server(path, runtime.agent.handle, dict, ops={"jobs": tools.control_op}):
        listed = await request(path, {"op": "jobs", "action": "list"})
        assert listed is not None and listed["ok"] and job.id in listed["text"]
        paused = await request(path, {"op": "jobs", "action": "pause", "id": job.id})
        assert paused == {"ok": True, "text": f"Paused job {job.id}."}
        assert runtime.scheduler.store.get(job.id).paused == "paused by the owner"  # type: ignore[union-attr]
        missing = await request(path, {"op": "jobs", "action": "remove", "id": "nope"})
        assert missing == {"ok": False, "text": "no job 'nope' (see memgate jobs list)"}
        await request(path, {"op": "jobs", "action": "remove", "id": job.id})
        assert runtime.scheduler.jobs() == []
