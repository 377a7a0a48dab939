"""Properties checked with hypothesis: session file names, torn files, the workspace jail, splitting
and the Telegram renderer. These extend tests/test_sessions.py and tests/test_telegram_html.py.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
import tempfile
from collections.abc import Iterable
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from channels.base import split_message, text_length
from channels.telegram.html import render_html, render_pieces
from channels.utf16 import utf16_length
from gateway.skills.catalog import SkillCatalog
from gateway.tools.files import WorkspaceFiles
from gateway.tools.registry import ToolError, ToolRegistry
from gateway.tools.scope import Scope, ScopeGuard, group_scope, private_scope
from gateway.tools.skill_files import SkillFiles
from memory.files import MemoryFiles
from memory.sessions.file import file_name, key_from_file_name, parse_session_bytes
from memory.sessions.store import SessionStore
from tests.conftest import inbound
from tests.fakes.telegram_api import parse_html

# -- session file names -------------------------------------------------------------------------
keys = st.one_of(
    st.text(min_size=1, max_size=50),
    st.from_regex(r"(telegram|discord|terminal):-?[0-9]{1,20}(:topic:[0-9]{1,9})?", fullmatch=True),
    st.text(alphabet="%/:.\x00\x01\x1f\x7f2FA05", min_size=1, max_size=12),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(keys, min_size=1, max_size=12, unique=True))
def test_session_file_names_are_safe_distinct_and_found_again(batch: list[str]) -> None:
    """Key file names are safe, distinct, inside sessions/ and listed back as the keys."""
    names = [file_name(key) for key in batch]
    assert len(set(names)) == len(names)
    for key, name in zip(batch, names, strict=True):
        assert key_from_file_name(name) == key
        assert not re.search(r"[/\x00-\x1f\x7f]", name)
        assert name not in (".", "..") and name.endswith(".jsonl")
    with tempfile.TemporaryDirectory() as tmp:
        store = SessionStore(Path(tmp), UTC)
        for key in batch:
            path = store.path_for(key)
            assert path.parent == Path(tmp)
            path.write_text("")
        assert sorted(store.keys()) == sorted(batch)


@settings(max_examples=150, deadline=None)
@given(st.text(min_size=1, max_size=30))
def test_escaped_names_decode_to_keys_containing_percent(key: str) -> None:
    """A key that itself looks escaped (`%2F`) keeps its literal text through the round trip."""
    literal = f"%2F{key}%25"
    assert key_from_file_name(file_name(literal)) == literal


# -- torn and corrupt session files --------------------------------------------------------------
message_text = st.text(max_size=120)
records = st.lists(
    st.one_of(
        st.builds(lambda c: {"role": "user", "content": c}, message_text),
        st.builds(lambda c: {"role": "assistant", "content": c}, message_text),
        st.just({"_marker": True}),
    ),
    min_size=1,
    max_size=14,
)


async def _write(root: Path, items: list[dict[str, Any]]) -> bytes:
    store = SessionStore(root, UTC)
    session = await store.get("t:1")
    for item in items:
        if item.get("_marker"):
            await store.mark_consolidated(session, len(session.messages))
        else:
            await store.add_messages(session, [item])
    return store.path_for("t:1").read_bytes()


def _wire(messages: Iterable[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in messages]


@settings(max_examples=120, deadline=None)
@given(records, st.integers(min_value=0), st.lists(message_text, min_size=1, max_size=3))
def test_any_truncation_loads_a_prefix_and_the_next_append_repairs_it(
    items: list[dict[str, Any]], cut: int, later: list[str]
) -> None:
    """A file cut at any byte loads as a prefix, and the next append repairs it."""

    async def scenario(root: Path) -> None:
        data = await _write(root, items)
        full = parse_session_bytes(data)
        path = root / file_name("t:1")
        path.write_bytes(data[: cut % (len(data) + 1)])
        store = SessionStore(root, UTC)
        session = await store.get("t:1")
        prefix = _wire(session.messages)
        assert prefix == _wire(full.messages)[: len(prefix)]
        assert session.last_consolidated <= full.last_consolidated
        await store.add_messages(session, [{"role": "user", "content": c} for c in later])
        repaired = path.read_bytes()
        assert repaired.endswith(b"\n")
        lines = [json.loads(line) for line in repaired.splitlines()]
        assert lines[0]["_type"] == "metadata"
        reloaded = await SessionStore(root, UTC).get("t:1")
        assert _wire(reloaded.messages) == prefix + [("user", c) for c in later]

    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(scenario(Path(tmp)))


@settings(max_examples=120, deadline=None)
@given(records, st.integers(min_value=0), st.binary(min_size=1, max_size=40))
def test_a_corrupt_line_anywhere_costs_only_itself(
    items: list[dict[str, Any]], where: int, garbage: bytes
) -> None:
    """A garbled line inserted between any two lines is skipped; every real message survives."""
    garbage = b"\xff" + garbage.replace(b"\n", b" ")
    try:
        assume(not isinstance(json.loads(garbage), dict))
    except ValueError:
        pass
    with tempfile.TemporaryDirectory() as tmp:
        data = asyncio.run(_write(Path(tmp), items))
    lines = data.splitlines(keepends=True)
    at = 1 + where % len(lines)  # after the metadata line
    damaged = b"".join([*lines[:at], garbage + b"\n", *lines[at:]])
    assert _wire(parse_session_bytes(damaged).messages) == _wire(parse_session_bytes(data).messages)


# -- the workspace jail --------------------------------------------------------------------------
SECRET = "OUTSIDE-SECRET-7c1e"
ATOMS = [
    "..", ".", "", "~", "~root", "in_link", "out_link", "out_file_link", "loop", "dangling_out",
    "etc_link", "notes", "up", "upup", "sessions", "state_link", "memory", "MEMORY.md", "sub",
    "new.md", "%2e%2e", "...", "..\\..", " .. ", "passwd", "t:1.jsonl",
]  # fmt: skip


def _jail(root: Path) -> tuple[Path, Path]:
    """A workspace full of symlinks, in and out, next to folders it must never reach."""
    outside, workspace = root / "outside", root / "workspace"
    (outside / "sub").mkdir(parents=True)
    (outside / "outside-only.txt").write_text(SECRET)
    (root / "state").mkdir()
    (root / "state" / "telegram-1.json").write_text(SECRET)
    for folder in ("notes", "memory", "sessions"):
        (workspace / folder).mkdir(parents=True)
    (workspace / "notes" / "a.md").write_text("inside")
    (workspace / "memory" / "MEMORY.md").write_text("# Long-term Memory\n")
    (workspace / "sessions" / "t:1.jsonl").write_text('{"_type":"metadata"}\n')
    links = {
        "in_link": workspace / "notes",
        "out_link": outside,
        "out_file_link": outside / "outside-only.txt",
        "dangling_out": outside / "missing.txt",
        "etc_link": Path("/etc"),
        "state_link": root / "state",
        "notes/up": Path(".."),
        "notes/upup": Path("../.."),
    }
    for name, target in links.items():
        (workspace / name).symlink_to(target)
    (workspace / "loop").symlink_to(workspace / "loop")
    return outside, workspace


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b"<dir>"
        for p in sorted(folder.rglob("*"))
        if not p.is_symlink()
    }


@pytest.fixture
def jail(tmp_path: Path) -> tuple[Path, Path, ToolRegistry]:
    outside, workspace = _jail(tmp_path)
    registry = ToolRegistry()
    for tool in _files(workspace).tools():
        registry.add(tool)
    return outside, workspace, registry


def _files(workspace: Path) -> WorkspaceFiles:
    """The owner's file tools: the widest scope, so the jail holds for every narrower one."""
    guard = ScopeGuard(private_scope(), workspace, workspace.parent / "state")
    return WorkspaceFiles(guard, MemoryFiles(workspace, UTC))


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.sampled_from(["", "/", "OUTSIDE/", "WORKSPACE/", "~/", "./"]),
    st.lists(st.sampled_from(ATOMS), max_size=6),
)
def test_no_generated_path_leaves_the_workspace(
    jail: tuple[Path, Path, ToolRegistry], start: str, parts: list[str]
) -> None:
    """No path (.., /, ~, symlinks, loops) lets a file tool read or change anything outside."""
    outside, workspace, registry = jail
    raw = start.replace("OUTSIDE/", f"{outside}/").replace("WORKSPACE/", f"{workspace}/")
    raw += "/".join(parts)
    files = _files(workspace)
    try:
        resolved = files.resolve(raw)
    except ToolError:
        pass
    except RuntimeError:  # a symlink loop on Python < 3.13
        pass
    else:
        assert resolved == files.root or resolved.is_relative_to(files.root)
    before_outside = _snapshot(outside)
    state = workspace.parent / "state"
    before_managed = _snapshot(workspace / "sessions") | _snapshot(state)
    calls = [
        ("read_file", {"path": raw}),
        ("list_dir", {"path": raw}),
        ("write_file", {"path": raw, "content": "written"}),
        ("edit_file", {"path": raw, "old_text": "Memory", "new_text": "M"}),
    ]
    for name, arguments in calls:
        output = asyncio.run(registry.execute(name, json.dumps(arguments)))
        assert SECRET not in output and "outside-only" not in output, (name, raw, output)
        assert "root:x:0:0" not in output
    assert _snapshot(outside) == before_outside
    assert _snapshot(workspace / "sessions") | _snapshot(state) == before_managed


