"""tools.mcp_servers as a person writes it: validation, secrets, `memgate doctor` and `memgate status`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config.file import parse_config
from gateway.errors import ConfigError
from memory.fileio import ensure_private_dir
from tests.conftest import memgate
from tests.fakes.llm import FakeLLM

pytestmark = pytest.mark.timeout(120)

FAKE = {"command": sys.executable, "args": ["-m", "tests.fakes.mcp_server", "stdio"]}


def parse(servers: dict[str, Any], env: dict[str, str] | None = None) -> Any:
    raw = {"workspace": "/tmp/ws", "tools": {"mcp_servers": servers}}
    return parse_config(raw, Path("/etc/memgate.yaml"), env=env or {})


def test_a_server_needs_exactly_one_transport() -> None:
    """Both command and url, or neither, is an error naming the file and the server's key."""
    with pytest.raises(ConfigError, match=r"memgate\.yaml: tools\.mcp_servers\.x: .*either"):
        parse({"x": {"command": "npx", "url": "http://127.0.0.1:1/mcp"}})
    with pytest.raises(ConfigError, match=r"tools\.mcp_servers\.x: .*either command"):
        parse({"x": {}})
    with pytest.raises(ConfigError, match=r"tools\.mcp_servers\.x: .*headers belong"):
        parse({"x": {"command": "npx", "headers": {"A": "b"}}})
    with pytest.raises(ConfigError, match=r"tools\.mcp_servers\.x\.scopes\[0\]"):
        parse({"x": {"command": "npx", "scopes": ["public"]}})


def test_server_names_must_make_valid_tool_names() -> None:
    """A name with a space, a dot or a double underscore is refused before anything starts."""
    for name in ("my server", "a.b", "a__b", "x" * 33):
        with pytest.raises(ConfigError, match=r"tools\.mcp_servers"):
            parse({name: {"command": "npx"}})
    assert list(parse({"my-cal_2": {"command": "npx"}}).tools.mcp_servers) == ["my-cal_2"]


def test_headers_and_env_are_secrets_never_shown_in_errors() -> None:
    """Header and env values are redacted from logs and left out of error messages."""
    config = parse(
        {
            "web": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "${TOK}"}},
            "cmd": {"command": "npx", "env": {"API_KEY": "env-value-0123"}},
        },
        env={"TOK": "Bearer tok-0123456789"},
    )
    assert {"Bearer tok-0123456789", "tok-0123456789", "env-value-0123"} <= set(config.secrets())
    with pytest.raises(ConfigError) as caught:
        parse({"web": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": 5}}})
    assert "tools.mcp_servers.web.headers.Authorization" in str(caught.value)
    assert " = 5" not in str(caught.value)


def test_unset_variables_of_a_disabled_server_are_harmless() -> None:
    """${VAR} unset under an enabled server is an error; under a disabled one it is not."""
    entry = {"command": "npx", "env": {"KEY": "${MCP_KEY}"}}
    with pytest.raises(ConfigError, match=r"tools\.mcp_servers\.x\.env\.KEY.*MCP_KEY"):
        parse({"x": entry})
    assert not parse({"x": {**entry, "enabled": False}}).tools.mcp_servers["x"].enabled


async def test_doctor_lists_each_server_its_state_and_tools_and_status_counts_them(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """doctor: ✓ with the tools of a working server, ✗ naming the key for a broken one."""
    ensure_private_dir(tmp_path / "workspace")
    ensure_private_dir(tmp_path / "state")
    config = tmp_path / "config.yaml"
    raw = {
        "workspace": str(tmp_path / "workspace"),
        "state_dir": str(tmp_path / "state"),
        "llm": {"base_url": fake_llm.url, "api_key": "sk-doctor-0123456789", "max_retries": 0},
        "tools": {
            "mcp_servers": {
                "demo": {**FAKE, "allow": ["add", "sleep"], "env": {"S": "mcp-env-secret-42"}},
                "broken": {"command": "/nonexistent/server"},
                "later": {**FAKE, "enabled": False},
            }
        },
    }
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    code, out, err = await memgate("doctor", "--config", str(config), home=tmp_path)
    lines = {line.split(":")[0][2:]: line for line in out.splitlines()}
    assert code == 1, out + err
    assert lines["mcp demo"] == "✓ mcp demo: up; 2 tool(s) for private: demo__add, demo__sleep"
    assert lines["mcp broken"].startswith("✗ mcp broken: failed to start: FileNotFoundError")
    assert "tools.mcp_servers.broken.command" in lines["mcp broken"]
    assert lines["mcp later"] == "✓ mcp later: disabled (tools.mcp_servers.later.enabled)"
    assert "mcp-env-secret-42" not in out + err

    code, out, err = await memgate("status", "--config", str(config), home=tmp_path)
    assert code == 0, err
    assert "mcp:        2 server(s) enabled (demo, broken), 1 disabled" in out
