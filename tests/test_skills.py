"""Skills against the fake LLM: listed in the prompt by name and description, read on demand with
read_file (shipped ones too), bad ones skipped with one warning, unmet requirements shown, and a
group offered only the skills marked for groups."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import pytest

from gateway.service.app import Runtime
from gateway.skills.catalog import SHIPPED, SkillCatalog
from gateway.skills.prompt import SKILLS_SHARE, skills_section
from memory.budget import PromptBudget
from memory.tokens import TokenCounter
from tests.conftest import RuntimeFactory, inbound, memgate
from tests.fakes.llm import FakeLLM, Reply, text, tool_call, tool_results

BODY = "When asked about the weather, answer with the code word written here: LANTERN-42."
MISSING_PROGRAM = "memgate-test-no-such-program"


def write_skill(workspace: Path, name: str, front: str, body: str = BODY) -> Path:
    path = workspace / "skills" / name / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"---\n{front}\n---\n\n# {name}\n\n{body}\n", encoding="utf-8")
    return path


def system_prompt(request: dict[str, Any]) -> str:
    return str(request["messages"][0]["content"])


def follow_the_skill(body: dict[str, Any]) -> Reply:
    """The model's answer after reading a skill: what its body tells it to say."""
    found = re.search(r"code word written here: (\S+)\.", "\n".join(tool_results(body)))
    return text(f"The code word is {found.group(1)}." if found else "No skill was read.")


