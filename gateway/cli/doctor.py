"""`memgate doctor`'s live checks of everything a first start depends on, one line each.

Each check gives ✓ or ✗ and, when it fails, what to change (! for a failure that costs one optional
tool only, which does not fail doctor). Unlike `memgate status` (offline and
fast), these calls reach the model, the embeddings endpoint, the chat platforms and the MCP
servers (each started, asked for its tools and stopped). They run side by side, each within its
own timeout, and each line is reported as its check completes: an endpoint that hangs holds up
only its own line, and that line says which timeout ran out. The timeouts a user sets for the
model and the embeddings endpoint count from the moment the command started, so the second the
openai SDK takes to import is inside them, not added to them: doctor on a hanging model is done
within llm.timeout. The fixed bounds of the channel and MCP checks count from their own start,
after their SDK's import (which a slow machine may take seconds over). The lines that need no
network are gateway/cli/checks.py's. The model's line (and memory.llm's, when set) also says
whether the server lists the model (a server without /v1/models is not judged) and how many
requests it runs at once (gateway/llm/server_info.py). With `tools.web` in the config, the web
search provider is asked one query and a small public page is fetched through web_fetch's guard.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from channels.base import ChannelConfigError
from gateway.cli.checks import Check, bounded, check_lock, unanswered
from gateway.config.file import OPENAI_URL, require_api_key
from gateway.config.models import Config, LLMConfig
from gateway.config.tools import McpServerConfig
from gateway.errors import ConfigError, LLMError, LLMStatusError, LLMToolsUnsupportedError
from gateway.llm.clients import OpenAIEmbedder
from gateway.llm.provider import OpenAIProvider
from gateway.llm.server_info import PROFILE_TIMEOUT, ServerProfile, concurrency, read_profile
from gateway.llm.types import ChatResponse, ToolSupport, endpoint_of
from gateway.tools.web.tools import PROBE_URL, probe_fetch, probe_search
from gateway.tools.web.tools import configured as web_configured
from memory.errors import EmbeddingError

CHANNEL_TIMEOUT = 10.0  # two small REST calls: getMe and the webhook; a login and the app's flags
MCP_LIST_TIMEOUT = 5.0  # listing a started server's tools, after its start_timeout
PROBE_TOKENS = 64  # room for a tool call (and a little thinking), few enough to come back quickly
LISTED = 8  # models named when llm.model is not among them
WEB_FETCH_TIMEOUT = 12.0  # the probe's own limit is 10 s; this is the backstop

# Offered with every model request of the check: once as the agent offers tools (the model may
# call it or not), once forced by `tool_choice`, which a server that supports tools must honour.
_PING_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "ping",
        "description": "Does nothing.",
        "parameters": {"type": "object", "properties": {}},
    },
}
_FORCE_PING = {"type": "function", "function": {"name": "ping"}}
_ASKED = [{"role": "user", "content": "Reply with the word OK."}]
_TOLD = [{"role": "user", "content": "Call the ping tool."}]
TOOLS_IGNORED = (
    "tools ignored: the server answered text to a forced tool call; "
    "consolidation will use plain-text JSON mode"
)


async def run_checks(
    config: Config, report: Callable[[Check], None], started: float | None = None
) -> bool:
    """The live checks side by side, each handed to `report` as it completes; True if all passed.

    Each is bounded by its own timeout, counted from `started` (a `time.monotonic()` stamp; by
    default now), so one that hangs delays no other line."""
    since = time.monotonic() if started is None else started
    passed = True

    async def run(probe: Awaitable[Check]) -> None:
        nonlocal passed
        check = await probe
        passed = passed and check.passed
        report(check)

    async with asyncio.TaskGroup() as group:
        for probe in _live_checks(config, since):
            group.create_task(run(probe))
    return passed


def left(limit: float, since: float) -> float:
    """What remains of `limit` seconds counted from `since` (a `time.monotonic()` stamp)."""
    return max(0.0, limit - (time.monotonic() - since))


def _live_checks(config: Config, since: float) -> list[Awaitable[Check]]:
    checks: list[Awaitable[Check]] = [check_lock(config), check_llm(config, since)]
    if config.memory.llm is not None:
        checks.append(check_memory_llm(config, since))
    if config.memory.embeddings is not None:
        checks.append(check_embeddings(config, since))
    # A platform's SDK, and MCP's (half a second to two seconds each), is imported only for a
    # config that uses it: no doctor line waits for an SDK it does not need.
    telegram, discord = config.channels.telegram, config.channels.discord
    if telegram.enabled:
        from channels.telegram.connect import probe_telegram

        probe = probe_telegram(token=telegram.token, base_url=telegram.base_url)
        checks.append(check_channel("telegram", probe))
    if discord.enabled:
        from channels.discord.connect import probe_discord

        probe = probe_discord(token=discord.token, api_base=discord.api_base)
        checks.append(check_channel("discord", probe))
    if config.channels.matrix.enabled:
        from channels.matrix.connect import probe_matrix

        probe = probe_matrix(config.channels.matrix, config.state_dir)
        checks.append(check_channel("matrix", probe))
    slack = config.channels.slack
    if slack.enabled:
        from channels.slack.connect import probe_slack

        probe = probe_slack(token=slack.token, app_token=slack.app_token, api_base=slack.api_base)
        checks.append(check_channel("slack", probe))
    checks += [check_mcp(name, server) for name, server in config.tools.mcp_servers.items()]
    if web_configured(config):
        if config.tools.web.search.provider is not None:
            checks.append(check_web_search(config))
        if config.tools.web.fetch:
            checks.append(check_web_fetch(config))
    return checks


async def check_web_search(config: Config) -> Check:
    """One query to the search provider: whether it answers, or why not (key, rate, down)."""
    settings = config.tools.web.search

    async def asked() -> Check:
        return Check("web search", *await probe_search(config))

    source = f"the {settings.provider} search provider"
    limit = settings.timeout + 1  # its own timeout gives the clearer line; this is the backstop
    return await bounded("web search", limit, source, "tools.web.search.timeout", asked())


async def check_web_fetch(config: Config) -> Check:
    """Whether web_fetch can reach out: a small public page read through its guard."""

    async def fetched() -> Check:
        ok, detail = await probe_fetch(config)
        if not ok:  # memgate runs without it: web_fetch then answers the model with the same cause
            detail += " (only web_fetch is affected)"
        return Check("web fetch", ok, detail, warns=True)

    return await bounded("web fetch", WEB_FETCH_TIMEOUT, PROBE_URL, "", fetched())


async def check_channel(name: str, probe: Awaitable[str]) -> Check:
    """A chat platform's live probe: what it found, or why it refused the settings."""

    async def described() -> Check:
        try:
            return Check(name, True, await probe)
        except ChannelConfigError as exc:
            return Check(name, False, str(exc))

    return await bounded(name, CHANNEL_TIMEOUT, name.capitalize(), "", described())


