"""Quantities written for people: a byte count as B, KB, MB or GB. Imports nothing of ours."""

from __future__ import annotations


def format_size(count: int) -> str:
    """`512` → `512 B`, `1536` → `1.5 KB`; GB is the largest unit."""
    size = float(count)
    for unit in ("B", "KB", "MB"):
        if size < 1024:
            return f"{count} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"
