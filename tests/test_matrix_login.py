"""The Matrix login and `memgate doctor`'s Matrix check, against a real Synapse: a refused token is
named, a password login keeps its device for the next start, and a room where the bot may not
post is named."""

from __future__ import annotations

from pathlib import Path

import nio
import pytest

from channels.matrix.connect import MatrixChannelError, log_in, new_client, probe_matrix
from gateway.config.models import MatrixConfig
from tests.synapse import Synapse, person

pytestmark = pytest.mark.timeout(90)


def settings(synapse: Synapse, user_id: str, **keys: str) -> MatrixConfig:
    return MatrixConfig(enabled=True, homeserver=synapse.url, user_id=user_id, **keys)


async def test_doctor_logs_in_with_the_token_and_counts_the_rooms(synapse: Synapse) -> None:
    """A working token: one line with the bot's id and its rooms."""
    bot = synapse.register("bot")
    line = await probe_matrix(settings(synapse, bot.user_id, token=bot.access_token), None)
    assert line.startswith(f"logged in as {bot.user_id}")
    assert "in 0 rooms" in line


async def test_doctor_names_a_refused_token(synapse: Synapse) -> None:
    """A token the homeserver does not know fails the check, saying who refused what."""
    bot = synapse.register("bot")
    config = settings(synapse, bot.user_id, token="syt_not_a_real_token")
    with pytest.raises(
        MatrixChannelError, match=r"refused channels\.matrix\.token \(M_UNKNOWN_TOKEN"
    ):
        await probe_matrix(config, None)


async def test_doctor_names_a_token_of_another_user(synapse: Synapse) -> None:
    """A token that belongs to someone else than user_id is refused before anything is sent."""
    bot, other = synapse.register("bot"), synapse.register("other")
    config = settings(synapse, bot.user_id, token=other.access_token)
    with pytest.raises(MatrixChannelError, match=f"belongs to {other.user_id}"):
        await probe_matrix(config, None)


async def test_doctor_names_the_rooms_where_the_bot_may_not_post(synapse: Synapse) -> None:
    """A room whose power levels keep the bot from sending messages is named by the check."""
    bot_account, owner_account = synapse.register("bot"), synapse.register("owner")
    owner = await person(synapse, owner_account)
    bot = await person(synapse, bot_account)
    try:
        created = await owner.client.room_create(
            name="Read-only announcements",
            invite=[bot_account.user_id],
            power_level_override={"events_default": 50},
        )
        assert isinstance(created, nio.RoomCreateResponse), created
        assert isinstance(await bot.client.join(created.room_id), nio.JoinResponse)
    finally:
        await owner.close()
        await bot.close()
    config = settings(synapse, bot_account.user_id, token=bot_account.access_token)
    with pytest.raises(MatrixChannelError, match="too low to send messages in: Read-only announ"):
        await probe_matrix(config, None)


async def test_a_password_login_keeps_its_device_for_the_next_start(
    synapse: Synapse, tmp_path: Path
) -> None:
    """The first start logs in with the password and keeps the device; the next one reuses it
    (no new device on the account at every restart)."""
    bot = synapse.register("bot")
    config = settings(synapse, bot.user_id, password=bot.password)
    devices = []
    for _ in range(2):
        client = new_client(config)
        try:
            devices.append(await log_in(client, config, tmp_path))
        finally:
            await client.close()
    assert devices[0] == devices[1]
    kept = tmp_path / f"matrix-{bot.user_id[1:].replace(':', '_')}-session.json"
    assert kept.stat().st_mode & 0o777 == 0o600
    client = new_client(config)
    client.restore_login(bot.user_id, bot.device_id, bot.access_token)
    try:
        listed = await client.devices()
    finally:
        await client.close()
    assert isinstance(listed, nio.DevicesResponse), listed
    assert {d.id for d in listed.devices} == {bot.device_id, devices[0]}