async def check_llm(config: Config, since: float | None = None) -> Check:
    """The model answers a request as the agent sends it, and a call forced to a tool comes back
    as that tool's call; the server lists the model (where it lists any), and says how many
    requests it runs at once; all within llm.timeout of `since` (by default now). `memgate setup`
    tests its answers with it."""
    try:
        require_api_key(config)
    except ConfigError as exc:
        return Check("llm", False, str(exc))
    return await _check_model("llm", config.llm, since)


async def check_memory_llm(config: Config, since: float | None = None) -> Check:
    """memory.llm's model, as check_llm checks llm's: consolidation forces its tool calls."""
    own = config.consolidation_llm
    if own.base_url.rstrip("/") == OPENAI_URL and not own.api_key:
        return Check(
            "memory.llm",
            False,
            "memory.llm.api_key and llm.api_key are empty and memory.llm.base_url is OpenAI's: "
            "set one of them",
        )
    return await _check_model("memory.llm", own, since)


async def _check_model(label: str, llm: LLMConfig, since: float | None) -> Check:
    deadline = (time.monotonic() if since is None else since) + llm.timeout
    provider = OpenAIProvider(
        base_url=llm.base_url,
        api_key=llm.api_key,
        model=llm.model,
        # A second more than the check's bound, so that the bound, which names the key, speaks.
        timeout=llm.timeout + 1,
        max_retries=0,
        max_tokens=PROBE_TOKENS,
        tool_support=ToolSupport("on"),
    )
    try:
        probed = await _probe_llm(label, provider, llm.timeout, deadline)
    finally:
        await provider.close()
    if not probed.ok:
        return probed
    # After the requests, not beside them: a one-slot server's list waits for its slot (and
    # while another client holds it, the model is not judged rather than doctor kept waiting).
    within = min(PROFILE_TIMEOUT, max(0.0, deadline - time.monotonic()))
    profile = await read_profile(llm.base_url, llm.api_key, within)
    listed = _unlisted(label, llm.model, profile)
    if listed is not None:
        return listed
    setting = llm.max_concurrency if label == "llm" else "auto"
    return Check(label, True, f"{probed.detail}; {concurrency(setting, profile).describe()}")


def _unlisted(label: str, model: str, profile: ServerProfile) -> Check | None:
    """A ✗ when the server lists its models and `model` is not one of them; None otherwise (a
    server without /v1/models is not judged)."""
    if profile.models is None or model in profile.models:
        return None
    names = ", ".join(repr(name) for name in profile.models[:LISTED]) or "none"
    if len(profile.models) > LISTED:
        names += f" and {len(profile.models) - LISTED} more"
    return Check(
        label,
        False,
        f"{label}.model {model!r} is not among the models the server lists ({names}): "
        f"set {label}.model to one of them (a server that answered chose its model itself)",
    )


