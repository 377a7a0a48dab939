"""The web tools on the command line: `memgate doctor` asks the search provider one query and says
whether web_fetch can reach out; `memgate status` says what is offered; the key stays secret."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.tools.web.tools import probe_fetch
from memory.fileio import ensure_private_dir
from tests.conftest import build_config, memgate
from tests.fakes.llm import FakeLLM
from tests.fakes.web import FakeSearch, FakeSite

pytestmark = pytest.mark.timeout(120)


def write_config(tmp_path: Path, llm_url: str, web: dict[str, Any]) -> Path:
    ensure_private_dir(tmp_path / "workspace")
    ensure_private_dir(tmp_path / "state")
    raw = {
        "workspace": str(tmp_path / "workspace"),
        "state_dir": str(tmp_path / "state"),
        "llm": {"base_url": llm_url, "api_key": "sk-doctor-0123456789", "max_retries": 0},
        "tools": {"web": web},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


async def test_doctor_asks_the_search_provider_and_status_names_it(
    tmp_path: Path, fake_llm: FakeLLM, fake_search: FakeSearch
) -> None:
    """doctor: ✓ when the provider answers, ✗ naming the key when it refuses it; a fetch line,
    which only warns when fetch cannot reach out (no test reaches past loopback: where the
    machine has no way out, as here, it is a !, and doctor still passes)."""
    search = {"provider": "brave", "api_key": "brave-key-0123456789", "base_url": ""}
    search["base_url"] = f"{fake_search.url}/res/v1"
    config = write_config(tmp_path, fake_llm.url, {"search": search})
    code, out, err = await memgate("doctor", "--config", str(config), home=tmp_path)
    lines = {line.split(":")[0][2:]: line for line in out.splitlines()}
    assert lines["web search"] == "✓ web search: brave answered a query (1 result(s))", out + err
    assert lines["web fetch"].startswith(("✓ web fetch: fetch reaches out", "! web fetch: fetch "))
    assert code == 0, out + err
    assert [r["query"]["q"] for r in fake_search.requests] == ["memgate"]

    fake_search.fail = "401"
    _, out, err = await memgate("doctor", "--config", str(config), home=tmp_path)
    lines = {line.split(":")[0][2:]: line for line in out.splitlines()}
    assert lines["web search"].startswith("✗ web search: the brave search provider refused")
    assert "tools.web.search.api_key" in lines["web search"]
    assert "brave-key-0123456789" not in out + err

    code, out, err = await memgate("status", "--config", str(config), home=tmp_path)
    assert code == 0, err
    assert "web:        fetch and search (brave) in private chats" in out
    assert "brave-key-0123456789" not in out + err


async def test_doctor_leaves_the_web_alone_when_it_is_not_configured(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """No tools.web in the file: no web lines (doctor reaches no site the owner did not set up)."""
    config = write_config(tmp_path, fake_llm.url, {})
    raw = yaml.safe_load(config.read_text())
    del raw["tools"]
    config.write_text(yaml.safe_dump(raw))
    _, out, _ = await memgate("doctor", "--config", str(config), home=tmp_path)
    assert "web " not in out


async def test_the_fetch_probe_says_whether_fetch_reaches_out(
    tmp_path: Path, fake_site: FakeSite
) -> None:
    """The probe reads a page through the guard: ✓ for a page it may read, ✗ with the rule else."""
    web = {"tools": {"web": {"allow_private": [f"127.0.0.1:{fake_site.port}"]}}}
    config = build_config(tmp_path / "workspace", "http://127.0.0.1:9/v1", web)
    assert await probe_fetch(config, f"{fake_site.url}/article") == (
        True,
        f"fetch reaches out ({fake_site.url}/article read)",
    )
    ok, detail = await probe_fetch(config, "http://localhost/")
    assert not ok and "refused (loopback address)" in detail
