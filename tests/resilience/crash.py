"""The crash run: `memgate run` SIGKILLed at random moments while twenty chats keep writing.

Shared by tests/resilience/test_crash.py (20 kills) and bench/soak.py (as many as asked). Every
random choice comes from a seeded generator, printed first, so a failing run can be replayed with
the same choices (the timing of the processes still varies). After the last restart the run stops
cleanly and checks what is on disk against what the fake Bot API delivered.

With `groups`, the first chats are supergroups instead (the owner mentions the bot): there each
answer streams slowly into a message edited as it grows, so kills land mid-stream, and an answer
counts as given twice when two of the bot's messages reply to the same question.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memory.files import MEMORY_TEMPLATE
from memory.sessions.store import turn_after
from tests.fakes.llm import (
    FakeLLM,
    consolidation_reply,
    is_consolidation,
    last_user_text,
    streamed,
    text,
    tool_call,
)
from tests.fakes.telegram_api import FakeTelegram
from tests.resilience.harness import Gateway, SessionFile, read_session, session_paths, until

FIRST_CHAT = 101
GROUP_SHARE = 0.15  # a group's turn of the drive's chat choice that writes (its answers are slow)
GROUP_RATE = 2.0  # tokens a second of a group's answer: about two seconds, shown while it grows
MENTION = "@memgate_bot "
_TEXT = re.compile(r"c(\d+)-m(\d+)")


@dataclass
class CrashReport:
    """What a crash run did and found; `problems` lists every broken promise."""

    seed: int
    kills: int = 0
    kills_before_ready: int = 0
    starts: int = 0
    redeliveries: int = 0
    messages: int = 0  # user texts pushed to the fake Bot API
    resets: int = 0  # /new commands pushed
    replies: int = 0  # answers delivered by sendMessage
    stored: int = 0  # distinct user texts found in the session files
    unanswered: int = 0  # stored, but never answered (a broken promise)
    repeated: int = 0  # answers delivered more than once (at least once: a kill after sending)
    group_messages: int = 0  # of `messages`, written in groups
    group_repeated: int = 0  # of `repeated`, in groups: two of the bot's messages for one question
    group_twice: list[str] = field(default_factory=list)  # those questions
    tool_turns: int = 0  # turns with a tool step, as stored
    lost: list[str] = field(default_factory=list)  # pushed, never stored
    memory_checks: int = 0
    memory_versions: int = 0
    consolidations: int = 0  # consolidation markers in the session files
    archives: int = 0
    torn_tails: int = 0
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"seed={self.seed} kills={self.kills} (before ready: {self.kills_before_ready}) "
            f"starts={self.starts} redeliveries={self.redeliveries} messages={self.messages} "
            f"resets={self.resets} replies={self.replies} stored={self.stored} "
            f"unanswered_after_kill={self.unanswered} lost={len(self.lost)} "
            f"memory_checks={self.memory_checks} memory_versions={self.memory_versions} "
            f"consolidations={self.consolidations} archives={self.archives} "
            f"torn_tails={self.torn_tails} tool_turns={self.tool_turns} "
            f"repeated={self.repeated} (in groups: {self.group_repeated} of "
            f"{self.group_messages}) problems={len(self.problems)}"
        )


class ScriptedModel:
    """The fake LLM's answers for the run: an echo naming the message, well-formed consolidations.

    One message in `tool_every` (chosen by its text, so a replay chooses the same) first gets a
    tool step (list_dir), then the echo once the tool's result is in.

    Every MEMORY.md text the model hands out is remembered, so a check can tell a whole file from a
    partial one: MEMORY.md must always equal the template or one of these, byte for byte.
    """

    def __init__(self, tool_every: int = 10, slow: frozenset[int] = frozenset()) -> None:
        self.memory_texts = {MEMORY_TEMPLATE}
        self.tool_every = tool_every
        self.slow = slow  # chats whose answers stream at GROUP_RATE

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        if not is_consolidation(body):
            asked = last_user_text(body)
            last = body.get("messages", [{}])[-1]
            if (
                self.tool_every
                and last.get("role") == "user"
                and _TEXT.fullmatch(asked)
                and zlib.crc32(asked.encode()) % self.tool_every == 0
            ):
                return tool_call("list_dir", {"path": "."})
            match = _TEXT.fullmatch(asked)
            if match is not None and int(match.group(1)) in self.slow:
                return streamed(f"echo: {asked}", GROUP_RATE)
            return text(f"echo: {asked}")
        reply = consolidation_reply(body)
        arguments = json.loads(reply["tool_calls"][0]["arguments"])
        if "memory_update" in arguments:
            self.memory_texts.add(arguments["memory_update"])
        return reply


def check_memory(workspace: Path, model: ScriptedModel, report: CrashReport, when: str) -> None:
    """MEMORY.md exists once created, and is never empty, partial or foreign."""
    path = workspace / "memory" / "MEMORY.md"
    report.memory_checks += 1
    if not path.exists():
        if report.memory_checks > 1 and report.starts > 1:
            report.problems.append(f"{when}: MEMORY.md is missing")
        return
    data = path.read_bytes()
    try:
        content = data.decode("utf-8")
    except UnicodeDecodeError:
        report.problems.append(f"{when}: MEMORY.md is not UTF-8")
        return
    if content not in model.memory_texts:
        report.problems.append(f"{when}: MEMORY.md is empty or partial ({len(data)} bytes)")


async def crash_run(
    root: Path,
    llm: FakeLLM,
    telegram: FakeTelegram,
    *,
    kills: int = 20,
    chats: int = 20,
    seed: int | None = None,
    tool_every: int = 10,
    max_repeats: int = 1,
    env: dict[str, str] | None = None,
    say: Callable[[str], None] = print,
    groups: int = 0,
) -> CrashReport:
    """Drive `chats` chats (the first `groups` of them supergroups) while killing `memgate run`
    `kills` times; then check everything."""
    seed = random.randrange(2**32) if seed is None else seed
    say(
        f"crash run: seed={seed} kills={kills} chats={chats} groups={groups} (replay with this seed)"
    )
    report = CrashReport(seed)
    grouped = frozenset(range(FIRST_CHAT, FIRST_CHAT + groups))  # chat -n, written by user n
    model = ScriptedModel(tool_every, grouped)
    llm.default = model
    gateway = Gateway(
        root,
        llm,
        telegram,
        {
            "memory": {"window": 6, "workers": 2},
            # Owners, listed by id: their DMs consolidate into MEMORY.md ("*" would make guests).
            "channels": {"telegram": {"allow_from": [str(FIRST_CHAT + n) for n in range(chats)]}},
            "shutdown_grace": 1,
        },
        env or {},
    )
    pushed: list[str] = []
    resets: Counter[int] = Counter()
    driving = asyncio.Event()
    driving.set()

    async def drive(rng: random.Random) -> None:
        number = 0
        while driving.is_set():
            chat = FIRST_CHAT + rng.randrange(chats)
            if chat in grouped:
                if rng.random() < GROUP_SHARE:
                    message = f"c{chat}-m{number}"
                    telegram.message(MENTION + message, chat_id=-chat, user_id=chat)
                    pushed.append(message)
                    report.group_messages += 1
                    number += 1
            elif rng.random() < 0.03:
                telegram.message("/new", chat_id=chat, user_id=chat)
                resets[chat] += 1
            else:
                message = f"c{chat}-m{number}"
                telegram.message(message, chat_id=chat, user_id=chat)
                pushed.append(message)
                number += 1
            await asyncio.sleep(rng.uniform(0.01, 0.12))

    killed_at: list[float] = []  # the fakes' clock, for group-calls.json
    killer = random.Random(seed)
    driver = asyncio.create_task(drive(random.Random(seed + 1)))
    try:
        for cycle in range(1, kills + 1):
            llm.delay = killer.uniform(0.0, 0.3)
            await gateway.start(ready=False)
            if killer.random() < 0.2:
                await asyncio.sleep(killer.uniform(0.0, 1.5))  # in start-up or recovery
                report.kills_before_ready += 1
            else:
                await gateway.wait_ready()
                await asyncio.sleep(killer.uniform(0.1, 2.0))
            await gateway.kill()
            killed_at.append(time.monotonic())
            report.kills += 1
            check_memory(gateway.workspace, model, report, f"after kill {cycle}")
            if killer.random() < 0.5:
                telegram.redeliver()  # as if Telegram never heard the last offset
                report.redeliveries += 1
        driving.clear()
        await driver
        llm.delay = 0.0
        await gateway.start()
        finals = []
        for chat in range(FIRST_CHAT, FIRST_CHAT + chats):
            finals.append(f"c{chat}-final")
            if chat in grouped:
                telegram.message(MENTION + finals[-1], chat_id=-chat, user_id=chat)
            else:
                telegram.message(finals[-1], chat_id=chat, user_id=chat)

        def all_answered() -> bool:
            delivered = {p.get("plain") for p in telegram.sent()}
            delivered |= {t for chat in grouped for t in telegram.shown(-chat)}
            return all(f"echo: {final}" in delivered for final in finals)

        await until(all_answered, 90, "the final answers")
        status = await gateway.stop()
        if status != 0:
            report.problems.append(f"the final SIGTERM exited {status}")
        check_memory(gateway.workspace, model, report, "at the end")
    finally:
        driving.clear()
        if not driver.done():
            driver.cancel()
        await gateway.close()
    report.starts = gateway.starts
    report.messages = len(pushed)
    report.resets = sum(resets.values())
    report.memory_versions = len(model.memory_texts)
    audit(gateway.workspace, telegram, pushed, resets, report, max_repeats, grouped)
    say(f"crash run: {report.summary()}")
    if report.group_twice:
        say(f"  answered twice in groups: {report.group_twice[:20]}")
    if grouped:  # for inspection: what the groups' calls did to which message, in order
        calls = [
            {"method": c.method, "at": c.at, "status": c.status, **c.params}
            for c in telegram.calls
            if -c.params.get("chat_id", 0) in grouped and c.method != "sendChatAction"
        ]
        inspection = {"killed_at": killed_at, "calls": calls}
        (root / "group-calls.json").write_text(json.dumps(inspection, indent=1, default=str))
    for problem in report.problems[:20]:
        say(f"  problem: {problem}")
    return report


def audit(
    workspace: Path,
    telegram: FakeTelegram,
    pushed: list[str],
    resets: Counter[int],
    report: CrashReport,
    max_repeats: int = 1,
    grouped: frozenset[int] = frozenset(),
) -> None:
    """Compare the session files with what was pushed and what the fake Bot API delivered."""
    sessions: list[SessionFile] = []
    for path in session_paths(workspace):
        try:
            sessions.append(read_session(path))
        except ValueError as exc:
            report.problems.append(f"session file does not parse: {exc}")
    report.archives = sum(1 for s in sessions if s.path.parent.name == "archive")
    report.torn_tails = sum(1 for s in sessions if s.torn)
    stored: Counter[str] = Counter()
    answered_in_file: set[str] = set()
    for session in sessions:
        messages = session.messages
        numbers = []
        for index, message in enumerate(messages):
            if message["role"] != "user":
                continue
            content = str(message.get("content"))
            stored[content] += 1
            if match := _TEXT.fullmatch(content):
                numbers.append(int(match.group(2)))
            # The answer follows the message, after the turn's tool steps if it had any.
            steps, answer, _ = turn_after(messages, index)
            report.tool_turns += bool(steps)
            if answer is not None and answer.get("content") == f"echo: {content}":
                answered_in_file.add(content)
        if numbers != sorted(numbers):
            report.problems.append(f"{session.path.name}: user messages out of order")
        markers = [r for r in session.records if r.get("_type") == "consolidated"]
        report.consolidations += len(markers)
        if any(r["last_consolidated"] > len(messages) for r in markers):
            report.problems.append(f"{session.path.name}: a marker points past the messages")
    history = workspace / "memory" / "HISTORY.md"
    entries = 0
    if history.exists():
        try:
            body = history.read_bytes().decode("utf-8")
            entries = body.count(" Summary of ") + body.count(" [RAW] ")
        except UnicodeDecodeError:
            report.problems.append("HISTORY.md is not UTF-8")
    if entries < report.consolidations:
        report.problems.append(
            f"HISTORY.md has {entries} entries for {report.consolidations} consolidation markers"
        )

    private = [p for p in telegram.sent() if -p.get("chat_id", 0) not in grouped]
    replies = [str(p.get("plain", p.get("text"))) for p in private]
    answers = [r.removeprefix("echo: ") for r in replies if r.startswith("echo: ")]
    asked, whole = group_answers(telegram, grouped)
    report.group_repeated = len(asked) - len(set(asked))
    report.group_twice = sorted(q for q, count in Counter(asked).items() if count > 1)
    report.replies = len(answers) + len(whole)
    report.repeated = len(answers) - len(set(answers)) + report.group_repeated
    answers += whole
    if report.repeated > max_repeats:
        repeats = [a for a, count in Counter(answers).items() if count > 1]
        report.problems.append(f"{report.repeated} answers repeated (at most {max_repeats}): "
                               f"{repeats[:5]}")  # fmt: skip
    for unstored in set(answers) - answered_in_file:
        report.problems.append(f"{unstored!r} was answered but its lines are not in a session")
    for content, count in stored.items():
        if count > 1 and content != "/new":
            report.problems.append(f"{content!r} is stored {count} times")
    new_replies = Counter(
        p["chat_id"] for p in telegram.sent() if p.get("plain") == "New session started."
    )
    for chat, count in new_replies.items():
        if count > resets[chat]:
            report.problems.append(f"chat {chat}: {count} /new answers for {resets[chat]} /new")
    everything = set(pushed) | {f"c{c}-final" for c in range(FIRST_CHAT, FIRST_CHAT + 1000)}
    report.stored = len(set(stored) & everything)
    report.unanswered = len((set(stored) & set(pushed)) - set(answers))
    if report.unanswered:
        never = sorted((set(stored) & set(pushed)) - set(answers))
        report.problems.append(f"{report.unanswered} kept but never answered: {never[:5]}")
    report.lost = [message for message in pushed if message not in stored]


def group_answers(telegram: FakeTelegram, grouped: frozenset[int]) -> tuple[list[str], list[str]]:
    """In the groups: the question each of the bot's messages answers (by the message it replies
    to; a follow-up part replies to none), and the questions whose answer reads whole."""
    questions = {
        int(u["message"]["message_id"]): str(u["message"].get("text", "")).removeprefix(MENTION)
        for u in telegram.updates
        if "message" in u
    }
    asked: list[str] = []
    whole: list[str] = []
    for chat in grouped:
        for shown in telegram.chats.get(-chat, {}).values():
            question = questions.get(shown.get("reply_to") or 0)
            if question is None:
                continue
            asked.append(question)
            if shown["plain"] == f"echo: {question}":
                whole.append(question)
    return asked, whole
