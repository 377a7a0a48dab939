"""Markdown → Telegram HTML and reply splitting: examples, and properties checked with hypothesis.

Validity is judged by the fake Bot API's own HTML reader, the one that answers 400 "can't parse
entities" in the channel tests.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from channels.telegram.html import TELEGRAM_LIMIT, render_html, render_pieces
from channels.utf16 import utf16_length
from tests.fakes.telegram_api import parse_html


@pytest.mark.parametrize(
    ("markdown", "expected"),
    [
        ("**bold** and __bold__", "<b>bold</b> and <b>bold</b>"),
        ("*it* and _it_ and ~~gone~~", "<i>it</i> and <i>it</i> and <s>gone</s>"),
        ("snake_case_name stays", "snake_case_name stays"),
        ("2 * 3 * 4 = 24", "2 * 3 * 4 = 24"),
        ("use `a < b && c`", "use <code>a &lt; b &amp;&amp; c</code>"),
        ("``code with ` tick``", "<code>code with ` tick</code>"),
        ("[docs](https://x.org/a_b?q=1&r=2)", '<a href="https://x.org/a_b?q=1&amp;r=2">docs</a>'),
        ("[bad](javascript:alert(1))", "[bad](javascript:alert(1))"),
        ("<https://x.org>", '<a href="https://x.org">https://x.org</a>'),
        ("see https://x.org/_p_ now", "see https://x.org/_p_ now"),
        ("# Title *x*", "<b>Title <i>x</i></b>"),
        ("> quoted **b**\n> more", "<blockquote>quoted <b>b</b>\nmore</blockquote>"),
        ("- one\n  * two\n3. three", "• one\n  • two\n3. three"),
        ("---", "———"),
        ("\\*not italic\\*", "*not italic*"),
        ("<b>raw</b> & more", "&lt;b&gt;raw&lt;/b&gt; &amp; more"),
        (
            "```python\nif a < b:\n    print('&')\n```",
            "<pre><code class=\"language-python\">if a &lt; b:\n    print('&amp;')</code></pre>",
        ),
        ("```\nplain\n```", "<pre>plain</pre>"),
        ("```js\nunclosed", '<pre><code class="language-js">unclosed</code></pre>'),
        ("**a `code` b**", "<b>a <code>code</code> b</b>"),
        ("```one line```", "<code>one line</code>"),
        ("*a `b*` c*", "<i>a <code>b*</code> c</i>"),
    ],
)
def test_markdown_renders_to_telegram_html(markdown: str, expected: str) -> None:
    """Each Markdown construct the LLM uses maps to Telegram's tags; the rest is escaped."""
    assert render_html(markdown) == expected


def test_code_block_split_is_closed_and_reopened() -> None:
    """A code block longer than a message is cut into pieces that are each a whole <pre>."""
    code = "\n".join(f"line {i} <&>" for i in range(900))
    pieces = render_pieces(f"intro\n\n```sh\n{code}\n```\noutro")
    assert len(pieces) > 2
    for piece in pieces:
        parse_html(piece.html)
        assert utf16_length(piece.html) <= TELEGRAM_LIMIT
        assert piece.markdown.count("```") % 2 == 0
    inside = [p.html for p in pieces if "line " in p.html]
    assert all(h.count('<pre><code class="language-sh">') == 1 for h in inside)
    text = "\n".join(parse_html(p.html) for p in pieces)
    assert all(f"line {i} <&>" in text for i in range(900))


def test_escapes_that_grow_the_text_are_split_again() -> None:
    """Text made of '&' renders five times longer; pieces are re-split to stay within the limit."""
    pieces = render_pieces("&" * 5000)
    assert all(utf16_length(p.html) <= TELEGRAM_LIMIT for p in pieces)
    assert sum(parse_html(p.html).count("&") for p in pieces) == 5000


@pytest.mark.parametrize(
    "text",
    ["`" * 9000, "```" + "a" * 9000, "~~~" + "a " * 4500, "[" * 9000, "<" * 9000, "_a " * 3000],
    ids=["ticks", "long-info", "long-tilde-info", "brackets", "angles", "underscores"],
)
def test_pathological_replies_stay_a_few_messages(text: str) -> None:
    """Degenerate input never turns into a flood of tiny messages, and still renders validly."""
    pieces = render_pieces(text)
    assert len(pieces) <= 1 + 5 * utf16_length(text) // 1000
    for piece in pieces:
        parse_html(piece.html)
        assert utf16_length(piece.html) <= TELEGRAM_LIMIT


