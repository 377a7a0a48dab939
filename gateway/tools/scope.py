"""Scopes: what one turn may see and change, chosen from its session and sender, never by the model.

A scope is a small table of workspace roots it may read and roots it may write. Anything not listed
is refused. Paths are checked after symlinks are resolved, and the state folder (inbox journals, the
search index, the lock) is refused to every scope whatever the table says.

| scope   | who                                          | reads                         | writes            |
| ------- | -------------------------------------------- | ----------------------------- | ----------------- |
| private | the owner's DMs, the terminal                | the whole workspace           | all but sessions/ |
| group   | groups, guild channels, threads, guests' DMs | groups/<session>/, its media  | groups/<session>/ |

A guest (let in by pairing or `"*"`, not listed in `allow_from`) gets the group scope in a DM too,
unless `memory.guests: shared` gives guests' DMs the private scope.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from gateway.bus import InboundMessage, media_folder
from memory.sessions.file import SUFFIX, file_name

PRIVATE = "private"
GROUP = "group"
GROUPS_DIR = "groups"
WHOLE_WORKSPACE = "."


@dataclass(frozen=True)
class Scope:
    """The roots (relative to the workspace) one turn may read and write.

    `memory` says whether MEMORY.md, USER.md, daily notes and search belong to this scope's prompt
    and tools. `read_only` lists roots under a writable root that stay read-only.
    """

    name: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    read_only: tuple[str, ...] = ()
    memory: bool = False
    # The owner's own chat (their DM, the terminal): only there are owner-only tools (exec)
    # offered. A guest's DM or a group given the private scope by `shared` is not one.
    owner: bool = False

    def __post_init__(self) -> None:
        for root in (*self.reads, *self.writes, *self.read_only):
            parts = PurePosixPath(root).parts
            if PurePosixPath(root).is_absolute() or ".." in parts:
                raise ValueError(f"scope root must be relative to the workspace, got {root!r}")
        for root in self.writes:
            if not any(_under(_parts(root), _parts(read), fold=False) for read in self.reads):
                raise ValueError(f"scope {self.name}: {root!r} is writable but not readable")

    def describe(self) -> str:
        """One line for a refusal, naming what this chat may reach."""
        if WHOLE_WORKSPACE in self.reads:
            return "the workspace"
        return " and ".join(f"{root}/" for root in self.reads)


@functools.cache
def private_scope(owner: bool = True) -> Scope:
    """The owner's scope: the whole workspace; conversations (and kept versions) are read-only.
    One object, made once (a scope is frozen), as every owner's turn asks for it; `owner` False
    for the chats `shared` lets in, which get the same roots but never the owner-only tools."""
    return Scope(
        PRIVATE,
        reads=(WHOLE_WORKSPACE,),
        writes=(WHOLE_WORKSPACE,),
        read_only=("sessions", "memory/versions"),
        memory=True,
        owner=owner,
    )


def group_folder(session_key: str) -> str:
    """`groups/<session file name>`: the one folder a group chat may write."""
    return f"{GROUPS_DIR}/{file_name(session_key).removesuffix(SUFFIX)}"


def group_scope(message: InboundMessage) -> Scope:
    """Everyone but the owner: its own folder, read and write, and its own chat's media, read."""
    own = group_folder(message.key)
    return Scope(GROUP, reads=(own, media_folder(message.channel, message.chat_id)), writes=(own,))


def scope_for(message: InboundMessage, groups: str, guests: str = "private") -> Scope:
    """Groups get the group scope unless `memory.groups: shared`; a guest's DM does unless
    `memory.guests: shared`. A guest in a group never gets more than the group scope."""
    if not message.sender_is_owner:
        if not message.is_group and guests == "shared":
            return private_scope(owner=False)
        return group_scope(message)
    if message.is_group:
        return private_scope(owner=False) if groups == "shared" else group_scope(message)
    return private_scope()


class PathRefusedError(Exception):
    """A path this scope may not reach; the message is for the model."""