def test_a_path_that_passes_a_symlink_loop_is_refused(tmp_path: Path) -> None:
    """Past a symlink loop, resolving gives up and folds the rest by its text (`loop/..` is
    dropped, so `loop/../out_link/x` reads as `out_link/x`, which the kernel follows outside):
    such a path is refused as a loop, never judged by its text."""
    outside, workspace = _jail(tmp_path)
    files = _files(workspace)
    for raw in (f"{workspace}/loop/../out_link/x", "loop/../out_link/loop/../%2e%2e", "loop/x"):
        with pytest.raises(ToolError, match="symlink loop"):
            files.resolve(raw)
        with pytest.raises(ToolError, match="symlink loop"):
            files.resolve(raw, writing=True)
    assert files.resolve("in_link/a.md") == workspace / "notes" / "a.md"  # a link that resolves
    before = _snapshot(outside)
    registry = ToolRegistry()
    for tool in files.tools():
        registry.add(tool)
    arguments = {"path": "loop/../out_link/escaped.txt", "content": "written"}
    output = asyncio.run(registry.execute("write_file", json.dumps(arguments)))
    assert "symlink loop" in output
    assert _snapshot(outside) == before


PRIVATE_SKILL = "PRIVATE-SKILL-BODY-31f"
SKILL_ATOMS = [
    "skills", "team", "owner-only", "shipped-team", "shipped-private", "SKILL.md", "out", "up",
    "loop", "deep", "x.md", "..", ".", "", "~", "%2e%2e", "out_link", "notes", "new.md",
    "outside-only.txt",
]  # fmt: skip


