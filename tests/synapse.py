"""A real Matrix homeserver for the Matrix adapter's tests: Synapse on loopback, with a throwaway
config and SQLite, and real nio clients to talk to the bot through it.

Synapse pins many libraries, so it lives in a virtualenv of its own (`.venv-synapse`, built by
`make test`). Its keys are generated offline; it has no federation listener, no key servers and
no open registration: accounts are made through the shared-secret admin API, as
`register_new_matrix_user` does. Rate limits are raised out of the way, except where a test lowers
one account's on purpose.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nio

ROOT = Path(__file__).resolve().parent.parent
SYNAPSE_PYTHON = ROOT / ".venv-synapse" / "bin" / "python"
SECRET = "memgate-test-registration-secret"
START_WITHIN = 60.0  # seconds: a start takes ~3 s alone, far more on a loaded 2-core machine
_FAST = {"per_second": 10000, "burst_count": 10000}


@dataclass(frozen=True)
class Account:
    user_id: str
    password: str
    access_token: str
    device_id: str


class Synapse:
    """One homeserver process serving the client API on 127.0.0.1."""

    def __init__(self, root: Path, port: int) -> None:
        self.root = root
        self.port = port
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self._names = 0

    def start(self) -> None:
        if not SYNAPSE_PYTHON.exists():
            raise RuntimeError(
                f"{SYNAPSE_PYTHON} is missing: `make test` builds it (`make .venv-synapse/.built`)"
            )
        self.root.mkdir(parents=True, exist_ok=True)
        config = self.root / "homeserver.yaml"
        subprocess.run(
            [
                str(SYNAPSE_PYTHON), "-m", "synapse.app.homeserver", "--server-name", "localhost",
                "--config-path", str(config), "--data-directory", str(self.root),
                "--generate-config", "--report-stats=no",
            ],
            check=True,
            capture_output=True,
            timeout=START_WITHIN,
        )  # fmt: skip
        (self.root / "test.yaml").write_text(json.dumps(self._overrides()))
        with (self.root / "synapse.out").open("wb") as log:  # the child keeps its own copy
            self.process = subprocess.Popen(
                [
                    str(SYNAPSE_PYTHON), "-m", "synapse.app.homeserver",
                    "-c", str(config), "-c", str(self.root / "test.yaml"),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.root,
            )  # fmt: skip
        deadline = time.monotonic() + START_WITHIN
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"synapse exited early:\n{self.output()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/_matrix/client/versions", timeout=2):
                    return
            except (OSError, urllib.error.URLError):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"synapse not up after {START_WITHIN:.0f}s") from None
                time.sleep(0.1)

    def _overrides(self) -> dict[str, Any]:
        # Merged over the generated file: only the client API, on our port, nothing outside.
        return {
            "listeners": [
                {
                    "port": self.port,
                    "bind_addresses": ["127.0.0.1"],
                    "type": "http",
                    "tls": False,
                    "resources": [{"names": ["client"], "compress": False}],
                }
            ],
            "registration_shared_secret": SECRET,
            "trusted_key_servers": [],
            "suppress_key_server_warning": True,
            "federation_domain_whitelist": [],
            "presence": {"enabled": False},
            "report_stats": False,
            "bcrypt_rounds": 4,  # password hashing at test speed
            "log_config": None,
            "rc_message": _FAST,
            "rc_registration": _FAST,
            "rc_login": {"address": _FAST, "account": _FAST, "failed_attempts": _FAST},
            "rc_joins": {"local": _FAST, "remote": _FAST},
            "rc_invites": {"per_room": _FAST, "per_user": _FAST, "per_issuer": _FAST},
        }

    def output(self) -> str:
        path = self.root / "synapse.out"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def register(self, name: str, *, admin: bool = False) -> Account:
        """A new account (`name` made unique on this server), registered with the shared secret."""
        self._names += 1
        user = f"{name}{self._names}"
        password = f"pw-{user}-4f1c"
        endpoint = f"{self.url}/_synapse/admin/v1/register"
        with urllib.request.urlopen(endpoint, timeout=10) as response:
            nonce = json.load(response)["nonce"]
        mac = hmac.new(SECRET.encode(), digestmod=hashlib.sha1)
        kind = b"admin" if admin else b"notadmin"
        mac.update(b"\x00".join([nonce.encode(), user.encode(), password.encode(), kind]))
        body = {
            "nonce": nonce,
            "username": user,
            "password": password,
            "admin": admin,
            "mac": mac.hexdigest(),
        }
        request = urllib.request.Request(
            endpoint, json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            made = json.load(response)
        return Account(made["user_id"], password, made["access_token"], made["device_id"])

    def limit_messages(self, user_id: str, per_second: int, burst: int) -> None:
        """Give one account a rate limit of its own on sending (Synapse's admin API), so that
        the homeserver answers M_LIMIT_EXCEEDED with a retry_after_ms."""
        admin = self.register("admin", admin=True)
        request = urllib.request.Request(
            f"{self.url}/_synapse/admin/v1/users/{user_id}/override_ratelimit",
            json.dumps({"messages_per_second": per_second, "burst_count": burst}).encode(),
            {"Content-Type": "application/json", "Authorization": f"Bearer {admin.access_token}"},
        )
        with urllib.request.urlopen(request, timeout=10):
            pass


@dataclass
class Person:
    """A real nio client of one account, collecting the timeline of every room it is in."""

    client: nio.AsyncClient
    account: Account
    events: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    _since: str | None = None

    @property
    def user_id(self) -> str:
        return self.account.user_id

    async def sync(self, wait_ms: int = 500) -> None:
        response = await self.client.sync(timeout=wait_ms, since=self._since)
        assert isinstance(response, nio.SyncResponse), response
        self._since = response.next_batch
        for room_id, info in response.rooms.join.items():
            self.events.setdefault(room_id, []).extend(e.source for e in info.timeline.events)
        for room_id in response.rooms.invite:
            await self.client.join(room_id)

    async def wait_for(
        self, check: Callable[[], bool], within: float = 30.0, what: str = "an event"
    ) -> None:
        """Sync until `check()` holds."""
        deadline = time.monotonic() + within
        while not check():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {within:.0f}s waiting for {what}")
            await self.sync()

    def messages(self, room_id: str, sender: str) -> list[dict[str, Any]]:
        """`m.room.message` events `sender` posted in the room (edits included), in order."""
        return [
            e
            for e in self.events.get(room_id, [])
            if e.get("type") == "m.room.message" and e.get("sender") == sender
        ]

    def posts(self, room_id: str, sender: str) -> list[dict[str, Any]]:
        """Messages `sender` posted, edits left out."""
        return [
            e
            for e in self.messages(room_id, sender)
            if e["content"].get("m.relates_to", {}).get("rel_type") != "m.replace"
        ]

    def shown_text(self, room_id: str, sender: str, event_id: str) -> str:
        """A message's text as a client shows it: its last edit's new content, else its own."""
        text = next(
            e["content"]["body"]
            for e in self.messages(room_id, sender)
            if e["event_id"] == event_id
        )
        for e in self.messages(room_id, sender):
            relation = e["content"].get("m.relates_to", {})
            if relation.get("rel_type") == "m.replace" and relation.get("event_id") == event_id:
                text = e["content"]["m.new_content"]["body"]
        return str(text)

    async def send(self, room_id: str, body: str, **content: Any) -> str:
        response = await self.client.room_send(
            room_id, "m.room.message", {"msgtype": "m.text", "body": body, **content}
        )
        assert isinstance(response, nio.RoomSendResponse), response
        return str(response.event_id)

    async def close(self) -> None:
        await self.client.close()


async def person(server: Synapse, account: Account) -> Person:
    client = nio.AsyncClient(server.url, account.user_id)
    client.restore_login(account.user_id, account.device_id, account.access_token)
    return Person(client, account)


async def room_with(
    owner: Person, *others: Person, bot: str, direct: bool = False, encrypted: bool = False
) -> str:
    """A room `owner` creates and invites the bot (and `others`, who join) to."""
    initial = (
        [
            {
                "type": "m.room.encryption",
                "state_key": "",
                "content": {"algorithm": "m.megolm.v1.aes-sha2"},
            }
        ]
        if encrypted
        else []
    )
    response = await owner.client.room_create(
        is_direct=direct, invite=[bot, *(o.user_id for o in others)], initial_state=initial
    )
    assert isinstance(response, nio.RoomCreateResponse), response
    for other in others:
        joined = await other.client.join(response.room_id)
        assert isinstance(joined, nio.JoinResponse), joined
    return str(response.room_id)


async def joined(person: Person, room_id: str, user_id: str, within: float = 30.0) -> None:
    """Wait until `user_id` has joined the room, as `person` sees it."""

    def member() -> bool:
        return any(
            e.get("type") == "m.room.member"
            and e.get("state_key") == user_id
            and e["content"].get("membership") == "join"
            for e in person.events.get(room_id, [])
        )

    await person.wait_for(member, within, f"{user_id} to join")
