"""Taking task-group errors apart: every error kept, a lone one let through as itself."""

from __future__ import annotations

import pytest

from gateway.errors import ConfigError, describe_errors, leaf_errors, single_error, unwrap_group


def test_leaf_errors_flattens_nested_groups_and_keeps_every_error() -> None:
    """Each error of nested groups comes out, in order; a plain error is a list of itself."""
    first, second, third = ValueError("a"), KeyError("b"), OSError("c")
    group = ExceptionGroup("outer", [first, ExceptionGroup("inner", [second, third])])
    assert leaf_errors(group) == [first, second, third]
    assert leaf_errors(first) == [first]


def test_single_error_unwraps_only_a_group_of_one() -> None:
    """A group holding one error (however deep) gives that error; a group of two stays whole."""
    lone = ValueError("lone")
    assert single_error(ExceptionGroup("g", [ExceptionGroup("h", [lone])])) is lone
    pair = ExceptionGroup("g", [ValueError("a"), ValueError("b")])
    assert single_error(pair) is pair


def test_describe_errors_names_every_error_on_one_line() -> None:
    """The description names each error's type and first line, none dropped."""
    group = ExceptionGroup("g", [ValueError("bad\nsecond line"), TimeoutError()])
    assert describe_errors(group) == "ValueError: bad; TimeoutError"


def test_unwrap_group_lets_a_lone_error_through_as_itself_with_its_cause() -> None:
    """`except ConfigError` still matches an error a task group wrapped; its cause stays chained."""
    cause = OSError("disk")
    try:
        raise ConfigError("bad key") from cause
    except ConfigError as exc:
        wrapped = ExceptionGroup("tg", [exc])
    with pytest.raises(ConfigError) as raised, unwrap_group():
        raise wrapped
    assert raised.value.__cause__ is cause


def test_unwrap_group_keeps_a_group_of_several_whole() -> None:
    """Two errors at once come out as the group holding both."""
    with pytest.raises(ExceptionGroup) as raised, unwrap_group():
        raise ExceptionGroup("tg", [ValueError("a"), KeyError("b")])
    assert len(leaf_errors(raised.value)) == 2
