"""What a model server says about itself: the models it lists (`GET /v1/models`) and how many
requests it runs at once (llama.cpp's `GET /props` at the server's root: `total_slots`;
llama-cpp-python's server runs one at a time: its `/openapi.json` is titled so, and it marks the
models it lists `owned_by: "me"`).

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
# llama-cpp-python's server runs one request at a time. It marks every model it lists so, and
# titles its API so (FastAPI serves /openapi.json at once; /v1/models waits for the busy slot).
_LLAMA_CPP_PYTHON_OWNER = "me"
_LLAMA_CPP_PYTHON_TITLE = "llama.cpp Python"
_ONE_AT_A_TIME = "llama-cpp-python's server runs one at a time"


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
    base_url: str, api_key: str, within: float = PROFILE_TIMEOUT, *, listing: bool = True
) -> ServerProfile:
    """The server's slot count and (with `listing`) its model list, each None where it has none
    or fails to answer within `within` seconds (a debug line: every use has a default). The slot
    count comes first: a busy one-slot server answers it at once, its list only when free."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    root = server_root(base_url)
    models: tuple[str, ...] | None = None
    slots, source = None, ""
    try:
        async with asyncio.timeout(within), aiohttp.ClientSession(headers=headers) as client:
            props = await _get_json(client, f"{root}/props")
            total = props.get("total_slots") if isinstance(props, dict) else None
            if type(total) is int and total >= 1:
                slots, source = total, "server's /props"
            elif _LLAMA_CPP_PYTHON_TITLE in _title(await _get_json(client, f"{root}/openapi.json")):
                slots, source = 1, _ONE_AT_A_TIME
            if listing:
                listed = await _get_json(client, f"{base_url.rstrip('/')}/models")
                entries = listed.get("data") if isinstance(listed, dict) else None
                if isinstance(entries, list):
                    found = [entry for entry in entries if isinstance(entry, dict)]
                    models = tuple(str(entry["id"]) for entry in found if "id" in entry)
                    if slots is None and any(
                        entry.get("owned_by") == _LLAMA_CPP_PYTHON_OWNER for entry in found
                    ):
                        slots, source = 1, _ONE_AT_A_TIME
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        log.debug("server profile unreadable error=%s", type(exc).__name__)
    return ServerProfile(models, slots, source)


def _title(described: object) -> str:
    """The title of an OpenAPI description ("" if it has none)."""
    info = described.get("info") if isinstance(described, dict) else None
    title = info.get("title") if isinstance(info, dict) else None
    return title if isinstance(title, str) else ""


async def _get_json(client: aiohttp.ClientSession, url: str) -> object:
    """The JSON a GET answers, or None for any status but 200 (a 404: no such endpoint)."""
    async with client.get(url) as response:
        if response.status != 200:
            return None
        return await response.json(content_type=None)
