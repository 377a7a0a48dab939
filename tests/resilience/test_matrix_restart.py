"""Matrix messages survive a kill: one received and not yet answered is answered once after the
restart, against a real Synapse (tests/synapse.py) and the real `memgate run`."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from channels.matrix.state import file_stem
from tests.fakes.llm import FakeLLM, last_user_text, text
from tests.resilience.conftest import GatewayFactory
from tests.resilience.harness import Gateway, read_sessions
from tests.synapse import Account, Person, Synapse, joined, person, room_with


def matrix_settings(synapse: Synapse, bot: Account, owner: Account, root: Path) -> dict[str, Any]:
    return {
        "state_dir": str(root / "state"),
        "channels": {
            "telegram": {"enabled": False},
            "matrix": {
                "enabled": True,
                "homeserver": synapse.url,
                "user_id": bot.user_id,
                "token": "${MATRIX_ACCESS_TOKEN}",
                "allow_from": [owner.user_id],
                "sync_timeout": 5,
            },
        },
    }


async def start_on_matrix(gateway: Gateway) -> None:
    """Start `memgate run` and wait until its first /sync went through."""
    await gateway.start(ready=False)

    async def connected() -> bool:
        health = await gateway.health()
        return bool(health and health["channels"]["matrix"]["connected"])

    deadline = asyncio.get_running_loop().time() + 45
    while not await connected():
        assert gateway.alive, gateway.log()[-3000:]
        assert asyncio.get_running_loop().time() < deadline, "matrix not connected after 45 s"
        await asyncio.sleep(0.1)


def answers(owner: Person, room: str, bot: str, body: str) -> int:
    return sum(1 for e in owner.posts(room, bot) if e["content"]["body"] == body)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("token", ["saved", "not saved"])
async def test_a_message_received_before_a_kill_is_answered_once_after_the_restart(
    make_gateway: GatewayFactory, fake_llm: FakeLLM, synapse: Synapse, tmp_path: Path, token: str
) -> None:
    """SIGKILLed while the model is still writing the answer to a DM, the restarted service answers
    it once (from its inbox, not from a sync replayed twice), and a later DM is answered as ever.

    "not saved": the kill came after the inbox took the message and before the since-token of
    its /sync was saved (the files are put back as such a kill leaves them): the restart's /sync
    brings the message again, and the inbox's copy is the one answered."""
    bot, owner_account = synapse.register("bot"), synapse.register("owner")
    root = tmp_path / "gateway"
    gateway = make_gateway(
        matrix_settings(synapse, bot, owner_account, root),
        root=root,
        env={"MATRIX_ACCESS_TOKEN": bot.access_token},
    )
    owner = await person(synapse, owner_account)
    try:
        await start_on_matrix(gateway)
        room = await room_with(owner, bot=bot.user_id, direct=True)
        await joined(owner, room, bot.user_id)
        position = gateway.state_dir / f"{file_stem(bot.user_id)}-sync.json"
        before = position.read_bytes()  # a token from before the question
        release = asyncio.Event()

        def asked(body: dict[str, Any]) -> bool:
            return last_user_text(body) == "question before the kill"

        fake_llm.push(text("lost with the process"), hold=release, match=asked)
        await owner.send(room, "question before the kill")
        await fake_llm.wait_for(lambda: any(asked(b) for b in fake_llm.chat_requests()), 30)
        await gateway.kill()
        release.set()
        if token == "not saved":
            assert position.read_bytes() != before
            position.write_bytes(before)
        fake_llm.push(text("the answer after the restart"), match=asked)
        await start_on_matrix(gateway)
        await owner.wait_for(
            lambda: answers(owner, room, bot.user_id, "the answer after the restart") >= 1,
            what="the answer after the restart",
        )
        await owner.send(room, "and now?")
        await owner.wait_for(lambda: answers(owner, room, bot.user_id, "echo: and now?") >= 1)
        assert await gateway.stop() == 0
    finally:
        await owner.close()
    posts = [e["content"]["body"] for e in owner.posts(room, bot.user_id)]
    assert posts == ["the answer after the restart", "echo: and now?"]
    users = [t for s in read_sessions(gateway.workspace) for t in s.texts("user")]
    assert users.count("question before the kill") == 1
