"""The warm fork server the CLI tests run `memgate` through gives what a fresh interpreter gives."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from tests.forkserver import run_forked

pytestmark = pytest.mark.timeout(120)


async def fresh(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "gateway", *args),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@pytest.mark.parametrize(
    "args",
    [
        ["--version"],
        ["--config", "{config}", "status"],
        ["--config", "{config}", "jobs", "list"],
        ["--config", "{missing}", "status"],  # a config error: its exit status and stderr
        ["no-such-command"],  # argparse's usage error, exit 2
    ],
)
async def test_a_forked_command_matches_a_fresh_interpreter(
    tmp_path: Path, args: list[str]
) -> None:
    """Exit status, stdout and stderr of a forked `memgate` equal those of `python -m gateway`."""
    config = tmp_path / "config.yaml"
    config.write_text(
        f"workspace: {tmp_path / 'ws'}\nstate_dir: {tmp_path / 'state'}\n"
        "llm:\n  base_url: http://127.0.0.1:9/v1\n  api_key: none\n"
    )
    argv = [a.format(config=config, missing=tmp_path / "missing.yaml") for a in args]
    env = {**os.environ, "MEMGATE_HOME": str(tmp_path / "home"), "NO_COLOR": "1"}
    assert await run_forked(argv, env) == await fresh(argv, env)


async def test_a_forked_command_gets_the_environment_it_is_given(
    tmp_path: Path,
) -> None:
    """A variable set for one run reaches that run only (the server's own environment does not)."""
    config = tmp_path / "config.yaml"
    config.write_text(
        f"workspace: {tmp_path / 'ws'}\nstate_dir: {tmp_path / 'state'}\n"
        "llm:\n  base_url: ${MEMGATE_TEST_URL}\n  api_key: none\n"
    )
    env = {**os.environ, "MEMGATE_HOME": str(tmp_path / "home")}
    args = ["--config", str(config), "status"]
    code, out, _ = await run_forked(args, {**env, "MEMGATE_TEST_URL": "http://127.0.0.1:7/v1"})
    assert code == 0 and "127.0.0.1:7/v1" in out
    code, _, err = await run_forked(args, env)
    assert code != 0 and "MEMGATE_TEST_URL" in err
