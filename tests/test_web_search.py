"""web_search through the configured provider, against fake Brave, SearXNG and Tavily APIs on
loopback (each reached through `tools.web.search.base_url`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.tools.web.untrusted import UNTRUSTED_OPEN
from tests.conftest import RuntimeFactory, inbound
from tests.fakes.llm import FakeLLM, text, tool_call, tool_results
from tests.fakes.web import ARTICLE_TEXT, RESULTS, FakeSearch, FakeSite
from tests.web_helpers import call, web_registry

pytestmark = pytest.mark.timeout(60)


def provider(fake: FakeSearch, name: str, **extra: Any) -> dict[str, Any]:
    base = f"{fake.url}/res/v1" if name == "brave" else fake.url
    key = {} if name == "searxng" else {"api_key": "search-key-0123456789"}
    return {"search": {"provider": name, "base_url": base, **key, **extra}}


@pytest.mark.parametrize("name", ["brave", "searxng", "tavily"])
async def test_results_reach_the_model(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM, fake_search: FakeSearch, name: str
) -> None:
    """The model's web_search call comes back as numbered titles, URLs and snippets."""
    async with make_runtime({"tools": {"web": provider(fake_search, name)}}) as runtime:
        fake_llm.push(tool_call("web_search", {"query": "lighthouse keeper"}, call_id="s1"))
        fake_llm.push(text("found it"))
        await runtime.agent.handle(inbound("look up the lighthouse keeper"))
    [result] = tool_results(fake_llm.chat_requests()[-1])
    assert UNTRUSTED_OPEN in result
    for number, (title, url, snippet) in enumerate(RESULTS, start=1):
        assert f"{number}. {title}\n   {url}\n   {snippet}" in result
    [sent] = fake_search.requests
    if name == "brave":
        assert sent["query"] == {"q": "lighthouse keeper", "count": "5"}
        assert sent["headers"]["X-Subscription-Token"] == "search-key-0123456789"
    elif name == "searxng":
        assert sent["query"] == {"q": "lighthouse keeper", "format": "json"}
    else:
        assert sent["body"] == {"query": "lighthouse keeper", "max_results": 5}
        assert sent["headers"]["Authorization"] == "Bearer search-key-0123456789"


@pytest.mark.parametrize("name", ["brave", "searxng", "tavily"])
@pytest.mark.parametrize(
    ("fail", "said"),
    [
        ("401", "refused"),
        ("429", "rate limit is reached (HTTP 429); it asks to wait 7 s; try again later"),
        ("hang", "did not answer within 1 s; try again later"),
    ],
)
async def test_a_refused_key_a_rate_limit_and_a_timeout_are_clear_results(
    tmp_path: Path, fake_search: FakeSearch, name: str, fail: str, said: str
) -> None:
    """401, 429 and a provider that never answers each become one sentence for the model."""
    fake_search.fail = fail
    tools = web_registry(tmp_path, provider(fake_search, name, timeout=1))
    result = await call(tools, "web_search", query="anything")
    assert result.startswith(f"Error: the {name} search provider") or name == "searxng"
    assert said in result
    if fail == "401":
        hint = "search.formats" if name == "searxng" else "check tools.web.search.api_key"
        assert hint in result


async def test_a_provider_that_is_down_is_a_clear_result(tmp_path: Path, refused_port: int) -> None:
    """Nothing listening at the provider's address: the result says it is down."""
    search = {"provider": "searxng", "base_url": f"http://127.0.0.1:{refused_port}"}
    tools = web_registry(tmp_path, {"search": search})
    result = await call(tools, "web_search", query="anything")
    assert result.startswith("Error: the searxng search provider is down or unreachable")


async def test_without_a_provider_web_search_is_not_offered(tmp_path: Path) -> None:
    """No tools.web.search.provider: only web_fetch is offered."""
    assert web_registry(tmp_path, {}).names() == ["web_fetch"]


def offered(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools") or []]


async def test_groups_get_the_web_tools_only_when_scopes_name_them(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM, fake_search: FakeSearch
) -> None:
    """By default a group and a guest are not offered web_fetch or web_search; the owner is."""
    async with make_runtime({"tools": {"web": provider(fake_search, "searxng")}}) as runtime:
        await runtime.agent.handle(inbound("hi", chat_id="-100", is_group=True))
        group = offered(fake_llm.chat_requests()[-1])
        await runtime.agent.handle(inbound("hi", chat_id="9", sender_is_owner=False))
        guest = offered(fake_llm.chat_requests()[-1])
        await runtime.agent.handle(inbound("hi"))
        private = offered(fake_llm.chat_requests()[-1])
    assert not {"web_fetch", "web_search"} & {*group, *guest}
    assert {"web_fetch", "web_search"} <= set(private)


async def test_with_scopes_group_a_group_is_offered_them_and_the_guard_holds(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM, fake_search: FakeSearch, fake_site: FakeSite
) -> None:
    """`scopes: [group]`: the group may search and read the allowed site, never loopback."""
    web = {
        **provider(fake_search, "searxng"),
        "scopes": ["group"],
        "ports": [80, 443, fake_site.port],
        "allow_private": [f"127.0.0.1:{fake_site.port}"],
    }
    async with make_runtime({"tools": {"web": web}}) as runtime:
        fake_llm.push(tool_call("web_fetch", {"url": f"{fake_site.url}/article"}, call_id="f1"))
        fake_llm.push(tool_call("web_fetch", {"url": f"http://localhost:{fake_site.port}/"}))
        fake_llm.push(text("done"))
        await runtime.agent.handle(inbound("read these", chat_id="-100", is_group=True))
        request = fake_llm.chat_requests()[-1]
        await runtime.agent.handle(inbound("hi"))
        private = offered(fake_llm.chat_requests()[-1])
    assert {"web_fetch", "web_search"} <= set(offered(request))
    page, inside = tool_results(request)
    assert ARTICLE_TEXT in page
    assert inside.startswith("Error: ") and "refused (loopback address)" in inside
    assert fake_site.paths == ["/article"]
    assert "web_fetch" not in private  # scopes names group only
