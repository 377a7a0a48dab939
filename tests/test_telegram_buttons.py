"""Buttons on Telegram: a message's buttons shown as an inline keyboard, a press taken as the
presser's own command through the same admission as a typed one, and exec's approval by button."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.bus import Button, OutboundMessage
from gateway.service.app import Runtime
from gateway.service.run import chat_sender
from tests.conftest import RuntimeFactory
from tests.fakes.llm import FakeLLM, text, tool_call, tool_results
from tests.fakes.telegram_api import FakeTelegram
from tests.fakes.telegram_harness import Recorder, agent_channel, make_channel, running
from tests.sandboxing import needs_bwrap, prepare_workspace

GROUP = -100123
CHOICE = (Button("Approve", "/approve 3f2a"), Button("Deny", "/deny 3f2a"))


def with_keyboard(fake: FakeTelegram, chat_id: int) -> list[int]:
    """The ids of the bot's messages in `chat_id` that show buttons now."""
    return [m for m in sorted(fake.chats.get(chat_id, {})) if fake.keyboard(chat_id, m)]


def answered(fake: FakeTelegram, query_id: str) -> bool:
    return any(
        c.params.get("callback_query_id") == query_id
        for c in fake.calls_to("answerCallbackQuery", ok_only=True)
    )


async def test_buttons_show_as_a_keyboard_and_an_owners_press_is_their_command(
    fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    """The keyboard carries each command; the owner's press reaches the handler as that command
    from them, Telegram hears the press answered, and the keyboard goes after the answer."""
    recorder = Recorder(lambda m: f"done: {m.text}")
    channel = make_channel(fake_telegram, tmp_path, recorder)
    async with running(channel):
        assert await channel.send(OutboundMessage("telegram", "42", "Run it?", buttons=CHOICE))
        [shown] = with_keyboard(fake_telegram, 42)
        assert fake_telegram.keyboard(42, shown) == ["Approve", "Deny"]
        query = fake_telegram.press(42, shown, "Approve")
        await recorder.wait_delivered(1)
        await fake_telegram.wait_for(lambda: not with_keyboard(fake_telegram, 42))
        assert answered(fake_telegram, query)
    [seen] = recorder.seen
    assert (seen.text, seen.sender_id, seen.chat_id) == ("/approve 3f2a", "42", "42")
    assert seen.sender_is_owner and not seen.is_group
    assert fake_telegram.shown(42) == ["Run it?", "done: /approve 3f2a"]


@pytest.mark.parametrize(
    ("options", "presser", "handed_on"),
    [
        ({"group_policy": "open"}, 77, False),  # a group member not in allow_from
        ({"group_policy": "open", "allow_from": ["42", "*"]}, 77, True),  # a guest
        ({"group_policy": "open"}, 42, True),  # the owner
    ],
    ids=["stranger", "guest", "owner"],
)
async def test_a_press_in_a_group_meets_the_same_admission_as_typing(
    fake_telegram: FakeTelegram,
    tmp_path: Path,
    options: dict[str, Any],
    presser: int,
    handed_on: bool,
) -> None:
    """A press is judged as the presser's typed message would be: a stranger's goes nowhere, a
    guest's arrives as a guest's; only an owner's answer takes the keyboard off."""
    recorder = Recorder(lambda m: f"done: {m.text}")
    channel = make_channel(fake_telegram, tmp_path, recorder, **options)
    async with running(channel):
        assert await channel.send(OutboundMessage("telegram", str(GROUP), "Sure?", buttons=CHOICE))
        [shown] = with_keyboard(fake_telegram, GROUP)
        query = fake_telegram.press(GROUP, shown, "Deny", user_id=presser, username=None)
        await fake_telegram.wait_for(lambda: answered(fake_telegram, query))
        # The owner then types in the group: once that is answered, the press was handed on
        # before it, or never.
        fake_telegram.message("@memgate_bot ping", chat_id=GROUP)
        await recorder.wait_delivered(2 if handed_on else 1)
        if presser == 42:
            await fake_telegram.wait_for(lambda: not with_keyboard(fake_telegram, GROUP))
    texts = [(m.text, m.sender_id, m.is_group, m.sender_is_owner) for m in recorder.seen]
    pressed = ("/deny 3f2a", str(presser), True, presser == 42)
    assert texts == ([pressed] if handed_on else []) + [("ping", "42", True, True)]
    # Only the owner's choice takes the buttons away; the others leave them for the owner.
    assert bool(with_keyboard(fake_telegram, GROUP)) is (presser != 42)


# -- exec's approval by button --------------------------------------------------------------------


async def _asking(
    fake_telegram: FakeTelegram, fake_llm: FakeLLM, runtime: Runtime, command: str
) -> int:
    """The owner asks for `command`; returns the id of the approval request once it shows."""
    fake_llm.push(tool_call("exec", {"command": command}))
    fake_llm.push(text("done"), match=lambda body: bool(tool_results(body)))
    fake_telegram.message("run it")
    await fake_telegram.wait_for(lambda: bool(with_keyboard(fake_telegram, 42)))
    [request] = with_keyboard(fake_telegram, 42)
    assert command in fake_telegram.shown(42)[-1]
    return request


def _exec_runtime(make_runtime: RuntimeFactory, tmp_path: Path) -> Any:
    prepare_workspace(tmp_path)
    tools = {"exec": {"enabled": True, "timeout": 20, "approve_timeout": 20}}
    return make_runtime({"tools": tools})


def _wire(runtime: Runtime, channel: Any) -> None:
    """As `memgate run` does: exec's requests go out through the channels."""
    assert runtime.agent.tools.approvals is not None
    runtime.agent.tools.approvals.notify = chat_sender([channel])


def _last_result(fake_llm: FakeLLM) -> str:
    return tool_results(fake_llm.chat_requests()[-1])[-1]


@needs_bwrap
@pytest.mark.parametrize("label", ["Approve", "Deny"])
async def test_the_owner_approves_or_denies_exec_by_button(
    fake_telegram: FakeTelegram,
    fake_llm: FakeLLM,
    make_runtime: RuntimeFactory,
    tmp_path: Path,
    label: str,
) -> None:
    """Approve runs the command, Deny refuses it; either way the buttons go after the choice."""
    async with _exec_runtime(make_runtime, tmp_path) as runtime:
        channel = agent_channel(fake_telegram, runtime)
        _wire(runtime, channel)
        async with running(channel):
            request = await _asking(fake_telegram, fake_llm, runtime, "touch pressed.txt")
            query = fake_telegram.press(42, request, label)
            await fake_telegram.wait_for(lambda: "done" in fake_telegram.shown(42), within=30)
            await fake_telegram.wait_for(lambda: not with_keyboard(fake_telegram, 42))
            assert answered(fake_telegram, query)
        made = (runtime.config.workspace / "pressed.txt").exists()
        if label == "Approve":
            assert made and "approved by the owner" in _last_result(fake_llm)
            assert "Approved: running it." in fake_telegram.shown(42)
        else:
            assert not made and "Not run: refused by the owner" in _last_result(fake_llm)
            assert "Denied: it will not run." in fake_telegram.shown(42)


@needs_bwrap
async def test_a_guests_press_on_the_approval_runs_nothing(
    fake_telegram: FakeTelegram, fake_llm: FakeLLM, make_runtime: RuntimeFactory, tmp_path: Path
) -> None:
    """Someone other than the owner pressing Approve (a guest let in by "*") is told only the
    owner can; the command stays waiting with its buttons, and the owner's Deny refuses it."""
    async with _exec_runtime(make_runtime, tmp_path) as runtime:
        channel = agent_channel(fake_telegram, runtime, allow_from=["42", "*"], dm_policy="open")
        _wire(runtime, channel)
        async with running(channel):
            request = await _asking(fake_telegram, fake_llm, runtime, "touch guest.txt")
            fake_telegram.press(42, request, "Approve", user_id=77, username="mallory")
            await fake_telegram.wait_for(
                lambda: any(t.startswith("Only the owner") for t in fake_telegram.shown(42))
            )
            assert runtime.agent.tools.approvals is not None
            assert len(runtime.agent.tools.approvals.waiting()) == 1
            assert with_keyboard(fake_telegram, 42) == [request]
            assert not (runtime.config.workspace / "guest.txt").exists()
            fake_telegram.press(42, request, "Deny")
            await fake_telegram.wait_for(lambda: "done" in fake_telegram.shown(42), within=30)
            await fake_telegram.wait_for(lambda: not with_keyboard(fake_telegram, 42))
        # The keyboard was taken off once, by the owner's choice; the guest's press left it.
        assert len(fake_telegram.calls_to("editMessageReplyMarkup")) == 1
        assert not (runtime.config.workspace / "guest.txt").exists()
        assert "Not run: refused by the owner" in _last_result(fake_llm)


async def test_other_channels_show_the_commands_to_type() -> None:
    """Where no button can show, the message ends with the commands each button stands for."""
    message = OutboundMessage("discord", "1", "Run this?", buttons=CHOICE)
    assert message.text_with_commands() == "Run this?\n\nReply /approve 3f2a or /deny 3f2a."
    assert OutboundMessage("discord", "1", "plain").text_with_commands() == "plain"
    with pytest.raises(ValueError, match="64 bytes"):
        Button("Long", "/approve " + "x" * 60)
