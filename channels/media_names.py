"""Safe file names for downloaded attachments, shared by the chat adapters. Imports nothing of ours."""

from __future__ import annotations

import re

_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(name: str) -> str:
    """A file name that cannot climb out of media/ or surprise a shell; "" when nothing is left."""
    return _UNSAFE_NAME.sub("_", name).strip("._")[-80:]
