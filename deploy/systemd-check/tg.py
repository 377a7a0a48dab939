"""The systemd check's small client for the fakes and memgate's health endpoint (stdlib only).

tg.py up URL          exit 0 once URL answers HTTP at all
tg.py send TEXT       a private message from user 42 to the bot (the Telegram fake)
tg.py replied TEXT    exit 0 if the bot has sent "echo: TEXT" (the fake LLM echoes)
tg.py said PREFIX     print the bot's last message starting with PREFIX; exit 1 if there is none
tg.py count METHOD    how many times the bot called a Bot API method
tg.py healthy         exit 0 if memgate's /healthz says Telegram is connected
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.parse
import urllib.request

TELEGRAM = "http://127.0.0.1:8081"
HEALTH = "http://127.0.0.1:8765/healthz"


def get(url: str, data: bytes | None = None) -> object:
    with urllib.request.urlopen(url, data=data, timeout=5) as answer:
        return json.load(answer)


def main(command: str, argument: str = "") -> int:
    try:
        if command == "up":
            try:
                urllib.request.urlopen(argument, timeout=2).close()
            except urllib.error.HTTPError:
                pass  # any answer means the server is up
            return 0
        if command == "send":
            query = urllib.parse.urlencode({"text": argument, "user_id": 42})
            get(f"{TELEGRAM}/ctl/message?{query}", data=b"")
            return 0
        if command == "replied":
            sent = get(f"{TELEGRAM}/ctl/sent")
            assert isinstance(sent, list)
            return 0 if any(m["text"] == f"echo: {argument}" for m in sent) else 1
        if command == "said":
            sent = get(f"{TELEGRAM}/ctl/sent")
            assert isinstance(sent, list)
            found = [m["text"] for m in sent if m["text"].startswith(argument)]
            if found:
                print(found[-1])
            return 0 if found else 1
        if command == "count":
            calls = get(f"{TELEGRAM}/ctl/calls")
            assert isinstance(calls, list)
            print(calls.count(argument))
            return 0
        if command == "healthy":
            health = get(HEALTH)
            assert isinstance(health, dict)
            return 0 if health["channels"]["telegram"]["connected"] else 1
    except (OSError, ValueError, KeyError):
        return 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
