"""docs/configuration.md lists every key of the config models, with its default and meaning."""

from __future__ import annotations

from gateway.config.reference import TARGET, render, undocumented


def test_every_key_has_a_meaning() -> None:
    """Each config field carries the docstring the reference prints as its meaning."""
    assert undocumented() == []


def test_the_reference_is_current() -> None:
    """The committed file is what the generator writes (run `make docs` after changing a key)."""
    assert TARGET.read_text(encoding="utf-8") == render(), (
        "docs/configuration.md is out of date: run `make docs`"
    )