async def test_a_skill_is_listed_by_name_and_description_and_read_with_read_file(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """The prompt has the skill's name, description and path but not its body; read_file gives
    the body, the next request carries it and the answer follows it."""
    async with make_runtime() as runtime:
        write_skill(
            runtime.config.workspace,
            "weather-words",
            "name: weather-words\ndescription: How to answer questions about the weather.",
        )
        fake_llm.push(tool_call("read_file", {"path": "skills/weather-words/SKILL.md"}))
        fake_llm.push(follow_the_skill)
        reply = await runtime.agent.handle(inbound("Will it rain tomorrow?"))
    first, second = fake_llm.chat_requests()[:2]
    prompt = system_prompt(first)
    assert "weather-words: How to answer questions about the weather." in prompt
    assert "skills/weather-words/SKILL.md" in prompt
    assert "LANTERN-42" not in prompt and "LANTERN-42" not in str(first["messages"])
    assert any("LANTERN-42" in result for result in tool_results(second))
    assert reply is not None and reply.text == "The code word is LANTERN-42."


async def test_shipped_skills_are_offered_and_readable_and_the_workspace_wins_a_clash(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """A shipped skill is listed and its body read from memgate's own folder; a workspace skill of
    the same name replaces it, in the prompt and for read_file."""
    shipped_body = (SHIPPED / "reminders" / "SKILL.md").read_text(encoding="utf-8")
    async with make_runtime() as runtime:
        fake_llm.push(tool_call("read_file", {"path": "skills/reminders/SKILL.md"}))
        fake_llm.push(text("ok"))
        await runtime.agent.handle(inbound("Remind me to call mum on Sunday."))
        first, second = fake_llm.chat_requests()[:2]
        assert "skills/reminders/SKILL.md" in system_prompt(first)
        assert "tidy-memory" in system_prompt(first)
        assert tool_results(second) == [shipped_body]

        write_skill(
            runtime.config.workspace,
            "reminders",
            "name: reminders\ndescription: The owner's own way to write reminders.",
        )
        runtime.agent.context.files_changed()
        fake_llm.push(tool_call("read_file", {"path": "skills/reminders/SKILL.md"}))
        fake_llm.push(follow_the_skill)
        reply = await runtime.agent.handle(inbound("And one for Monday?"))
    third = fake_llm.chat_requests()[2]
    assert "reminders: The owner's own way to write reminders." in system_prompt(third)
    assert "fires at the right time" not in system_prompt(third)
    assert reply is not None and reply.text == "The code word is LANTERN-42."


async def test_a_malformed_skill_is_one_warning_and_the_others_load(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    """Bad SKILL.md files are skipped with one warning each, naming the file, however many
    turns look again; the good skill beside them is in the prompt."""
    async with make_runtime() as runtime:
        workspace = runtime.config.workspace
        no_front = workspace / "skills" / "no-front" / "SKILL.md"
        no_front.parent.mkdir(parents=True)
        no_front.write_text("# Just a heading\n\nNo front matter at all.\n")
        broken = write_skill(workspace, "broken-yaml", "name: broken-yaml\ndescription: [unclosed")
        unnamed = write_skill(workspace, "no-description", "name: no-description")
        write_skill(workspace, "good-one", "name: good-one\ndescription: The one that loads.")
        with caplog.at_level(logging.WARNING, logger="gateway.skills.catalog"):
            for turn in range(3):
                fake_llm.push(text("ok"))
                await runtime.agent.handle(inbound(f"message {turn}"))
                runtime.agent.context.files_changed()  # look at the folders again each turn
    warnings = [r.getMessage() for r in caplog.records if r.name == "gateway.skills.catalog"]
    assert len(warnings) == 3, warnings
    for path in (no_front, broken, unnamed):
        assert sum(str(path) in w for w in warnings) == 1, (path, warnings)
    assert any("no front matter" in w for w in warnings)
    assert any("no description" in w for w in warnings)
    for request in fake_llm.chat_requests():
        prompt = system_prompt(request)
        assert "good-one: The one that loads." in prompt
        assert "broken-yaml" not in prompt and "no-front" not in prompt


async def test_a_skill_needing_a_missing_program_is_listed_unavailable(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A skill whose program is not on PATH (or whose variable is unset) stays out of the
    prompt, and /skills says it is unavailable and why."""
    monkeypatch.delenv("MEMGATE_TEST_SKILL_KEY", raising=False)
    async with make_runtime() as runtime:
        workspace = runtime.config.workspace
        write_skill(
            workspace,
            "needs-tool",
            f"name: needs-tool\ndescription: Uses a program.\nrequires:\n  bins: [{MISSING_PROGRAM}]",
        )
        write_skill(
            workspace,
            "needs-key",
            "name: needs-key\ndescription: Uses a key.\n"
            'metadata: {"nanobot": {"requires": {"env": ["MEMGATE_TEST_SKILL_KEY"]}}}',
        )
        fake_llm.push(text("ok"))
        await runtime.agent.handle(inbound("hello"))
        listing = await runtime.agent.handle(inbound("/skills"))
    prompt = system_prompt(fake_llm.chat_requests()[0])
    assert "needs-tool" not in prompt and "needs-key" not in prompt
    assert listing is not None
    assert f"needs-tool (workspace) unavailable: program {MISSING_PROGRAM} not found on PATH" in (
        listing.text
    )
    assert (
        "needs-key (workspace) unavailable: environment variable MEMGATE_TEST_SKILL_KEY not set"
        in (listing.text)
    )
    assert "tidy-memory (shipped) available" in listing.text


async def test_a_group_is_offered_and_may_read_only_the_skills_marked_for_groups(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """In a group the prompt lists only `groups: true` skills (shipped or the workspace's);
    read_file reaches their bodies and refuses the others', and /skills lists only them."""
    async with make_runtime() as runtime:
        workspace = runtime.config.workspace
        write_skill(
            workspace,
            "team-standup",
            "name: team-standup\ndescription: Run a standup.\ngroups: true",
        )
        write_skill(
            workspace,
            "owner-only",
            "name: owner-only\ndescription: Private things.",
            "PRIVATE-BODY-9",
        )
        fake_llm.push(tool_call("read_file", {"path": "skills/team-standup/SKILL.md"}))
        fake_llm.push(tool_call("read_file", {"path": "skills/owner-only/SKILL.md"}))
        fake_llm.push(tool_call("read_file", {"path": "skills/tidy-memory/SKILL.md"}))
        fake_llm.push(tool_call("read_file", {"path": "skills/summarize-document/SKILL.md"}))
        fake_llm.push(
            tool_call("write_file", {"path": "skills/team-standup/SKILL.md", "content": "x"})
        )
        fake_llm.push(text("done"))
        await runtime.agent.handle(inbound("standup time", "-100", is_group=True))
        listing = await runtime.agent.handle(inbound("/skills", "-100", is_group=True))
        owner = await runtime.agent.handle(inbound("/skills"))
        body = (workspace / "skills/team-standup/SKILL.md").read_text()
    requests = fake_llm.chat_requests()
    prompt = system_prompt(requests[0])
    assert "team-standup: Run a standup." in prompt
    assert "summarize-document" in prompt  # shipped, marked for groups
    assert "owner-only" not in prompt and "tidy-memory" not in prompt
    standup, private, shipped, shipped_group, written = tool_results(requests[-1])
    assert "Run a standup" in standup and BODY in standup
    assert private.startswith("Error:") and "PRIVATE-BODY-9" not in private
    assert shipped.startswith("Error:") and "MEMORY.md is in every prompt" not in shipped
    assert "Summarising a long document" in shipped_group
    assert written.startswith("Error:") and BODY in body
    assert listing is not None and owner is not None
    assert "team-standup" in listing.text and "summarize-document" in listing.text
    assert "owner-only" not in listing.text and "tidy-memory" not in listing.text
    assert "owner-only" in owner.text and "tidy-memory" in owner.text


def test_the_list_stays_within_its_share_of_the_budget(tmp_path: Path) -> None:
    """Past its share of the budget the list is cut, whole lines only, and says how many are left."""
    for number in range(200):
        name = f"skill-{number:03d}"
        write_skill(tmp_path, name, f"name: {name}\ndescription: {'A long description. ' * 8}")
    skills = SkillCatalog(tmp_path, None).current().offered(group=False)
    counter = TokenCounter("gpt-4o-mini")
    budget = PromptBudget(8000, counter)
    section = skills_section(skills, budget)
    assert counter.count(section) <= int(8000 * SKILLS_SHARE)
    listed = re.findall(r"^- (skill-\d+):", section, re.MULTILINE)
    assert listed and len(listed) < 200
    assert section.endswith(
        f"({200 - len(listed)} more skill(s) not listed: the prompt has no room for them)"
    )
    assert skills_section(skills, None).count("\n- skill-") == 200  # no budget: every one


async def test_memgate_skills_lists_states_and_skipped_files(tmp_path: Path) -> None:
    """`memgate skills` lists each skill with its state and the skipped files with why, exit 1
    when one was skipped; `memgate status` has a skills line."""
    home = tmp_path / "home"
    await memgate("init", home=home)
    workspace = home / "workspace"
    write_skill(
        workspace,
        "notes-helper",
        "name: notes-helper\ndescription: Helps with notes.\ngroups: true",
    )
    write_skill(workspace, "wrong-name", "name: other-name\ndescription: Misnamed.")
    write_skill(
        workspace,
        "needs-tool",
        f"name: needs-tool\ndescription: Uses a program.\nrequires:\n  bins: [{MISSING_PROGRAM}]",
    )
    code, out, err = await memgate("skills", home=home)
    assert code == 1, err
    assert "notes-helper (workspace, groups too) available" in out
    assert f"needs-tool (workspace) unavailable: program {MISSING_PROGRAM} not found on PATH" in out
    assert "tidy-memory (shipped) available" in out
    assert f"skipped {workspace / 'skills/wrong-name/SKILL.md'}: name 'other-name' must be" in out
    code, out, _ = await memgate("status", home=home)
    assert code == 0
    assert "skills:     4 available (2 offered to groups), 1 unavailable, 1 skipped" in out


async def test_runtime_without_skills_folder_lists_the_shipped_ones(runtime: Runtime) -> None:
    """A fresh workspace has no skills/ folder; the shipped skills are offered all the same."""
    catalog = runtime.agent.context.skills
    assert catalog is not None
    names = [skill.name for skill in catalog.current().offered(group=False)]
    assert names == ["reminders", "summarize-document", "tidy-memory"]
