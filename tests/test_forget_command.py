"""/memory and /forget: the owner looks at memory and has lines forgotten, for good, from a chat."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.service.app import Runtime
from memory.forgotten import FORGOTTEN_FILE
from tests.conftest import RuntimeFactory, inbound, turns
from tests.fakes.llm import FakeLLM, is_consolidation, last_user_text, tool_call
from tests.fakes.telegram_api import FakeTelegram
from tests.fakes.telegram_harness import agent_channel, running

CAT = "- The user's cat is called Miso."


async def say(runtime: Runtime, words: str, **fields: Any) -> str:
    reply = await runtime.agent.handle(inbound(words, **fields))
    assert reply is not None
    return reply.text


def bring_back(line: str) -> Any:
    """A save_memory answer: MEMORY.md as the request shows it, plus `line` (a re-extraction)."""

    def reply(body: dict[str, Any]) -> Any:
        memory = last_user_text(body).partition("## Current MEMORY.md\n\n")[2]
        memory = memory.partition("\n\n## Conversation to consolidate")[0]
        update = f"{memory}\n{line}\n- a fact about tea\n"
        return tool_call(
            "save_memory", {"history_entry": "[2026-01-01 10:00] x", "memory_update": update}
        )

    return reply


async def test_forget_removes_confirmed_lines_keeps_a_version_and_stays_forgotten(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """/forget shows the lines, /forget yes removes them (a version kept, the undo named), and a
    later consolidation that brings the line back has it dropped, while its other lines land."""
    async with make_runtime({"memory": {"window": 4}}) as runtime:
        before = runtime.memory.read_memory() + f"{CAT}\n- Lives in Lyon.\n"
        runtime.memory.write_memory(before)
        listing = await runtime.agent.handle(inbound("/forget miso"))
        assert listing is not None and CAT in listing.text and "Lyon" not in listing.text
        assert [b.command for b in listing.buttons] == ["/forget yes", "/forget no"]
        assert runtime.memory.read_memory() == before  # nothing yet
        done = await say(runtime, "/forget yes")
        assert "1 line removed" in done and "memgate memory restore MEMORY." in done
        memory = runtime.memory.read_memory()
        assert "Miso" not in memory and "- Lives in Lyon." in memory
        assert [v.read_text() for v in runtime.memory.list_versions()][-1] == before
        assert (runtime.config.state_dir / FORGOTTEN_FILE).exists()

        fake_llm.push(bring_back("- the user's CAT is called miso"), match=is_consolidation)
        await turns(runtime, 2)
        await runtime.consolidator.wait_idle()
        request = fake_llm.consolidation_requests()[-1]
        assert "## Forgotten at the owner's request" in last_user_text(request)
        memory = runtime.memory.read_memory()
        assert "miso" not in memory.casefold() and "- a fact about tea" in memory


async def test_forget_reaches_todays_note_and_no_without_yes(runtime: Runtime) -> None:
    """Today's note's matching lines go too; /forget no, or no /forget first, removes nothing."""
    note = runtime.memory.daily_note_path()
    runtime.memory.write_file(note, "- met Ana at the dentist\n- bought bread\n")
    assert "Nothing waits" in await say(runtime, "/forget yes")
    await say(runtime, "/forget dentist")
    assert await say(runtime, "/forget no") == "Nothing forgotten."
    assert "Nothing waits" in await say(runtime, "/forget yes")
    assert "dentist" in note.read_text()
    shown = await say(runtime, "/forget dentist")
    assert "today's note" in shown and "met Ana at the dentist" in shown
    done = await say(runtime, "/forget yes")
    assert "1 line removed" in done
    assert note.read_text() == "- bought bread\n"
    kept = [p for p in runtime.memory.versions.iterdir() if p.name.startswith(note.stem)]
    assert [p.read_text() for p in kept] == ["- met Ana at the dentist\n- bought bread\n"]


async def test_forget_after_memory_changed_removes_nothing(runtime: Runtime) -> None:
    """A MEMORY.md changed between the lines shown and the yes is left as it is now."""
    runtime.memory.write_memory(runtime.memory.read_memory() + f"{CAT}\n")
    await say(runtime, "/forget miso")
    changed = runtime.memory.read_memory() + "- a fact added meanwhile\n"
    runtime.memory.write_memory(changed)
    assert "changed since I showed the lines" in await say(runtime, "/forget yes")
    assert runtime.memory.read_memory() == changed


async def test_memory_shows_the_file_or_its_matching_lines(runtime: Runtime) -> None:
    """/memory answers MEMORY.md whole; /memory TEXT its lines holding TEXT, headings aside."""
    runtime.memory.write_memory(runtime.memory.read_memory() + f"{CAT}\n- Lives in Lyon.\n")
    assert await say(runtime, "/memory") == runtime.memory.read_memory()
    found = await say(runtime, "/memory MISO")
    assert CAT in found and "Lyon" not in found
    assert "No line of MEMORY.md holds 'kayak'" in await say(runtime, "/memory kayak")


async def test_on_telegram_the_owner_forgets_by_button(
    fake_telegram: FakeTelegram, make_runtime: RuntimeFactory
) -> None:
    """The listing shows Forget and Keep buttons; the owner's press on Forget removes the lines
    and the buttons go."""
    async with make_runtime() as runtime:
        runtime.memory.write_memory(runtime.memory.read_memory() + f"{CAT}\n")
        async with running(agent_channel(fake_telegram, runtime)) as channel:
            assert channel.ready.is_set()
            fake_telegram.message("/forget miso")

            def keyboards() -> list[int]:
                return [
                    m
                    for m in sorted(fake_telegram.chats.get(42, {}))
                    if fake_telegram.keyboard(42, m)
                ]

            await fake_telegram.wait_for(lambda: bool(keyboards()))
            [listing] = keyboards()
            assert fake_telegram.keyboard(42, listing) == ["Forget them", "Keep them"]
            fake_telegram.press(42, listing, "Forget them")
            await fake_telegram.wait_for(
                lambda: any(t.startswith("Forgotten:") for t in fake_telegram.shown(42))
            )
            await fake_telegram.wait_for(lambda: not keyboards())
        assert "Miso" not in runtime.memory.read_memory()


@pytest.mark.parametrize(
    "sender",
    [
        {"sender_is_owner": False, "sender_id": "99"},  # a guest in their DM
        {"is_group": True},  # the owner, in a group
    ],
)
@pytest.mark.parametrize("command", ["/memory", "/memory miso", "/forget miso", "/forget yes"])
async def test_guests_and_groups_cannot_use_memory_or_forget(
    runtime: Runtime, sender: dict[str, Any], command: str
) -> None:
    """A guest or a group gets a refusal: nothing of MEMORY.md shown, nothing removed."""
    before = runtime.memory.read_memory() + f"{CAT}\n"
    runtime.memory.write_memory(before)
    await say(runtime, "/forget miso")  # the owner's own, waiting in the owner's DM
    reply = await say(runtime, command, **sender)
    assert reply.startswith("Only the owner") and "Miso" not in reply
    assert runtime.memory.read_memory() == before
