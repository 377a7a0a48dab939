"""exec on the command line: `memgate status` names its state, `memgate doctor` what it lacks."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory.fileio import ensure_private_dir
from tests.conftest import memgate
from tests.fakes.llm import FakeLLM
from tests.sandboxing import needs_bwrap, prepare_workspace

pytestmark = pytest.mark.timeout(120)


def exec_config(tmp_path: Path, llm_url: str, exec_section: str) -> Path:
    prepare_workspace(tmp_path)
    ensure_private_dir(tmp_path / "state")
    path = tmp_path / "config.yaml"
    path.write_text(
        f"""\
workspace: {tmp_path / "workspace"}
state_dir: {tmp_path / "state"}
llm:
  base_url: {llm_url}
  api_key: sk-exec-secret-0123456789
  max_retries: 0
  timeout: 30
tools:
  exec:
{exec_section}"""
    )
    return path


@needs_bwrap
async def test_status_shows_exec_on_its_sandbox_and_approval(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """On: sandbox, network and approval mode; off: that it is off and by which key."""
    config = exec_config(tmp_path, fake_llm.url, "    enabled: true\n    approve: always\n")
    code, out, err = await memgate("status", "--config", str(config), home=tmp_path)
    assert code == 0, err
    assert "exec:       on, sandbox bwrap (no network), approve always" in out.splitlines()
    config.write_text(config.read_text().replace("enabled: true", "enabled: false"))
    code, out, err = await memgate("status", "--config", str(config), home=tmp_path)
    assert "exec:       off (tools.exec.enabled is false)" in out.splitlines()


async def test_doctor_says_how_to_install_bwrap_when_it_is_missing(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """Without bwrap on PATH, doctor's exec line is ✗ and names the package to install."""
    config = exec_config(tmp_path, fake_llm.url, "    enabled: true\n")
    empty = tmp_path / "bin"
    empty.mkdir()
    _, out, err = await memgate(
        "doctor", "--config", str(config), home=tmp_path, env={"PATH": str(empty)}
    )
    line = next(line for line in out.splitlines() if " exec:" in line)
    assert line.startswith("✗ exec: bwrap is not installed"), out + err
    assert "apt install bubblewrap" in line


@needs_bwrap
async def test_doctor_runs_the_sandbox_once(tmp_path: Path, fake_llm: FakeLLM) -> None:
    """With bwrap here, doctor's exec line is ✓: it ran `true` in the sandbox."""
    config = exec_config(tmp_path, fake_llm.url, "    enabled: true\n")
    _, out, err = await memgate("doctor", "--config", str(config), home=tmp_path)
    line = next(line for line in out.splitlines() if " exec:" in line)
    assert line == "✓ exec: on, sandbox bwrap (no network), approve unlisted", out + err