class ScopeGuard:
    """Resolves a path a tool was given and checks it against one scope's table."""

    def __init__(self, scope: Scope, workspace: Path, state_dir: Path) -> None:
        self.scope = scope
        self.root = workspace.resolve()
        self.state_dir = state_dir.resolve()
        # On a filesystem that folds case (macOS, Windows shares), `Memory/` is `memory/`.
        self.folds = folds_case(self.root)

    def resolve(self, raw: object, *, writing: bool = False) -> Path:
        """The real path `raw` names, if this scope may read it (or write it, with `writing`)."""
        if not isinstance(raw, str) or not raw.strip():
            raise PathRefusedError("path must be a non-empty string")
        if "\x00" in raw:
            raise PathRefusedError("path contains a NUL character")
        candidate = Path(raw.strip()).expanduser()
        if not candidate.is_absolute():
            candidate = self.root / candidate
        try:
            resolved = candidate.resolve()
        except (RuntimeError, OSError):  # a symlink loop, or a path too long
            raise PathRefusedError(
                f"{raw!r} cannot be opened: a symlink loop or a broken path"
            ) from None
        # At a symlink loop, resolving gives up and joins the rest of the path by its text, `..`
        # folded away: `loop/../out_link/x` came back as `out_link/x`, inside by its text, and
        # the kernel then followed `out_link` outside. A fully resolved path has no link in it.
        if ".." in resolved.parts or _through_link(resolved):
            raise PathRefusedError(f"{raw!r} cannot be opened: a symlink loop or a broken path")
        # Refused to every scope, even if the state folder was configured inside the workspace.
        if _under(resolved.parts, self.state_dir.parts, fold=True):
            raise PathRefusedError(f"{raw!r} is kept by memgate itself and no tool can reach it")
        if resolved != self.root and not resolved.is_relative_to(self.root):
            raise PathRefusedError(
                f"{raw!r} is outside the workspace; only files under it are reachable"
            )
        parts = resolved.relative_to(self.root).parts
        shown = "/".join(parts) or "."
        if not any(_under(parts, _parts(root), fold=self.folds) for root in self.scope.reads):
            raise PathRefusedError(
                f"{shown} is not available in this chat; it may reach only {self.scope.describe()}"
            )
        if writing:
            # Read-only roots are compared folded on every filesystem: refusing too much is safe.
            if any(_under(parts, _parts(root), fold=True) for root in self.scope.read_only):
                raise PathRefusedError(f"{shown} is read-only: memgate keeps it")
            if not any(_under(parts, _parts(root), fold=self.folds) for root in self.scope.writes):
                raise PathRefusedError(
                    f"{shown} cannot be written from this chat; it may write only "
                    + " and ".join(f"{root}/" for root in self.scope.writes)
                )
        return resolved

    def same_file(self, path: Path, other: Path) -> bool:
        """Whether two resolved paths name the same file, folding case where the filesystem does."""
        a, b = path.parts, other.resolve().parts
        return _fold(a) == _fold(b) if self.folds else a == b


def _through_link(path: Path) -> bool:
    """Whether any folder on the way to `path`, or `path` itself, is a symlink."""
    probe = path
    while probe != probe.parent:
        if probe.is_symlink():
            return True
        probe = probe.parent
    return False


def folds_case(path: Path) -> bool:
    """Whether the filesystem holding `path` treats names that differ only in case as one."""
    probe = path
    while probe != probe.parent and not re.search(r"[A-Za-z]", probe.name):
        probe = probe.parent
    swapped = probe.with_name(probe.name.swapcase()) if probe.name else probe
    if swapped == probe:
        return False
    try:
        return os.path.samefile(probe, swapped)
    except OSError:
        return False


def _parts(root: str) -> tuple[str, ...]:
    return () if root == WHOLE_WORKSPACE else PurePosixPath(root).parts


def _fold(parts: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(part.casefold() for part in parts)


def _under(parts: tuple[str, ...], root: tuple[str, ...], *, fold: bool) -> bool:
    """Whether `parts` is `root` or inside it."""
    if len(parts) < len(root):
        return False
    head = parts[: len(root)]
    return _fold(head) == _fold(root) if fold else head == root
