"""The memory corpus the search tests share: HISTORY.md, MEMORY.md, a daily note and sessions
(live and archived) in English, Chinese and Japanese, written through the real memory classes."""

from __future__ import annotations

from datetime import UTC, date
from pathlib import Path
from typing import Any

from memory.files import MemoryFiles
from memory.sessions.store import SessionStore

HISTORY = [
    "[2026-01-02 09:15] Alice planned a trip to Kyoto in April with her sister Maya; they booked "
    "a ryokan near Gion and want to see Fushimi Inari early in the morning.",
    "[2026-01-04 20:30] Discussed the home server migration: Nextcloud moves from the Raspberry Pi "
    "to an Intel NUC, with nightly backups to Backblaze B2.",
    "[2026-01-06 08:00] 用户说她每天早上喝咖啡，最喜欢埃塞俄比亚的手冲，但是不加牛奶。",
    "[2026-01-08 19:45] 讨论了女儿的钢琴考试，考试定在三月十五号，需要每天练习一个小时。",
    "[2026-01-10 12:00] Alice's dentist appointment moved to Friday at 3pm; she wants a reminder "
    "the day before.",
    "[2026-01-12 21:10] 用户家里养了一只橘猫，名字叫团子，最近在减肥。",
    "[2026-01-15 07:30] Talked about running: Alice is training for the Lyon half marathon in May "
    "and runs three times a week.",
]

MEMORY = """\
# Long-term Memory

Facts worth keeping across conversations.

## User Information

- Name: Alice Martin
- Lives in Lyon, France; works as a data engineer at a bike-sharing company
- 会说一点中文，正在学习普通话

## Preferences

- Prefers answers in short bullet points
- Vegetarian; allergic to peanuts
- 喜欢绿茶，不喜欢太甜的东西

## Project Context

- Building a Telegram bot for her running club, in Python with aiogram
- Side project: a sourdough starter log

## Important Notes

- Passport expires in June 2026; the renewal appointment is still to be booked
"""

NOTE = """\
Remember to buy oat milk and batteries for the bathroom scale.

Call the plumber about the leaking kitchen tap.
"""

LIVE = [
    ("user", "What is a good recipe for mapo tofu without meat?"),
    ("assistant", "Use shiitake mushrooms instead of pork, and doubanjiang for the heat."),
    ("user", "我想周末去爬山，推荐一下杭州附近的路线"),
    ("assistant", "可以试试九溪十八涧，或者北高峰，路线都不太难。"),
]
ARCHIVED = [
    ("user", "日本語も少し話せます。東京で寿司を食べたいです。"),
    ("assistant", "築地の近くに美味しいお店がありますよ。"),
]
CABIN = [
    ("user", "The wifi password for the cabin is written on the fridge: bluefalcon42"),
    ("assistant", "Noted, I will remember where the cabin wifi password is."),
]


def stamp(day: int, minute: int = 0) -> str:
    return f"2026-01-{day:02d}T10:{minute:02d}:00+00:00"


async def write_corpus(workspace: Path) -> None:
    """The fixed corpus: HISTORY.md, MEMORY.md, a daily note, live and archived sessions."""
    files = MemoryFiles(workspace, UTC)
    for entry in HISTORY:
        files.append_history(entry)
    files.write_memory(MEMORY)
    files.daily_note_path(date(2026, 1, 15)).write_text(NOTE, encoding="utf-8")
    store = SessionStore(workspace / "sessions", UTC)
    for key, messages, day in (
        ("telegram:42", ARCHIVED, 3),
        ("telegram:42", None, 0),  # /new: the Japanese conversation goes to sessions/archive/
        ("telegram:42", LIVE, 9),
        ("discord:77", CABIN, 11),
    ):
        if messages is None:
            await store.rotate(key)
            continue
        session = await store.get(key)
        records: list[dict[str, Any]] = [
            {"role": role, "content": text, "timestamp": stamp(day, i)}
            for i, (role, text) in enumerate(messages)
        ]
        # A tool exchange: neither the call nor its result is indexed.
        records[1:1] = [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "x"}}],
                "timestamp": stamp(day, 30),
            },
            {"role": "tool", "tool_call_id": "c1", "content": "zebra", "timestamp": stamp(day, 31)},
        ]
        await store.add_messages(session, records)


def line_of(path: Path, needle: str) -> int:
    """The 1-based line of `path` that contains `needle`."""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if needle in line:
            return number
    raise AssertionError(f"{needle!r} not in {path}")


def archived_path(workspace: Path) -> str:
    (archived,) = (workspace / "sessions" / "archive").glob("*.jsonl")
    return archived.relative_to(workspace).as_posix()


# One more HISTORY.md entry, for the tests that add it to the corpus.
CAR = "[2026-01-20 18:00] Alice sold her old car to a colleague and now cycles to work."
