"""Memory search benchmark: index build time, index size and query latency over ~100k entries.

Writes a synthetic workspace (HISTORY.md entries, MEMORY.md sections, daily notes, live and archived
sessions; a third of the text Chinese), builds the index, then times queries through
`MemorySearch.search()` (which refreshes first, as the agent's tool does) and the refresh alone.
Run: `python -m bench.search_bench [--entries N] [--workspace DIR]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

from memory.files import MemoryFiles
from memory.search.searcher import MemorySearch

SEED = 20260101
# Common Chinese characters, most frequent first, so a Zipf draw gives text with realistic repeats.
HANZI = (
    "的一是不了人我在有他这中大来上个国到说们为子和你地出道也时年得就那要下以生会自着去之过家学对"
    "可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同"
    "三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定"
    "女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化"
    "由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应"
    "咖啡猫狗茶饭菜肉鱼米面包蛋奶糖果酒药医院学校公司会议旅行飞机火车地铁天气下雨晴朗周末早上晚上"
)
SYLLABLES = [c + v for c in "kmrstnlpbd" for v in "aeiou"]


def vocabulary(rng: random.Random, size: int = 3000) -> list[str]:
    assert size < len(SYLLABLES) ** 3, "not enough distinct words"
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 3))))
    return sorted(words, key=lambda w: (len(w), w))


def zipf_weights(count: int) -> list[float]:
    """Cumulative Zipf weights: the item of rank r is drawn with probability ~ 1/r."""
    total, cumulative = 0.0, []
    for rank in range(1, count + 1):
        total += 1 / rank
        cumulative.append(total)
    return cumulative


class Corpus:
    """Deterministic synthetic text, English-like and Chinese."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.words = vocabulary(self.rng)
        self._word_weights = zipf_weights(len(self.words))
        self._hanzi_weights = zipf_weights(len(HANZI))

    def english(self, words: int) -> str:
        drawn = self.rng.choices(self.words, cum_weights=self._word_weights, k=words)
        return " ".join(drawn).capitalize() + "."

    def chinese(self, chars: int) -> str:
        return "".join(self.rng.choices(HANZI, cum_weights=self._hanzi_weights, k=chars)) + "。"

    def text(self, size: int) -> str:
        if self.rng.random() < 1 / 3:
            return self.chinese(size)
        return self.english(size // 5 + 3)


def write_workspace(root: Path, entries: int, corpus: Corpus) -> dict[str, int]:
    """A workspace with about `entries` searchable entries; returns how many of each kind."""
    memory = root / "memory"
    sessions = root / "sessions"
    (sessions / "archive").mkdir(parents=True, exist_ok=True)
    memory.mkdir(parents=True, exist_ok=True)
    start = datetime(2024, 1, 1, tzinfo=UTC)
    history_count = entries * 3 // 10
    notes, sections = 200, 40
    message_count = entries - history_count - notes * 2 - sections
    with open(memory / "HISTORY.md", "w", encoding="utf-8") as handle:
        for index in range(history_count):
            stamp = (start + timedelta(minutes=45 * index)).strftime("[%Y-%m-%d %H:%M]")
            handle.write(f"{stamp} {corpus.text(120)} {corpus.text(80)}\n\n")
    body = "\n\n".join(
        f"## Section {i}\n\n- {corpus.text(60)}\n- {corpus.text(40)}" for i in range(sections)
    )
    MemoryFiles(root, UTC).write_memory(f"# Long-term Memory\n\n{body}\n")
    for day in range(notes):
        date = (start + timedelta(days=day)).date().isoformat()
        (memory / f"{date}.md").write_text(f"{corpus.text(80)}\n\n{corpus.text(60)}\n", "utf-8")
    files = 400
    per_file = max(1, message_count // files)
    written = 0
    for number in range(files):
        folder = sessions / "archive" if number % 10 == 0 else sessions
        lines = [{"_type": "metadata", "key": f"telegram:{number}", "version": 1}]
        moment = start + timedelta(days=number)
        count = per_file if number < files - 1 else message_count - written
        for index in range(count):
            role = "user" if index % 2 == 0 else "assistant"
            stamp = (moment + timedelta(minutes=index)).isoformat()
            size = 60 if role == "user" else 160
            lines.append({"role": role, "content": corpus.text(size), "timestamp": stamp})
        written += count
        with open(folder / f"telegram:{number}.jsonl", "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
    return {
        "history": history_count,
        "memory sections": sections + 1,
        "note paragraphs": notes * 2,
        "session messages": message_count,
    }


def append_line(path: Path, line: str) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(line + "\n")


def tree_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


async def timed(call: Callable[[], Awaitable[object]], repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        began = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - began) * 1000)
    return samples


def percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"p50 {statistics.median(ordered):7.2f} ms   p99 {p99:7.2f} ms"


async def run(root: Path, entries: int) -> None:
    corpus = Corpus(SEED)
    began = time.perf_counter()
    counts = write_workspace(root, entries, corpus)
    print(f"workspace: {root}")
    print(
        f"  wrote {sum(counts.values())} entries ({', '.join(f'{v} {k}' for k, v in counts.items())})"
    )
    print(f"  {tree_size(root) / 1e6:.1f} MB of files in {time.perf_counter() - began:.1f} s")

    search = MemorySearch(root, UTC)
    try:
        began = time.perf_counter()
        stats = await search.rebuild()
        build = time.perf_counter() - began
        indexed, files = await asyncio.to_thread(search.index.stats)
        db = root / ".index"
        print(f"index: {indexed} entries from {files} files ({stats.files} indexed)")
        print(f"  full build {build:.1f} s ({indexed / build:,.0f} entries/s)")
        print(
            f"  size on disk {tree_size(db) / 1e6:.1f} MB (.index/; memory.db"
            f" {(db / 'memory.db').stat().st_size / 1e6:.1f} MB)"
        )

        words = corpus.words
        sample = corpus.chinese(20)  # its pairs and quads occur in the text, by the same draw
        queries = {
            "rare English word": words[-1],
            "common English word": words[0],
            "two English words": f"{words[5]} {words[40]}",
            "English prefix": words[-3][:3] + "*",
            "Chinese 1 character (猫)": "猫",
            "Chinese 2 characters": sample[3:5],
            "Chinese 4 characters": sample[10:14],
            "no match, falls back to any word": f"{words[-2]} zzzqqq",
        }
        everything: list[float] = []
        print("query latency, MemorySearch.search(limit=8), refresh included, 40 runs each:")
        for label, query in queries.items():
            samples = await timed(partial(search.search, query, 8), 40)
            everything += samples
            hits = len(await search.search(query, 8))
            print(f"  {label:34} {percentiles(samples)}   ({hits} hits)")
        print(f"  {'all queries':34} {percentiles(everything)}")

        refresh = await timed(search.refresh, 40)
        print(f"refresh with nothing new ({files} files stat'ed): {percentiles(refresh)}")

        history = MemoryFiles(root, UTC)
        fresh: list[float] = []
        for index in range(20):
            history.append_history(f"[2026-06-01 10:{index:02d}] Booked the quokka tour {index}.")
            began = time.perf_counter()
            found = await search.search(f"quokka {index}", 3)
            fresh.append((time.perf_counter() - began) * 1000)
            assert found and found[0].path == "memory/HISTORY.md", found
        print(f"append a HISTORY.md entry, then search it:  {percentiles(fresh)}")

        message = {
            "role": "user",
            "content": "where is the wombat?",
            "timestamp": "2026-06-01T10:00:00+00:00",
        }
        live = root / "sessions" / "telegram:1.jsonl"
        grown: list[float] = []
        for _ in range(20):
            append_line(live, json.dumps(message))
            began = time.perf_counter()
            await search.search("wombat", 3)
            grown.append((time.perf_counter() - began) * 1000)
        print(f"append a session message, then search it:  {percentiles(grown)}")
    finally:
        await search.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=100_000, help="entries to generate")
    parser.add_argument(
        "--workspace", type=Path, help="keep the workspace here (default: a temp dir)"
    )
    args = parser.parse_args()
    if args.workspace:
        args.workspace.mkdir(parents=True, exist_ok=True)
        asyncio.run(run(args.workspace, args.entries))
        return
    with tempfile.TemporaryDirectory(prefix="memgate-search-bench-") as tmp:
        asyncio.run(run(Path(tmp) / "workspace", args.entries))


if __name__ == "__main__":
    main()
