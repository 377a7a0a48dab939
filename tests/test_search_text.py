"""Search text handling: CJK segmentation, query parsing into FTS5 expressions, snippets."""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory.search.text import Query, make_snippet, parse_query, segment, unsegment


def test_cjk_characters_become_separate_tokens_and_come_back_unchanged() -> None:
    """In FTS5, each CJK character is a token next to Latin words; unsegment restores the text."""
    text = "用Python写爬虫，东京で寿司を食べたい。한국어 OK"
    stored = segment(text)
    assert unsegment(stored) == text
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("CREATE VIRTUAL TABLE t USING fts5(body, tokenize='porter unicode61')")
        conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'row')")
        conn.execute("INSERT INTO t VALUES (?)", (stored,))
        tokens = {row[0] for row in conn.execute("SELECT term FROM v")}
    finally:
        conn.close()
    assert {"用", "python", "写", "爬", "虫", "寿", "司", "た", "한", "국", "어", "ok"} <= tokens
    assert not any(len(t) > 1 and not t.isascii() for t in tokens)


def test_full_width_letters_fold_and_punctuation_stays() -> None:
    """Ｐｙｔｈｏｎ２０２６ is stored as Python2026; Chinese punctuation is left as written."""
    assert unsegment(segment("Ｐｙｔｈｏｎ２０２６，好")) == "Python2026，好"


@pytest.mark.parametrize(
    ("query", "strict", "loose"),
    [
        ("咖啡", '"咖 啡"', None),
        ("猫", '"猫"', None),
        ("coffee machine", '"coffee" AND "machine"', '"coffee" OR "machine"'),
        ('"trip to Kyoto"', '"trip to Kyoto"', '"trip" OR "to" OR "Kyoto"'),
        ("2026-01-05", '"2026 01 05"', '"2026" OR "01" OR "05"'),
        ("咖啡馆", '"咖 啡 馆"', '"咖 啡" OR "啡 馆"'),
        ("drink*", '"drink" *', None),
        ("用Python写", '"用 Python 写"', '"用" OR "Python" OR "写"'),
        ("NOT (a OR b)", '"NOT" AND "a" AND "OR" AND "b"', '"NOT" OR "a" OR "OR" OR "b"'),
        ("猫，狗", '"猫" AND "狗"', '"猫" OR "狗"'),
    ],
)
def test_queries_become_quoted_fts5_phrases(query: str, strict: str, loose: str | None) -> None:
    """Chunks become quoted phrases (all required); the loose form takes words and CJK pairs."""
    assert parse_query(query) == Query(strict, loose)


def test_a_query_without_words_is_none() -> None:
    """Punctuation and spaces alone make no query."""
    assert parse_query(" ?! ，。 * ") is None


@given(st.text(max_size=40))
def test_any_text_gives_a_valid_fts5_query(text: str) -> None:
    """Whatever is typed, the expressions parse in FTS5."""
    query = parse_query(text)
    if query is None:
        return
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("CREATE VIRTUAL TABLE t USING fts5(body, tokenize='porter unicode61')")
        conn.execute("INSERT INTO t VALUES (?)", (segment(text),))
        for expression in (query.strict, query.loose):
            if expression:
                conn.execute("SELECT rowid FROM t WHERE t MATCH ?", (expression,)).fetchall()
    finally:
        conn.close()


def test_snippet_is_one_line_around_the_match() -> None:
    """A long text is cut to about the width around the first match, with ellipses."""
    text = "start " + "filler words here\n" * 40 + "the «needle» is here " + "tail " * 60
    snippet = make_snippet(text, width=80)
    assert "\n" not in snippet
    assert snippet.startswith("…") and snippet.endswith("…")
    assert "«needle»" in snippet and len(snippet) <= 82


@pytest.mark.parametrize("width", [10, 30, 50])
def test_snippet_markers_stay_paired_when_cut(width: int) -> None:
    """A cut through a highlighted span still leaves « and » paired."""
    snippet = make_snippet("x " * 50 + "«" + "long match " * 20 + "»" + " y" * 50, width)
    assert snippet.count("«") == snippet.count("»") >= 1
    assert snippet.index("«") < snippet.index("»")


def test_snippet_of_cjk_text_has_no_separators() -> None:
    """Snippets show CJK text without the index's separators."""
    assert (
        make_snippet(segment("我每天早上喝") + "«" + segment("咖啡") + "»") == "我每天早上喝«咖啡»"
    )
