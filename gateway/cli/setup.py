"""Where the config file is and how it comes to be: `--config`, the first-run questions,
`memgate init` (config and workspace templates) and `memgate setup` (the llm section again).

The answers to the questions are tested with one model call before anything is written.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import sys
from pathlib import Path

from gateway.cli.templates import WORKSPACE_FILES
from gateway.config.file import (
    OPENAI_KEY_REF,
    OPENAI_URL,
    default_config_path,
    default_workspace,
    load_config,
    parse_config,
    render_config,
    update_llm_section,
    write_private,
)
from gateway.errors import ConfigError, UsageError
from memory.fileio import create_exclusive, ensure_private_dir
from memory.files import MEMORY_TEMPLATE


def config_path(args: argparse.Namespace) -> Path:
    given = getattr(args, "config", None)
    return Path(given).expanduser() if given else default_config_path()


def explicit_path(args: argparse.Namespace) -> bool:
    """A path given with --config must exist: a typo must not run on the defaults."""
    return getattr(args, "config", None) is not None


def llm_configured(path: Path) -> bool:
    return path.exists() or bool(os.environ.get("OPENAI_API_KEY"))


def first_run(path: Path) -> None:
    """Ask for the LLM endpoint on a terminal and write the config; without one, exit 78."""
    if not sys.stdin.isatty():
        raise ConfigError(
            f"no LLM configured: {path} does not exist. Run `memgate init` and set llm.api_key "
            f"there (or export OPENAI_API_KEY), or start `memgate chat` on a terminal to be asked",
            path=str(path),
            key="llm.api_key",
        )
    print(f"No configuration yet; let's write {path}. Press Enter to keep a default.\n")
    base_url, api_key, model = ask_llm(OPENAI_URL, "", "gpt-4o-mini")
    if api_key is None:
        api_key = OPENAI_KEY_REF if os.environ.get("OPENAI_API_KEY") else ""
    text = render_config(
        workspace=default_workspace(), base_url=base_url, api_key=api_key, model=model
    )
    write_private(path, text)
    write_templates(default_workspace())
    print(f"\nWrote {path} (readable only by you) and the workspace {default_workspace()}.")
    print("Edit AGENTS.md, SOUL.md and USER.md there to shape the assistant.\n")


def ask_llm(base_url: str, api_key: str, model: str) -> tuple[str, str | None, str]:
    """Ask endpoint, key and model (Enter keeps the value shown), test them with one call, and
    offer to answer again while the test fails. Returns the values to write; the key is None when
    none was typed, so the file keeps what it had (a `${VAR}` stays a reference, not the secret)."""
    typed: str | None = None
    from gateway.cli.doctor import check_llm

    while True:
        base_url = input(f"LLM endpoint (OpenAI-compatible) [{base_url}]: ").strip() or base_url
        env_key = os.environ.get("OPENAI_API_KEY")
        hint = (
            "[keep the current one]"
            if api_key
            else "[from OPENAI_API_KEY]"
            if env_key
            else "[none]"
        )
        typed = getpass.getpass(f"API key {hint}: ").strip() or typed
        tested = typed or api_key or ("${OPENAI_API_KEY}" if env_key else "")
        model = input(f"Model [{model}]: ").strip() or model
        raw = {
            "workspace": str(default_workspace()),
            "llm": {
                "base_url": base_url,
                "api_key": tested,
                "model": model,
                "max_retries": 0,
                "timeout": 20,
            },
        }
        try:
            check = asyncio.run(check_llm(parse_config(raw, Path("(answers)"))))
            ok, detail = check.ok, check.detail
        except ConfigError as exc:
            ok, detail = False, str(exc).removeprefix("(answers): ")
        print(f"{'✓' if ok else '✗'} {detail}")
        if ok:
            return base_url, typed, model
        again = input("Fix the answers? [Y/n] (n writes them as they are): ").strip().lower()
        if again in ("n", "no"):
            return base_url, typed, model


def cmd_setup(args: argparse.Namespace) -> int:
    """The first-run questions again, on an existing config (other keys kept)."""
    path = config_path(args)
    if not sys.stdin.isatty():
        raise UsageError("`memgate setup` asks questions: run it on a terminal")
    if not path.exists():
        first_run(path)
        return 0
    current = load_config(path)
    print(f"Updating the llm section of {path}. Press Enter to keep a value.\n")
    base_url, api_key, model = ask_llm(current.llm.base_url, current.llm.api_key, current.llm.model)
    update_llm_section(path, base_url, api_key, model)
    print(f"\nWrote {path}; every other key and every comment is as it was.")
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    path = config_path(args)
    created, kept = [], []
    if path.exists():
        kept.append(path)
    else:
        write_private(path, render_config(workspace=default_workspace()))
        created.append(path)
    # init needs only the workspace path. The secrets' variables come later (the env file of a
    # service, an export), so an unset one must not stop it, whichever channel is enabled.
    config = load_config(path, secret_stand_in="unset")
    new, old = write_templates(config.workspace)
    created += new
    kept += old
    for item in created:
        print(f"created  {item}")
    for item in kept:
        print(f"kept     {item} (already there)")
    print(
        f"\nNext: export OPENAI_API_KEY (or set llm.api_key in {path}), or point llm.base_url "
        "at a local server, which needs no key; then `memgate chat`."
    )
    return 0


def write_templates(workspace: Path) -> tuple[list[Path], list[Path]]:
    """Write the workspace templates that are missing; return (created, kept)."""
    created, kept = [], []
    files = {**WORKSPACE_FILES, "memory/MEMORY.md": MEMORY_TEMPLATE}
    for name, text in files.items():
        target = workspace / name
        if target.exists():
            kept.append(target)
            continue
        try:
            create_exclusive(target, text)
        except FileExistsError:  # created meanwhile: it is someone's, keep it
            kept.append(target)
            continue
        created.append(target)
    for sub in ("sessions", "media", "groups"):
        ensure_private_dir(workspace / sub)
    return created, kept
