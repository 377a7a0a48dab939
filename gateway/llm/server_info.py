"""What a model server says about itself: the models it lists (`GET /v1/models`) and how many
requests it runs at once (llama.cpp's `GET /props` at the server's root: `total_slots`;
llama-cpp-python's server runs one at a time, and marks its models `owned_by: "me"`).

The endpoint gate (gateway/llm/gate.py) takes its limit from here, doctor its model and
concurrency lines. Plain HTTP through aiohttp: `/props` is no part of the OpenAI API.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import aiohttp

from gateway.llm.server_tokens import server_root

log = logging.getLogger(__name__)

# Where a server does not say: about what hosted APIs and vLLM take without queueing, and
# agent.max_concurrency's default, so replies never wait behind each other by default.
DEFAULT_CONCURRENCY = 8
PROFILE_TIMEOUT = 5.0  # seconds for both reads together; a server that says nothing gets defaults
# llama-cpp-python's server marks every model it lists so; it runs one request at a time.
_LLAMA_CPP_PYTHON_OWNER = "me"


@dataclass(frozen=True, slots=True)
class ServerProfile:
    """`models`: the ids `/v1/models` lists, None where the server has no such list (or it did
    not answer); `slots`: requests it runs at once where it says, with `slots_source` saying how
    that is known."""

    models: tuple[str, ...] | None = None
    slots: int | None = None
    slots_source: str = ""


@dataclass(frozen=True, slots=True)
class Concurrency:
    """How many requests memgate lets be in flight to one endpoint, and why that many."""

    limit: int
    source: str

    def describe(self) -> str:
        """'1 request at a time (server's /props)', '8 requests at once (default)'."""
        amount = "1 request at a time" if self.limit == 1 else f"{self.limit} requests at once"
        return f"{amount} ({self.source})"


def concurrency(setting: int | str, profile: ServerProfile | None) -> Concurrency:
    """`llm.max_concurrency` as a number: the setting, else what the server says, else 8."""
    if isinstance(setting, int):
        return Concurrency(setting, "llm.max_concurrency")
    if profile is not None and profile.slots is not None:
        return Concurrency(profile.slots, profile.slots_source)
    return Concurrency(DEFAULT_CONCURRENCY, "default; the server does not say")


async def read_profile(
    base_url: str, api_key: str, within: float = PROFILE_TIMEOUT
) -> ServerProfile:
    """The server's model list and slot count, each None where it has none or fails to answer
    within `within` seconds (a debug line: every use has a default)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    models: tuple[str, ...] | None = None
    owners: set[str] = set()
    slots: int | None = None
    try:
        async with asyncio.timeout(within), aiohttp.ClientSession(headers=headers) as client:
            listed = await _get_json(client, f"{base_url.rstrip('/')}/models")
            entries = listed.get("data") if isinstance(listed, dict) else None
            if isinstance(entries, list):
                found = [entry for entry in entries if isinstance(entry, dict)]
                models = tuple(str(entry["id"]) for entry in found if "id" in entry)
                owners = {str(entry.get("owned_by")) for entry in found}
            props = await _get_json(client, f"{server_root(base_url)}/props")
            total = props.get("total_slots") if isinstance(props, dict) else None
            if type(total) is int and total >= 1:
                slots = total
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        log.debug("server profile unreadable error=%s", type(exc).__name__)
    if slots is not None:
        return ServerProfile(models, slots, "server's /props")
    if _LLAMA_CPP_PYTHON_OWNER in owners:
        return ServerProfile(models, 1, "llama-cpp-python's server runs one at a time")
    return ServerProfile(models)


async def _get_json(client: aiohttp.ClientSession, url: str) -> object:
    """The JSON a GET answers, or None for any status but 200 (a 404: no such endpoint)."""
    async with client.get(url) as response:
        if response.status != 200:
            return None
        return await response.json(content_type=None)
