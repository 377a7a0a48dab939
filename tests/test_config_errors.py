"""A config file's mistakes are reported all at once, one line each with its line number."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gateway.config.file import load_config
from gateway.service.access import reload_access
from tests.conftest import memgate

PREFIX = "memgate: configuration error: "


async def test_every_bad_key_is_one_line_with_its_line_number(tmp_path: Path) -> None:
    """Four mistakes in one file: exit 78 with four lines `path:line: key = value: message`,
    the URL's password masked and the secret's value never shown."""
    config = tmp_path / "config.yaml"
    config.write_text(
        f"workspace: {tmp_path / 'ws'}\n"
        "llm:\n"
        "  base_url: http://bob:hunter2-pw@localhost:8000/v1\n"
        "  temperature: 5\n"
        "channels:\n"
        "  telegram:\n"
        "    token: [sk-very-secret-value-123]\n"
        "colour: blue\n"
    )
    code, out, err = await memgate("status", "--config", str(config), home=tmp_path)
    assert code == 78 and out == "", err
    assert err.startswith(PREFIX)
    lines = err.removeprefix(PREFIX).splitlines()
    assert sorted(lines) == sorted(
        [
            f"{config}:3: llm.base_url = 'http://bob:***@localhost:8000/v1': must not carry "
            "user:password (the endpoint is sent the api_key as a Bearer token: put the key in "
            "api_key)",
            f"{config}:4: llm.temperature = 5: Input should be less than or equal to 2",
            f"{config}:7: channels.telegram.token: Input should be a valid string",
            f"{config}:8: unknown key 'colour'",
        ]
    )
    assert "hunter2" not in err and "sk-very-secret" not in err


async def test_rules_across_keys_and_unset_variables_are_all_reported(tmp_path: Path) -> None:
    """With every key valid on its own, each broken rule between keys and each unset variable is
    a line of its own, on the key a person would change."""
    config = tmp_path / "config.yaml"
    config.write_text(
        f"workspace: {tmp_path / 'ws'}\n"
        "llm:\n"
        "  api_key: ${MEMGATE_TEST_UNSET_KEY}\n"
        "  context_window: 4096\n"
        "  max_tokens: 4000\n"
        "memory:\n"
        "  consolidate_at: 0.5\n"
        "  consolidate_to: 0.6\n"
    )
    code, _, err = await memgate("status", "--config", str(config), home=tmp_path)
    assert code == 78, err
    lines = err.removeprefix(PREFIX).splitlines()
    assert len(lines) == 3, err
    assert f"{config}:3: llm.api_key = '${{MEMGATE_TEST_UNSET_KEY}}': environment variable" in err
    assert f"{config}:5: llm.max_tokens = 4000: leaves less than 1024 prompt tokens" in err
    assert f"{config}:8: memory.consolidate_to = 0.6: must be below memory.consolidate_at" in err


async def test_one_mistake_is_still_one_line(tmp_path: Path) -> None:
    """A single bad value is reported alone, with its line."""
    config = tmp_path / "config.yaml"
    config.write_text(f"workspace: {tmp_path / 'ws'}\nhealth:\n  listen: localhost\n")
    code, _, err = await memgate("status", "--config", str(config), home=tmp_path)
    assert code == 78 and err.count("\n") == 1, err
    assert f"{config}:3: health.listen = 'localhost': must be host:port" in err


def test_a_reload_refused_for_several_problems_logs_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """SIGHUP on a file with two problems keeps the running settings and logs one line naming
    both, not a record spread over several lines."""
    path = tmp_path / "config.yaml"
    path.write_text(f"workspace: {tmp_path / 'ws'}\n")
    current = load_config(path, must_exist=True)
    path.write_text(f"workspace: {tmp_path / 'ws'}\nllm:\n  temperature: 5\ncolour: blue\n")
    with caplog.at_level(logging.ERROR, logger="gateway.service.access"):
        assert reload_access(current, []) is current
    [record] = caplog.records
    message = record.getMessage()
    assert "\n" not in message and "llm.temperature" in message and "colour" in message