def test_empty_and_blank_replies_give_no_pieces() -> None:
    """Nothing to say sends nothing, rather than an empty message Telegram refuses."""
    assert render_pieces("") == []
    assert render_pieces("  \n\n ") == []


# -- properties -----------------------------------------------------------------------------------

# Markdown-heavy text: markers, brackets, escapes, HTML specials, emoji and CJK, newlines.
_ATOMS = st.sampled_from(
    ["*", "**", "_", "__", "~~", "`", "```", "[", "]", "(", ")", "<", ">", "&", "\\", "#", "> ",
     "- ", "1. ", "\n", "\n\n", " ", "https://x.org/a_b", "tg://user?id=1", "word", "snake_case",
     "😀", "👍🏽", "日本語", "é", '"', "'", "|", "~~~"]
)  # fmt: skip
markdown_text = st.lists(st.one_of(_ATOMS, st.text(max_size=6)), max_size=80).map("".join)


def _without_fence_info(markdown: str) -> str:
    """The text a reader expects to see: a fence's info string ("```python") is not shown."""
    return re.sub(r"(?m)^(\s*(?:```+|~~~+)).*$", r"\1", markdown)


def _alnum(text: str) -> str:
    return "".join(c for c in text if c.isalnum())


def _is_subsequence(needle: str, haystack: str) -> bool:
    it = iter(haystack)
    return all(c in it for c in needle)


def _seen_and_linked(html: str) -> str:
    """What Telegram shows, plus the link targets and code languages it keeps in the markup."""
    extra = " ".join(re.findall(r'(?:href|class)="([^"]*)"', html))
    return parse_html(html) + " " + extra


@settings(max_examples=400, deadline=None)
@given(markdown_text)
def test_rendered_html_is_always_valid_and_loses_no_text(markdown: str) -> None:
    """Any input renders to HTML Telegram accepts (tags balanced) that keeps every letter."""
    html = render_html(markdown)
    shown = _seen_and_linked(html)  # raises where Telegram would answer 400
    assert _is_subsequence(_alnum(_without_fence_info(markdown)), _alnum(shown))


_LONG = st.lists(
    st.one_of(markdown_text, st.just("```python\n" + "x = 1\n" * 40 + "```\n")), max_size=40
).map("\n".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_LONG, st.sampled_from([256, 700, TELEGRAM_LIMIT]))
def test_pieces_fit_the_limit_and_keep_everything(markdown: str, limit: int) -> None:
    """Every piece's HTML and Markdown fit the limit, parse, and together keep every letter."""
    pieces = render_pieces(markdown, limit)
    shown = ""
    for piece in pieces:
        assert utf16_length(piece.html) <= limit
        assert utf16_length(piece.markdown) <= limit
        assert piece.html.count("<pre>") == piece.html.count("</pre>")
        shown += _seen_and_linked(piece.html) + "\n"
        piece.markdown.encode("utf-8")  # no half of a surrogate pair
    assert _is_subsequence(_alnum(_without_fence_info(markdown)), _alnum(shown))


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=st.sampled_from("😀a 🇺\n"), min_size=300, max_size=3000))
def test_splitting_never_breaks_an_emoji(text: str) -> None:
    """Cuts fall between characters: every emoji arrives whole, and all of them arrive."""
    pieces = render_pieces(text, 256)
    joined = "".join(parse_html(p.html) for p in pieces)
    assert joined.count("😀") == text.count("😀")
    assert joined.count("🇺") == text.count("🇺")


def test_a_fence_marker_before_words_that_are_no_language_keeps_them() -> None:
    """Words after a fence marker that are not a language name (a URL) are shown, not dropped."""
    shown = render_html("~~~https://x.org/a_b tail\nbody")
    assert "https://x.org/a_b tail" in shown and "body" in shown
    assert 'class="language-' not in shown
