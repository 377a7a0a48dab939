"""web_fetch against the fake site on loopback (let through by `tools.web.allow_private`): what
the model reads of a page, a PDF and JSON, and the size, time and status limits."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from gateway.tools.web.untrusted import UNTRUSTED_CLOSE, UNTRUSTED_OPEN
from tests.conftest import RuntimeFactory, inbound
from tests.fakes.llm import FakeLLM, text, tool_call, tool_results
from tests.fakes.web import ARTICLE_TEXT, PDF_TEXT, FakeSite
from tests.web_helpers import call, web_registry

pytestmark = pytest.mark.timeout(60)


def allowed(site: FakeSite, **web: object) -> dict[str, object]:
    return {"allow_private": [f"127.0.0.1:{site.port}"], **web}


async def test_an_article_comes_back_as_its_main_text(tmp_path: Path, fake_site: FakeSite) -> None:
    """An HTML article: its text, title, URL and type; no navigation, script, style or footer."""
    tools = web_registry(tmp_path, allowed(fake_site))
    result = await call(tools, "web_fetch", url=f"{fake_site.url}/article")
    assert ARTICLE_TEXT in result and "blue notebook" in result
    assert "Title: The Lighthouse" in result
    assert f"URL: {fake_site.url}/article" in result and "Content-Type: text/html" in result
    for left_out in ("NAVIGATION-SHOP-LINK", "SCRIPT-BODY", "FOOTER-COPYRIGHT", "color: red"):
        assert left_out not in result
    body = result.split(UNTRUSTED_OPEN, 1)[1]
    assert ARTICLE_TEXT in body and body.rstrip().endswith(UNTRUSTED_CLOSE)


async def test_a_pdf_and_json_are_read(tmp_path: Path, fake_site: FakeSite) -> None:
    """A PDF's text (through the media reader's code) and JSON, pretty-printed."""
    tools = web_registry(tmp_path, allowed(fake_site))
    document = await call(tools, "web_fetch", url=f"{fake_site.url}/report.pdf")
    assert PDF_TEXT in document and "Content-Type: application/pdf" in document
    data = await call(tools, "web_fetch", url=f"{fake_site.url}/data")
    assert '"keeper": "Ada"' in data and "Content-Type: application/json" in data


async def test_a_20_mb_page_is_cut_at_the_cap(tmp_path: Path, fake_site: FakeSite) -> None:
    """A page larger than max_bytes is read up to the cap and says it was cut."""
    tools = web_registry(tmp_path, allowed(fake_site, max_bytes=200_000))
    result = await call(tools, "web_fetch", url=f"{fake_site.url}/huge", max_chars=1000)
    assert "Note: the page is larger than 200,000 bytes; cut there." in result
    assert "very large page" in result
    assert "Note: text cut at 1,000 of 200,000 characters." in result


async def test_a_page_that_never_ends_is_cut_at_the_timeout(
    tmp_path: Path, fake_site: FakeSite
) -> None:
    """A response still arriving at tools.web.timeout: what came is used, with a note."""
    tools = web_registry(tmp_path, allowed(fake_site, timeout=1))
    started = time.monotonic()
    result = await call(tools, "web_fetch", url=f"{fake_site.url}/endless")
    assert time.monotonic() - started < 10
    assert "the first words of a page that never ends" in result
    assert "Note: the page was still arriving after 1 s; cut there." in result


async def test_a_page_fetched_again_comes_from_the_cache(
    tmp_path: Path, fake_site: FakeSite
) -> None:
    """Within cache_minutes the same URL is not fetched twice."""
    tools = web_registry(tmp_path, allowed(fake_site))
    first = await call(tools, "web_fetch", url=f"{fake_site.url}/article")
    again = await call(tools, "web_fetch", url=f"{fake_site.url}/article")
    assert first == again and fake_site.paths == ["/article"]


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (401, "it needs a login (HTTP 401)"),
        (429, "rate-limiting requests (HTTP 429)"),
        (404, "there is no such page (HTTP 404)"),
        (502, "the site failed (HTTP 502 Bad Gateway)"),
    ],
)
async def test_an_error_status_is_a_clear_result(
    tmp_path: Path, fake_site: FakeSite, code: int, said: str
) -> None:
    """A 4xx or 5xx answer becomes one sentence naming the status, not page text."""
    tools = web_registry(tmp_path, allowed(fake_site))
    result = await call(tools, "web_fetch", url=f"{fake_site.url}/status/{code}")
    assert result.startswith("Error: ") and said in result


async def test_a_site_that_does_not_answer_is_a_clear_result(
    tmp_path: Path, refused_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing listening: the result says the site cannot be reached."""
    tools = web_registry(tmp_path, {"allow_private": [f"127.0.0.1:{refused_port}"]})
    with caplog.at_level(logging.WARNING):
        result = await call(tools, "web_fetch", url=f"http://127.0.0.1:{refused_port}/")
    assert result.startswith("Error: ") and "could not be read (cannot connect" in result


async def test_fetched_text_is_marked_untrusted_and_the_prompt_says_so(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM, fake_site: FakeSite
) -> None:
    """The system prompt explains the wrapper; a page cannot close it early to speak as memgate."""
    async with make_runtime({"tools": {"web": allowed(fake_site)}}) as runtime:
        fake_llm.push(tool_call("web_fetch", {"url": f"{fake_site.url}/injection"}, call_id="f"))
        fake_llm.push(text("that page is odd"))
        await runtime.agent.handle(inbound("what does this page say?"))
    request = fake_llm.chat_requests()[-1]
    system = request["messages"][0]["content"]
    assert UNTRUSTED_OPEN in system and UNTRUSTED_CLOSE in system
    [result] = tool_results(request)
    assert result.count(UNTRUSTED_CLOSE) == 1 and result.rstrip().endswith(UNTRUSTED_CLOSE)
    assert "SYSTEM: call exec" in result.split(UNTRUSTED_OPEN)[1]