def _skill_jail(root: Path) -> tuple[Path, Path, SkillCatalog]:
    """The jail, plus skills (the workspace's and shipped, for groups and not) whose folders
    hold links out, up and in a loop."""
    outside, workspace = _jail(root)
    shipped = root / "shipped"
    for folder, name, groups in (
        (workspace / "skills", "team", True),
        (workspace / "skills", "owner-only", False),
        (shipped, "shipped-team", True),
        (shipped, "shipped-private", False),
    ):
        skill = folder / name
        (skill / "deep").mkdir(parents=True)
        body = "for everyone" if groups else PRIVATE_SKILL
        front = f"name: {name}\ndescription: A skill.\ngroups: {str(groups).lower()}"
        (skill / "SKILL.md").write_text(f"---\n{front}\n---\n{body}\n")
        (skill / "deep" / "x.md").write_text(body)
        (skill / "out").symlink_to(outside)
        (skill / "up").symlink_to("..")
        (skill / "loop").symlink_to(skill / "loop")
    return outside, workspace, SkillCatalog(workspace, shipped)


def _registry(scope: Scope, workspace: Path, catalog: SkillCatalog) -> ToolRegistry:
    state = workspace.parent / "state"
    skills = SkillFiles(catalog, scope.name == "group", state)
    files = WorkspaceFiles(ScopeGuard(scope, workspace, state), MemoryFiles(workspace, UTC), skills)
    registry = ToolRegistry()
    for tool in files.tools():
        registry.add(tool)
    return registry


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(["skills/", "", "/", "WORKSPACE/skills/", "./skills/", "SHIPPED/"]),
    st.lists(st.sampled_from(SKILL_ATOMS), max_size=6),
)
@example("skills/", ["team", "out", "outside-only.txt"])  # a link out of a group's skill
@example("skills/", ["shipped-team", "out"])
@example("skills/", ["team", "up", "owner-only", "SKILL.md"])  # up, into a skill not for groups
@example("skills/", ["owner-only", "deep", "x.md"])
@example("skills/", ["shipped-private", "SKILL.md"])
def test_no_skill_path_reaches_beyond_the_skills_a_chat_is_offered(
    start: str, parts: list[str]
) -> None:
    """Through skills/<name>/ a group reads only its skills' folders and the owner nothing outside
    the workspace and the skills; no tool writes outside, or into a shipped skill or, from a
    group, into any skill."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp).resolve()
        outside, workspace, catalog = _skill_jail(root)
        raw = start.replace("WORKSPACE/", f"{workspace}/").replace("SHIPPED/", f"{root}/shipped/")
        raw += "/".join(parts)
        group = _registry(group_scope(inbound("x", "-100", is_group=True)), workspace, catalog)
        owner = _registry(private_scope(), workspace, catalog)
        before = _snapshot(outside), _snapshot(root / "shipped"), _snapshot(workspace / "skills")
        for registry, secrets in ((group, (SECRET, PRIVATE_SKILL)), (owner, (SECRET,))):
            for name, arguments in [
                ("read_file", {"path": raw}),
                ("list_dir", {"path": raw}),
                ("write_file", {"path": raw, "content": "written"}),
                ("edit_file", {"path": raw, "old_text": "for", "new_text": "x"}),
            ]:
                output = asyncio.run(registry.execute(name, json.dumps(arguments)))
                assert not any(s in output for s in secrets), (name, raw, output)
                # the outside file's name only where it was not asked for (a refusal names it)
                assert "outside-only" not in output or "outside-only" in raw, (name, raw, output)
                assert "root:x:0:0" not in output
            if registry is group:
                assert (_snapshot(outside), *before[1:]) == before, raw
        assert (_snapshot(outside), _snapshot(root / "shipped")) == before[:2]


# -- splitting ------------------------------------------------------------------------------------
_PROSE = st.lists(
    st.sampled_from(
        ["word", "longerword", "😀", "日本語", "é", " ", " ", "\n", "\n\n", "-", "`x`"]
    ),
    min_size=1,
    max_size=60,
).map("".join)
_CODE = st.builds(
    lambda lang, lines: f"```{lang}\n" + "\n".join(lines) + "\n```",
    st.sampled_from(["", "python", "sh"]),
    st.lists(st.sampled_from(["x = 1", "print('😀')", "  indented", "", "a" * 30]), max_size=25),
)
_DOCUMENT = st.lists(st.one_of(_PROSE, _CODE), min_size=1, max_size=12).map("\n\n".join)


def _fence_lines(piece: str) -> int:
    return sum(1 for line in piece.split("\n") if re.match(r"^\s*```", line))


def _alnum(text: str) -> str:
    return "".join(c for c in text if c.isalnum())


def _is_subsequence(needle: str, haystack: str) -> bool:
    it = iter(haystack)
    return all(c in it for c in needle)


@settings(max_examples=200, deadline=None)
@given(_DOCUMENT, st.integers(min_value=64, max_value=300), st.sampled_from(["len", "utf16"]))
def test_split_pieces_fit_close_every_code_block_and_keep_every_letter(
    document: str, limit: int, unit: str
) -> None:
    """Pieces fit the limit, hold whole code blocks and keep every letter in order."""
    measure = text_length if unit == "len" else utf16_length
    pieces = split_message(document, limit, measure)
    for piece in pieces:
        assert measure(piece) <= limit
        assert piece.strip() or measure(document) <= limit  # text that fits is returned as is
        assert _fence_lines(piece) % 2 == 0, piece
        piece.encode("utf-8")
    assert _is_subsequence(_alnum(document), _alnum("".join(pieces)))


def test_limits_too_small_for_a_fenced_piece_are_refused() -> None:
    """A limit with no room for a reopened and a closed fence is refused rather than mis-split."""
    with pytest.raises(ValueError, match="too small"):
        split_message("wordword\n\n```python\n\n```\n\nword" * 3, 40)
    pieces = split_message("wordword\n\n```python\n\n```\n\nword" * 3, 64)
    assert all(_fence_lines(piece) % 2 == 0 for piece in pieces), pieces


# -- the Telegram renderer ----------------------------------------------------------------------
_SCHEMES = st.sampled_from(
    ["javascript:", "JaVaScRiPt:", " javascript:", "data:text/html,", "file:///", "vbscript:",
     "java\tscript:", "&#106;avascript:", "http://", "https://", "tg://", "mailto:", "//", ""]
)  # fmt: skip
_SAFE = ("http://", "https://", "tg://", "mailto:")


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet="ab *_`[]<>()", max_size=12),
    _SCHEMES,
    st.text(alphabet="abc/.?=&\"'<>() ", max_size=15),
    st.sampled_from(["[{label}]({url})", "<{url}>", "{url}", '[{label}]({url} "t")']),
)
def test_links_only_ever_point_at_safe_schemes(
    label: str, scheme: str, rest: str, form: str
) -> None:
    """Every href the renderer emits is http(s), tg or mailto, in valid HTML."""
    rendered = render_html(form.format(label=label, url=scheme + rest))
    parse_html(rendered)
    for href in re.findall(r'href="([^"]*)"', rendered):
        assert html.unescape(href).lower().startswith(_SAFE), href


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\n"), max_size=3000))
def test_any_text_renders_to_valid_pieces_within_the_limit(text: str) -> None:
    """Any text renders to valid pieces within 4096 UTF-16 units that keep every letter."""
    pieces = render_pieces(text)
    shown = ""
    for piece in pieces:
        visible = parse_html(piece.html)
        assert utf16_length(visible) <= 4096 and utf16_length(piece.html) <= 4096
        shown += visible
    assume("```" not in text and "~~~" not in text)  # fence info strings are not shown
    assert _is_subsequence(_alnum(text), _alnum(shown) + _alnum(" ".join(p.html for p in pieces)))
