"""How memgate puts bytes on disk: atomically, durably, and readable only by its owner.

A leaf module (it imports nothing of ours), so the gateway, the memory package and the channels all
write files the same way: a unique temp file in the same folder, fsync of the file and of the folder,
then rename. Files are 0600 and folders 0700 whatever the umask.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

FILE_MODE = 0o600
DIR_MODE = 0o700


def ensure_private_dir(path: Path) -> Path:
    """Create `path` and any missing parents as 0700 folders; an existing folder is left as it is."""
    missing: list[Path] = []
    current = path
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=DIR_MODE)
        except FileExistsError:
            continue
        # mkdir's mode is filtered through the umask; chmod is not.
        os.chmod(folder, DIR_MODE)
    return path


def fsync_dir(path: Path) -> None:
    """Make a rename or a new name in `path` durable; a filesystem that refuses is ignored."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _encode(data: str | bytes) -> bytes:
    return data.encode("utf-8") if isinstance(data, str) else data


def atomic_write(path: Path, data: str | bytes, *, mode: int = FILE_MODE) -> None:
    """Replace `path` with `data` so that readers see the old or the new file, never a mix.

    The temp file has a unique name, so threads and processes writing the same path never share it.
    """
    ensure_private_dir(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(_encode(data))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def create_exclusive(path: Path, data: str | bytes, *, mode: int = FILE_MODE) -> None:
    """Create `path` holding `data`; raise FileExistsError if the name is taken (never overwrite)."""
    ensure_private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.fchmod(fd, mode)
        view = memoryview(_encode(data))
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    os.close(fd)
    fsync_dir(path.parent)
