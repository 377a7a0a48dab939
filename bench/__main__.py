"""`python -m bench` (`make bench`): every figure for both systems, the table, the plot.

Installs nanobot and matplotlib into the bench's own venvs if needed, starts the fake LLM, runs
figures a-f, prints the Markdown report and writes docs/benchmarks.md and docs/benchmarks.png.
`--quick` runs each figure once and writes nothing (a smoke test of the harness); `--only a,f`
runs only the figures named and writes nothing either (for working on one figure).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time

from bench import busy_data, durability, figures, first_text, report
from bench.busy_year import QUERIES, TALKING_CHATS, busy_year
from bench.fakellm import BenchLLM
from bench.figures import Plan
from bench.mcp_start import HANG_TIMEOUT, mcp_start
from bench.memory_quality import RECALL_EVERY, REPEAT_EVERY, TURNS, WINDOW, memory_quality
from bench.runner import Bench, both_systems
from bench.startup import startup
from bench.venvs import REPO, memgate_python, nanobot_python, package_version, tools_python
from gateway import __version__
from memory.tokens import TokenCounter

DOCS = REPO / "docs"


def notes(plan: Plan, minutes: float) -> list[str]:
    """The method, as it belongs next to the figures."""
    f = figures
    return [
        "- The fake LLM runs in a thread of the orchestrating process; each system runs in a fresh "
        "subprocess of its own venv's interpreter per run, on a fresh workspace, and runs "
        "alternate between the systems. Neither logs (memgate's INFO line and nanobot's loguru "
        "output are off).",
        "- memgate is built by `gateway.service.app.open_runtime` (as `memgate run` does) and messages go "
        "to `AgentLoop.handle`, which channels call, as the owner's (a private chat: the whole "
        "prompt with MEMORY.md, USER.md and today's note, as nanobot gives every sender). nanobot "
        "is wired as its `nanobot gateway` "
        "command does (its config loader, provider factory, SessionManager, CronService, "
        "AgentLoop) and messages go through its MessageBus into `AgentLoop.run()`. Each keeps "
        "its default concurrency: memgate `agent.max_concurrency` 8, nanobot "
        "`NANOBOT_MAX_CONCURRENT_REQUESTS` 3. Both use gpt-4o-mini's settings with a 128,000-token "
        "window and max_tokens 4,096 unless said otherwise.",
        "- a: every chat sends its 20 messages one after another, all chats at once, after 3 "
        "warm-up turns; the single chat is played 5 times (fresh chat each time) so that its "
        "p99 rests on 100 turns. Latency is the whole turn including the LLM round trip over "
        "loopback; the first row is that round trip alone (the system's own provider calling "
        "the fake), the floor under every turn. The p99 target is judged on 1 chat, where "
        "latency is not queueing behind other chats. Prompt files are looked at once a second "
        "at most (as shipped), so most turns do no `stat`. memgate's chat calls go through the "
        "openai SDK's aiohttp transport (`openai.DefaultAioHttpClient`), nanobot's through the "
        "SDK's default httpx transport; both with the SDK's retries and typed errors.",
        f"- b: the session file is written by each system's own session store, either with all "
        f"but the last 10 messages marked consolidated (what a deployment has) or with none "
        f"consolidated, under a context window that holds the whole history at under half its "
        f"budget (200 tokens a stored message + 128,000) and, for memgate, `memory.window` above "
        f"the count, so that neither system consolidates; ~50-token messages. A fresh process "
        f"then takes 3 warm-up turns on another chat, one first turn on this chat (cold: it "
        f"loads the file) and {f.TIMED_TURNS} more (warm); with nothing consolidated, "
        f"{f.WHOLE_RUNS} run of {f.WHOLE_TURNS} warm turns per system (a turn at 100k takes "
        f"nanobot about a minute). memgate's store also wrote its session index, as it does "
        f"whenever the consolidation pointer moves.",
        f"- c: memgate with `memory.window: {f.MEMGATE_WINDOW}`. nanobot 0.1.4.post6 has no "
        f"message window; it consolidates when its token estimate reaches its budget, so its "
        f"context window is set to its own fixed prompt + max_tokens + 1024 + "
        f"{f.NANOBOT_MARGIN} tokens. The fake holds the first consolidation call "
        f"{f.HOLD_SECONDS:.0f} s; the chat's next turns, up to {f.HELD_SAMPLES} while the call "
        f"is still held, are timed against the same turns of a twin chat played in lockstep in "
        f"the same process by a second instance where nothing consolidates (memgate window "
        f"1000, nanobot's default 128,000-token window).",
        "- d: `memgate chat -m` and `nanobot agent -m --no-markdown` (both stream their reply), after one untimed run that creates the workspace files; the time "
        "runs from spawning the console script to the reply on its stdout, and to its exit. "
        "nanobot builds its tokenizer's vocabulary (cl100k_base) during the first turn; memgate "
        "builds its own (o200k_base) only when a prompt may not fit its budget by bytes, which "
        "this one-line chat never reaches. memgate's in-process chat imports the openai SDK; "
        "the SDK row is that import alone in a fresh interpreter, the floor under the first "
        "row (its package imports every `openai.types` module, and aiohttp, which builds its "
        "TLS contexts at import). The attached row "
        "is `memgate chat -m` while `memgate run` serves the same workspace (its Telegram channel "
        "on the test fake, in a process of its own): the terminal then talks to the service's "
        "agent over its control socket and imports neither the agent nor the SDK; nanobot has "
        "no such mode.",
        f"- e: the driver process first imports what the system's gateway command imports with "
        f"its Telegram channel (memgate: its CLI, `gateway.service.run` and `channels.telegram.channel`; "
        f"nanobot: its CLI and `nanobot.channels.telegram`), so python-telegram-bot counts for "
        f"both; the first row (start only) imports the Discord channel too (memgate's "
        f"`channels.discord.channel` with discord.py, nanobot's `nanobot.channels.discord`), as "
        f'a gateway with both channels enabled does. "After start" is VmRSS once the system is '
        f"built, before any turn; the peak is "
        f"the process's own VmHWM (not `ru_maxrss`, which Linux carries across exec from the "
        f"orchestrator). 16 chats at a time; sizes {', '.join(f'{n:,}' for n in f.RSS_SESSIONS)}. "
        "One turn per chat neither consolidates nor reaches memgate's budget by bytes, so memgate "
        "never builds its tokenizer's vocabulary here; a deployment builds it the first time a "
        "prompt, or the lines a consolidation call would take, may not fit by bytes (on a small "
        "context window, about when its first chat grows long), which adds about 45 MB resident, "
        "and about 75 MB at the peak while it is built.",
        f"- f: both with context window {f.LONG_WINDOW:,} and max_tokens {f.LONG_MAX_TOKENS:,}, "
        f"so both budgets are {f.LONG_WINDOW - f.LONG_MAX_TOKENS - 1024:,} tokens; ~80-token "
        f"messages echoed back. Prompts counted at the fake with o200k_base (4 tokens per message "
        f"plus the tool schemas), the same for both; nanobot itself estimates with cl100k_base. "
        f"memgate keeps its defaults (`memory.window` 100): a run consolidates what is due and "
        f"fills its call with the following whole turns, short of the newest 4; nanobot "
        f"consolidates from its full budget down to half of it.",
        f"- g: `memgate chat -m` (streaming on, and `--no-stream`) and `nanobot agent -m "
        f"--no-markdown`, each on a pseudo-terminal (nanobot draws its stream only on one); the "
        f"fake writes a {first_text.TOKENS}-token reply at {first_text.RATE:.0f} tokens/s, "
        f"streamed or whole. Timed from the fake receiving the request to the reply's first "
        f"word, and to its last, appearing in the output; start-up is figure d. Runs as d.",
        f"- h: memgate alone, on a year of a busy bot written by the bench in its scratch folder "
        f"(bench/busy_data.py): {busy_data.CHATS:,} session files holding "
        f"{busy_data.MESSAGES:,} messages (sizes falling as 1/rank, none under 4; one in "
        f"{busy_data.ARCHIVED_EVERY} a conversation /new archived), consolidated as a running bot "
        f"leaves them (a marker every {busy_data.CONSOLIDATE_EVERY} messages past the window), "
        f"with each file's session index and the search index built by memgate's own code, a "
        f"HISTORY.md of {busy_data.HISTORY_ENTRIES:,} entries and a MEMORY.md of about 3,400 "
        f"tokens. The real `memgate run` (Telegram on the fake Bot API in a process of its own) "
        f"with a message queued in the biggest chat before the spawn, then one message in each of "
        f"{TALKING_CHATS:,} other chats (their turns consolidate what passes the window); the same "
        f"on an empty workspace. Search: `MemorySearch.search` in a fresh process, {QUERIES} "
        f"queries (rare, common and two words, prefixes, Chinese), each refreshing the index "
        f"first as the agent's tool does; consolidation: the biggest chat's pending messages, as "
        f"`memgate memory consolidate KEY` runs it.",
        f"- i: memgate alone. `memgate chat -m` with four MCP servers in its config (three of the "
        f"test's fake stdio server, one `sleep` that never answers, start_timeout "
        f"{HANG_TIMEOUT} s) against the same config without them, after one untimed run of each "
        f"(the one that learns the servers' tools and that the silent one fails, as a first chat "
        f"does); then `memgate run` (Telegram on the fake Bot API, a message queued before the "
        f"spawn) with and without a server that never answers (default start_timeout, 20 s), "
        f"from spawning the console script to `/healthz` answering 200 and to the fake receiving "
        f"the answer, and from SIGTERM to exit. Runs as d.",
        f"- j: memgate alone, in the orchestrating process against the test fake scripted as a "
        f"naive model: {TURNS} turns in the owner's DM (`memory.window` {WINDOW}), the person "
        f"stating a new fact each turn and every {REPEAT_EVERY}th turn an earlier one again in "
        f"capitals with doubled spaces; every {RECALL_EVERY}th turn the chat model calls "
        f"`memory_search` before it answers. Consolidation's model files every fact it reads and "
        f"every recalled snippet it can see as a new line ('The user once said: ...'), as a model "
        f"re-extracting its own recall does; recalls reach it as markers, so none can be. One run "
        f"(the figures are counts), the turns left unconsolidated at the end then consolidated as "
        f"`memgate memory consolidate` does. With the markers taken out of the code, the same "
        f"script ends with 8 recalls filed again (and 52 more caught as repeats).",
        f"- Runs: a {plan.overhead}, b {plan.history}, c {plan.held}, d {plan.startup}, "
        f"e {plan.rss_small} (1k) and {plan.rss_large} (10k), f {plan.prompts}, h {plan.year} "
        f"per system; the "
        f"whole bench took {minutes:.1f} minutes.",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one run each; write nothing")
    parser.add_argument(
        "--only", default="abcdefghij", help="figures to run, e.g. a,f (then nothing is written)"
    )
    args = parser.parse_args()
    only = set(args.only.replace(",", ""))
    unknown = only - set("abcdefghij")
    if unknown:
        parser.error(f"--only: no figure {', '.join(sorted(unknown))} (figures are a to j)")
    partial = only != set("abcdefghij")
    writes = not args.quick and not partial
    plan = Plan(1, 1, 1, 1, 1, 1, 1, 1) if args.quick else Plan()
    started = time.monotonic()
    load_start = os.getloadavg()[0]
    nanobot_py = nanobot_python()
    versions = {
        "memgate": __version__,
        "nanobot": package_version(nanobot_py, "nanobot-ai"),
        "openai": package_version(nanobot_py, "openai"),
    }
    systems = both_systems(nanobot_py, memgate_python())
    llm = BenchLLM()
    llm.start()
    bench = Bench(llm)
    os.environ["TIKTOKEN_CACHE_DIR"] = bench.env["TIKTOKEN_CACHE_DIR"]  # the counter of figure f
    fsync: list[str] = []
    history_plot: dict[str, object] = {}
    prompt_plot: dict[str, object] = {}
    rows = []
    try:
        if "a" in only:
            print("a. overhead per turn", flush=True)
            rows += figures.overhead(bench, systems, plan.overhead)
            print("a. the cost of fsync (memgate alone)", flush=True)
            fsync = durability.summary(asyncio.run(durability.measure(plan.overhead)))
        if "b" in only:
            print("b. stored history", flush=True)
            history_rows, history_plot = figures.history(bench, systems, plan.history)
            rows += history_rows
        if "c" in only:
            print("c. held consolidation", flush=True)
            rows += figures.held(bench, systems, plan.held)
        if "d" in only:
            print("d. start to first reply", flush=True)
            rows += startup(bench, systems, plan.startup)
        if "e" in only:
            print("e. peak RSS", flush=True)
            rows += figures.rss(bench, systems, plan)
        if "f" in only:
            print("f. prompt tokens", flush=True)
            prompt_rows, prompt_plot = figures.prompts(
                bench, systems, plan.prompts, TokenCounter("gpt-4o-mini")
            )
            rows += prompt_rows
        if "g" in only:
            print("g. first visible text", flush=True)
            rows += first_text.first_text(bench, systems, plan.startup)
        if "h" in only:
            print("h. a year of a busy bot", flush=True)
            rows += busy_year(bench, plan.year)
        if "i" in only:
            print("i. MCP servers at start", flush=True)
            rows += mcp_start(bench, systems, plan.startup)
        if "j" in only:
            print("j. memory that does not feed on itself", flush=True)
            rows += memory_quality()
        if not partial:
            data = bench.scratch / "plot.json"
            data.write_text(json.dumps({"history": history_plot, "prompts": prompt_plot}))
            png = (DOCS if writes else bench.scratch) / "benchmarks.png"
            subprocess.run(
                [str(tools_python()), "-m", "bench.plot", str(data), str(png)], cwd=REPO, check=True
            )
    finally:
        bench.close()
        llm.stop()
    versions["load"] = f"{load_start:.2f} / {os.getloadavg()[0]:.2f}"
    text = report.render(rows, versions, notes(plan, (time.monotonic() - started) / 60))
    if fsync:
        text += "\n## Durability: what fsync costs figure a\n\n" + "\n".join(fsync) + "\n"
    print(text)
    if writes:
        (DOCS / "benchmarks.md").write_text(text, encoding="utf-8")
        print(f"wrote {DOCS / 'benchmarks.md'} and {DOCS / 'benchmarks.png'}", file=sys.stderr)


if __name__ == "__main__":
    main()