async def _probe_llm(label: str, provider: OpenAIProvider, limit: float, deadline: float) -> Check:
    """The agent's request first (tools offered), then the forced one; one at a time, as a local
    server with one slot would take them anyway, and all of them by `deadline` (monotonic)."""
    timed_out = unanswered(label, provider.endpoint, limit, "llm.timeout")
    plain = await _attempt(provider.chat(_ASKED, [_PING_TOOL]), deadline)
    if plain is None:
        return timed_out
    if isinstance(plain, LLMToolsUnsupportedError):
        bare = await _attempt(provider.chat(_ASKED), deadline)
        if bare is None:
            return timed_out
        if isinstance(bare, LLMError):
            return Check(label, False, bare.cause)
        ok, tools = True, "tools NOT supported (keep llm.tools: auto, or set it to off)"
    elif isinstance(plain, LLMError):
        return Check(label, False, plain.cause)
    else:
        forcing = provider.chat(_TOLD, [_PING_TOOL], tool_choice=_FORCE_PING)
        forced = await _attempt(forcing, deadline)
        if forced is None:
            return timed_out
        ok, tools = _forced_verdict(forced)
    return Check(label, ok, f"model {provider.model!r} at {provider.endpoint} answers; {tools}")


async def _attempt(
    call: Awaitable[ChatResponse], deadline: float
) -> ChatResponse | LLMError | None:
    """The answer, the model's error, or None when `deadline` (monotonic) passed without either."""
    bound = asyncio.timeout(max(0.0, deadline - time.monotonic()))
    try:
        async with bound:
            return await call
    except LLMError as exc:
        return exc
    except TimeoutError:
        if not bound.expired():
            raise  # not this bound's: the provider turns its own timeouts into LLMError
        return None


def _forced_verdict(forced: ChatResponse | LLMError) -> tuple[bool, str]:
    """What the answer to the forced call says of tool calling: (passes, what to print)."""
    if isinstance(forced, LLMError):
        refused = isinstance(forced, LLMStatusError) and forced.status in (400, 422)
        if refused and "tool_choice" in str(forced):
            return True, "tools supported; forcing one is refused, so consolidation asks with auto"
        return False, f"a forced tool call failed: {forced.cause}"
    if forced.tool_calls:
        return True, "tools supported"
    if forced.finish_reason == "length":
        return True, f"tools unclear: the answer to a forced tool call passed {PROBE_TOKENS} tokens"
    return True, TOOLS_IGNORED


async def check_embeddings(config: Config, since: float) -> Check:
    settings = config.memory.embeddings
    assert settings is not None
    embedder = OpenAIEmbedder(
        base_url=settings.base_url,
        api_key=settings.api_key,
        model=settings.model,
        timeout=settings.timeout + 1,  # the check's bound, which names the key, speaks first
    )

    async def embedded() -> Check:
        try:
            [vector] = await embedder.embed(["ping"])
        except (EmbeddingError, ValueError) as exc:
            return Check(
                "embeddings",
                False,
                f"{exc} (memory.embeddings.base_url / .model / .api_key; "
                "search falls back to keywords)",
            )
        answer = f"model {settings.model!r} answers ({len(vector)} dimensions)"
        return Check("embeddings", True, answer)

    source = endpoint_of(settings.base_url)
    try:
        return await bounded(
            "embeddings",
            left(settings.timeout, since),
            source,
            "memory.embeddings.timeout",
            embedded(),
            shown=settings.timeout,
        )
    finally:
        await embedder.close()


async def check_mcp(name: str, settings: McpServerConfig) -> Check:
    """Start the server as `memgate run` would: its state, and the tools the model would get."""
    label = f"mcp {name}"
    if not settings.enabled:
        return Check(label, True, f"disabled (tools.mcp_servers.{name}.enabled)")
    # A backstop: the server's start is bounded by start_timeout already, listing its tools not.
    limit = settings.start_timeout + MCP_LIST_TIMEOUT
    setting = f"tools.mcp_servers.{name}.start_timeout + {MCP_LIST_TIMEOUT:g} s"
    return await bounded(label, limit, "the server", setting, _started(label, name, settings))


async def _started(label: str, name: str, settings: McpServerConfig) -> Check:
    from gateway.tools.mcp.servers import UP, probe  # see _live_checks

    connection = await probe(name, settings)
    if connection.state != UP:
        return Check(
            label,
            False,
            f"failed to start: {connection.error} "
            f"(tools.mcp_servers.{name}.command / .url; memgate runs without it)",
        )
    tools = ", ".join(tool.qualified for tool in connection.tools) or "none"
    scopes = "+".join(settings.scopes)
    return Check(label, True, f"up; {len(connection.tools)} tool(s) for {scopes}: {tools}")
