"""A fake Telegram Bot API on 127.0.0.1 (aiohttp.web) for the real python-telegram-bot.

Tests push updates that a long-polling getUpdates hands out (honouring offset), register files for
getFile and download, and script failures (400 "can't parse entities", 429 with retry_after); every
call is recorded. The bot's messages are kept as the person sees them (edits included); drafts
(sendMessageDraft) are taken in private chats unless `drafts_refused`; deleteMessage removes one.
An inline keyboard sent with a message is kept with it; `press` has a person press one of its
buttons (a callback_query update), which the bot answers with answerCallbackQuery (once, as
Telegram allows) and may take off with editMessageReplyMarkup (editMessageText without a
reply_markup takes it off too, as Telegram does).
Unknown methods get Telegram's JSON error with status 400 (PTB reads 401 and 404 as a bad token).
A real `TelegramChannel` is run against it by `tests.fakes.telegram_harness`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import html
import itertools
import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.serving import serve_until_interrupted

TOKEN = "123456789:AAH-fake-token-for-tests_0123456789ab"
BOT = {
    "id": 123456789,
    "is_bot": True,
    "first_name": "Memgate",
    "username": "memgate_bot",
    "can_join_groups": True,
    "can_read_all_group_messages": False,
    "supports_inline_queries": False,
}
WAIT = 10.0  # seconds a test waits for the fake to see something

# Parameters PTB sends JSON-encoded inside form fields; everything else stays a string.
_JSON_PARAMS = {"reply_parameters", "allowed_updates", "commands", "scope", "entities",
                "reply_markup"}  # fmt: skip
_INT_PARAMS = {"message_thread_id", "offset", "limit", "timeout", "max_connections", "message_id",
               "draft_id"}  # fmt: skip
_MENTION = re.compile(r"(?<![\w@])@\w{3,}|^/\w+(?:@\w+)?")

Json = dict[str, Any]


@dataclass
class Call:
    """One request: the method, its decoded parameters, the HTTP status answered, and when. The
    status is 0 while unanswered; a sendMessage counts as 200 once the message is made, even if
    its answer never reaches the client (a request held before that is never counted as taken)."""

    method: str
    params: Json
    status: int = 0
    at: float = field(default_factory=time.monotonic)


# The request being answered, in its handler's task (aiohttp runs each request in its own).
_CALL: contextvars.ContextVar[Call] = contextvars.ContextVar("call")


@dataclass
class Failure:
    """A scripted error for the next call of `method` that `match` accepts."""

    method: str
    status: int
    description: str
    retry_after: int | None = None
    match: Callable[[Json], bool] | None = None


_TAGS = {"b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "span", "tg-spoiler", "a",
         "code", "pre", "blockquote", "tg-emoji"}  # fmt: skip
_TAG = re.compile(r"<(/?)([a-z-]+)((?:\s+[a-z-]+(?:=\"[^\"<>]*\")?)*)\s*>")
_ENTITY = re.compile(r"&(?:lt|gt|amp|quot|#\d+|#x[0-9a-fA-F]+);")


def parse_html(text: str) -> str:
    """Telegram's reading of an HTML message: its plain text; ValueError where Telegram says 400."""
    plain: list[str] = []
    stack: list[str] = []
    at = 0
    while at < len(text):
        if text[at] == "<":
            tag = _TAG.match(text, at)
            if tag is None or tag.group(2) not in _TAGS:
                raise ValueError(f"Unsupported start tag at byte offset {at}")
            closing, name = tag.group(1) == "/", tag.group(2)
            if closing:
                if not stack or stack.pop() != name:
                    raise ValueError(f"Can't find end tag corresponding to start tag {name!r}")
            else:
                if name in ("code", "pre") and stack and stack[-1] == "code":
                    raise ValueError("Entities can't be nested inside code")
                stack.append(name)
            at = tag.end()
        elif text[at] == "&":
            entity = _ENTITY.match(text, at)
            if entity is None:
                raise ValueError(f"Unsupported entity at byte offset {at}")
            plain.append(html.unescape(entity.group(0)))
            at = entity.end()
        elif text[at] == ">":
            raise ValueError(f"Unexpected > at byte offset {at}")
        else:
            plain.append(text[at])
            at += 1
    if stack:
        raise ValueError(f"Can't find end tag corresponding to start tag {stack[-1]!r}")
    return "".join(plain)


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def auto_entities(text: str) -> list[Json]:
    """The mention and bot_command entities Telegram would attach, offsets in UTF-16 units."""
    entities = []
    for match in _MENTION.finditer(text):
        kind = "bot_command" if match.group(0).startswith("/") else "mention"
        offset = utf16_len(text[: match.start()])
        entities.append({"type": kind, "offset": offset, "length": utf16_len(match.group(0))})
    return entities


@dataclass
class FakeTelegram:
    """The server's state: pending updates, registered files, scripted failures, every call."""

    url: str = ""  # base_url for PTB, ending in /bot
    file_url: str = ""  # base_file_url, ending in /file/bot
    calls: list[Call] = field(default_factory=list)
    updates: list[Json] = field(default_factory=list)
    confirmed: int = 0  # getUpdates offset: updates below it are gone
    failures: list[Failure] = field(default_factory=list)
    files: dict[str, Json] = field(default_factory=dict)
    contents: dict[str, bytes] = field(default_factory=dict)
    commands: list[Json] = field(default_factory=list)
    penalty_until: float = 0.0
    penalty_violations: int = 0
    drafts_refused: bool = False  # as a Bot API server older than 9.3 answers sendMessageDraft
    on_call: Callable[[Call], None] | None = None  # a test's look at the world as each call arrives
    # The bot's messages as they stand now, per chat: message_id -> {"plain", "html", ...}.
    chats: dict[int, dict[int, Json]] = field(default_factory=dict)
    presses: dict[str, bool] = field(default_factory=dict)  # callback query id -> answered
    _update_ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1000))
    _message_ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    # -- scripting ---------------------------------------------------------------------------------
    def push(self, update: Json) -> int:
        """Queue a raw update (an update_id is added if missing); returns its update_id."""
        update.setdefault("update_id", next(self._update_ids))
        self.updates.append(update)
        asyncio.get_running_loop().create_task(self._notify())
        return int(update["update_id"])

    def message(
        self,
        text: str | None = None,
        *,
        chat_id: int = 42,
        user_id: int = 42,
        username: str | None = "alice",
        chat_type: str | None = None,
        thread_id: int | None = None,
        reply_to_bot: bool = False,
        caption: str | None = None,
        entities: list[Json] | None = None,
        **extra: Any,
    ) -> int:
        """Push a message update as Telegram builds it; returns its update_id."""
        kind = chat_type or ("private" if chat_id > 0 else "supergroup")
        chat: Json = {"id": chat_id, "type": kind}
        if kind != "private":
            chat["title"] = "Team"
            chat["is_forum"] = thread_id is not None
        sender = {"id": user_id, "is_bot": False, "first_name": "Alice"}
        if username:
            sender["username"] = username
        message: Json = {
            "message_id": next(self._message_ids),
            "date": int(time.time()),
            "chat": chat,
            "from": sender,
            **extra,
        }
        if text is not None:
            message["text"] = text
            message["entities"] = auto_entities(text) if entities is None else entities
        if caption is not None:
            message["caption"] = caption
            message["caption_entities"] = auto_entities(caption) if entities is None else entities
        if thread_id is not None:
            message["message_thread_id"] = thread_id
            message["is_topic_message"] = True
        if reply_to_bot:
            message["reply_to_message"] = {
                "message_id": next(self._message_ids),
                "date": int(time.time()),
                "chat": chat,
                "from": BOT,
                "text": "an earlier answer",
            }
        return self.push({"message": message})

    def press(
        self,
        chat_id: int,
        message_id: int,
        label: str,
        *,
        user_id: int = 42,
        username: str | None = "alice",
    ) -> str:
        """A person presses the button labelled `label` under the bot's message, as Telegram
        reports it (a callback_query carrying the button's callback_data); returns the query id.
        A button the message does not show cannot be pressed."""
        kept = self.chats.get(chat_id, {}).get(message_id)
        rows = (kept or {}).get("keyboard") or {}
        buttons = [b for row in rows.get("inline_keyboard", []) for b in row]
        found = [b for b in buttons if b.get("text") == label]
        if not found:
            raise AssertionError(
                f"message {message_id} in chat {chat_id} shows no {label!r} button"
            )
        assert kept is not None
        query_id = str(next(self._update_ids) * 7919)  # Telegram's ids are long digit strings
        self.presses[query_id] = False
        sender = {"id": user_id, "is_bot": False, "first_name": "Presser"}
        if username:
            sender["username"] = username
        message = self._message_json(chat_id, message_id, kept)
        self.push(
            {
                "callback_query": {
                    "id": query_id,
                    "from": sender,
                    "message": message,
                    "chat_instance": str(-chat_id * 31),
                    "data": found[0]["callback_data"],
                }
            }
        )
        return query_id

    def keyboard(self, chat_id: int, message_id: int) -> list[str]:
        """The labels of the buttons under one of the bot's messages as it shows now."""
        kept = self.chats.get(chat_id, {}).get(message_id) or {}
        rows = (kept.get("keyboard") or {}).get("inline_keyboard", [])
        return [button["text"] for row in rows for button in row]

    def add_file(
        self, data: bytes, *, file_id: str, unique_id: str, path: str, size: int | None = None
    ) -> Json:
        """Register a downloadable file; returns the object to put into a message."""
        info = {"file_id": file_id, "file_unique_id": unique_id, "file_size": size or len(data)}
        self.files[file_id] = {**info, "file_path": path}
        self.contents[path] = data
        return info

    @contextlib.contextmanager
    def sends_unanswered(self, after: int = 0) -> Iterator[asyncio.Event]:
        """Inside the block, past the first `after` sendMessage calls (served as usual),
        sendMessage never answers and makes no message (for a kill between storing an answer and
        Telegram taking it, or between two pieces); the event is set when one arrives."""
        serve = self._api_sendMessage
        arrived = asyncio.Event()
        served = 0

        async def never_answer(params: Json) -> Json | web.Response:
            nonlocal served
            if served < after:
                served += 1
                return await serve(params)
            arrived.set()
            await asyncio.Event().wait()  # the kill comes first
            raise AssertionError("unreachable: the wait above never ends")

        self._api_sendMessage = never_answer  # type: ignore[method-assign]
        try:
            yield arrived
        finally:
            self._api_sendMessage = serve  # type: ignore[method-assign]

    @contextlib.contextmanager
    def calls_unanswered(
        self, method: str, match: Callable[[Json], bool] | None = None
    ) -> Iterator[asyncio.Event]:
        """Inside the block, a `method` call that `match` accepts is never answered and changes
        nothing (for a kill while, say, the final edit of a live reply is on its way); the event
        is set when one arrives. Other calls are served as usual."""
        serve = getattr(self, f"_api_{method}")
        arrived = asyncio.Event()

        async def never_answer(params: Json) -> Json | web.Response:
            if match is not None and not match(params):
                return await serve(params)  # type: ignore[no-any-return]
            arrived.set()
            await asyncio.Event().wait()  # the kill comes first
            raise AssertionError("unreachable: the wait above never ends")

        setattr(self, f"_api_{method}", never_answer)
        try:
            yield arrived
        finally:
            setattr(self, f"_api_{method}", serve)

    def delete(self, chat_id: int, message_id: int) -> None:
        """A person (an admin) deletes one of the bot's messages."""
        del self.chats[chat_id][message_id]

    def fail_next(
        self,
        method: str,
        status: int,
        description: str,
        *,
        retry_after: int | None = None,
        match: Callable[[Json], bool] | None = None,
    ) -> None:
        """Answer the next matching call of `method` with this error."""
        self.failures.append(Failure(method, status, description, retry_after, match))

    def redeliver(self) -> None:
        """Forget every confirmation, as if the bot had died before its next getUpdates."""
        self.confirmed = 0

    # -- inspection --------------------------------------------------------------------------------
    def calls_to(self, method: str, *, ok_only: bool = False) -> list[Call]:
        return [c for c in self.calls if c.method == method and (c.status == 200 or not ok_only)]

    def sent(self, chat_id: int | None = None) -> list[Json]:
        """Parameters of every sendMessage that was delivered, in order."""
        return [
            c.params
            for c in self.calls_to("sendMessage", ok_only=True)
            if chat_id is None or c.params.get("chat_id") == chat_id
        ]

    def shown(self, chat_id: int) -> list[str]:
        """The text of each of the bot's messages in a chat, as it reads now, oldest first."""
        return [message["plain"] for _, message in sorted(self.chats.get(chat_id, {}).items())]

    def drafts(self, chat_id: int | None = None) -> list[Json]:
        """Parameters of every draft that was taken, in order."""
        return [
            c.params
            for c in self.calls_to("sendMessageDraft", ok_only=True)
            if chat_id is None or c.params.get("chat_id") == chat_id
        ]

    async def wait_for(self, check: Callable[[], bool], within: float = WAIT) -> None:
        """Wait until `check()` holds, re-checking after every call the fake serves."""
        async with asyncio.timeout(within), self._changed:
            await self._changed.wait_for(check)

    async def wait_sent(self, count: int, within: float = WAIT) -> list[Json]:
        await self.wait_for(lambda: len(self.sent()) >= count, within)
        return self.sent()

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # -- serving -----------------------------------------------------------------------------------
    async def _params(self, request: web.Request) -> Json:
        raw: dict[str, Any] = dict(request.query)
        if request.content_type == "application/json":
            raw.update(await request.json())
        elif request.can_read_body:
            form = await request.post()
            raw.update({k: v for k, v in form.items() if isinstance(v, str)})
        params: Json = {}
        for key, value in raw.items():
            if isinstance(value, str) and key in _JSON_PARAMS:
                value = json.loads(value)
            elif isinstance(value, str) and (key in _INT_PARAMS or key == "chat_id"):
                value = int(value) if re.fullmatch(r"-?\d+", value) else value
            params[key] = value
        return params

    def _failure(self, method: str, params: Json) -> Failure | None:
        for index, failure in enumerate(self.failures):
            if failure.method == method and (failure.match is None or failure.match(params)):
                return self.failures.pop(index)
        return None

    async def handle(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != TOKEN:
            return _error(401, "Unauthorized")
        method = request.match_info["method"]
        params = await self._params(request)
        call = Call(method, params)
        self.calls.append(call)
        if self.on_call is not None:
            self.on_call(call)
        _CALL.set(call)  # this request's own task: a method that made its message marks it taken
        try:
            failure = self._failure(method, params)
            sends = ("sendMessage", "editMessageText")
            if method in sends and time.monotonic() < self.penalty_until:
                # Telegram answers a send during the penalty with another 429.
                self.penalty_violations += 1
                failure = Failure(method, 429, "Too Many Requests: retry after 1", 1)
            if failure is not None:
                call.status = failure.status
                if failure.retry_after is not None:
                    self.penalty_until = time.monotonic() + failure.retry_after
                return _error(failure.status, failure.description, failure.retry_after)
            answer = getattr(self, f"_api_{method}", None)
            if answer is None:
                call.status = 400
                return _error(400, f"Bad Request: method {method} is not served by the fake")
            result = await answer(params)
            if isinstance(result, web.Response):
                call.status = result.status
                return result
            call.status = 200
            return web.json_response({"ok": True, "result": result})
        finally:
            await self._notify()

    async def _api_getMe(self, params: Json) -> Json:
        return BOT

    async def _api_getUpdates(self, params: Json) -> list[Json]:
        offset = int(params.get("offset") or 0)
        if offset > 0:
            self.confirmed = max(self.confirmed, offset)
        deadline = time.monotonic() + min(float(params.get("timeout") or 0), 30.0)
        async with self._changed:
            while True:
                pending = [u for u in self.updates if u["update_id"] >= self.confirmed]
                left = deadline - time.monotonic()
                if pending or left <= 0:
                    return pending[: int(params.get("limit") or 100)]
                try:
                    async with asyncio.timeout(left):
                        await self._changed.wait()
                except TimeoutError:
                    pass

    async def _api_sendMessage(self, params: Json) -> Json | web.Response:
        chat_id, text = params["chat_id"], params.get("text", "")
        if params.get("parse_mode") == "HTML":
            try:
                text = parse_html(text)
            except ValueError as exc:
                return _error(400, f"Bad Request: can't parse entities: {exc}")
        params["plain"] = text  # what the person sees
        if not text.strip():
            return _error(400, "Bad Request: message text is empty")
        if utf16_len(text) > 4096:
            return _error(400, "Bad Request: message is too long")
        message: Json = {
            "message_id": next(self._message_ids),
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "supergroup"},
            "from": BOT,
            "text": text,
        }
        if "message_thread_id" in params:
            message["message_thread_id"] = params["message_thread_id"]
        if params.get("reply_markup"):
            message["reply_markup"] = params["reply_markup"]
        self.chats.setdefault(chat_id, {})[message["message_id"]] = {
            "plain": text,
            "html": params.get("parse_mode") == "HTML",
            "source": params.get("text", ""),
            "reply_to": (params.get("reply_parameters") or {}).get("message_id"),
            "keyboard": params.get("reply_markup"),
            "date": message["date"],
        }
        _CALL.get().status = 200  # Telegram has made it, whether or not its answer arrives
        return message

    async def _api_editMessageText(self, params: Json) -> Json | web.Response:
        chat_id, message_id = params.get("chat_id"), params.get("message_id")
        if not isinstance(chat_id, int):
            return _error(400, "Bad Request: chat not found")
        kept = self.chats.get(chat_id, {}).get(message_id) if isinstance(message_id, int) else None
        if kept is None:
            return _error(400, "Bad Request: message to edit not found")
        text = params.get("text", "")
        if params.get("parse_mode") == "HTML":
            try:
                text = parse_html(text)
            except ValueError as exc:
                return _error(400, f"Bad Request: can't parse entities: {exc}")
        params["plain"] = text
        if not text.strip():
            return _error(400, "Bad Request: message text is empty")
        if utf16_len(text) > 4096:
            return _error(400, "Bad Request: MESSAGE_TOO_LONG")
        html_mode = params.get("parse_mode") == "HTML"
        markup = params.get("reply_markup")
        if (kept["source"], kept["html"], kept.get("keyboard")) == (
            params.get("text", ""),
            html_mode,
            markup,
        ):
            return _error(400, "Bad Request: message is not modified: specified new message "
                          "content and reply markup are exactly the same")  # fmt: skip
        # An edit without reply_markup takes an inline keyboard off, as Telegram's does.
        kept.update(plain=text, html=html_mode, source=params.get("text", ""), keyboard=markup)
        return {
            "message_id": message_id,
            "date": int(time.time()),
            "edit_date": int(time.time()),
            "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "supergroup"},
            "from": BOT,
            "text": text,
        }

    async def _api_editMessageReplyMarkup(self, params: Json) -> Json | web.Response:
        chat_id, message_id = params.get("chat_id"), params.get("message_id")
        if not isinstance(chat_id, int):
            return _error(400, "Bad Request: chat not found")
        kept = self.chats.get(chat_id, {}).get(message_id) if isinstance(message_id, int) else None
        if kept is None:
            return _error(400, "Bad Request: message to edit not found")
        markup = params.get("reply_markup") or None  # none: the keyboard goes
        if markup == kept.get("keyboard"):
            return _error(400, "Bad Request: message is not modified: specified new message "
                          "content and reply markup are exactly the same")  # fmt: skip
        kept["keyboard"] = markup
        assert isinstance(message_id, int)
        return self._message_json(chat_id, message_id, kept)

    async def _api_answerCallbackQuery(self, params: Json) -> bool | web.Response:
        query_id = str(params.get("callback_query_id"))
        if self.presses.get(query_id, True):  # unknown, or answered already
            return _error(400, "Bad Request: query is too old and response timeout expired or "
                          "query ID is invalid")  # fmt: skip
        self.presses[query_id] = True
        return True

    def _message_json(self, chat_id: int, message_id: int, kept: Json) -> Json:
        """One of the bot's messages as the Bot API returns it now."""
        message: Json = {
            "message_id": message_id,
            "date": kept.get("date", int(time.time())),
            "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "supergroup"},
            "from": BOT,
            "text": kept["plain"],
        }
        if kept.get("keyboard"):
            message["reply_markup"] = kept["keyboard"]
        return message

    async def _api_deleteMessage(self, params: Json) -> bool | web.Response:
        chat_id, message_id = params.get("chat_id"), params.get("message_id")
        kept = self.chats.get(chat_id, {}) if isinstance(chat_id, int) else {}
        if not isinstance(message_id, int) or kept.pop(message_id, None) is None:
            return _error(400, "Bad Request: message to delete not found")
        return True

    async def _api_sendMessageDraft(self, params: Json) -> bool | web.Response:
        chat_id = params.get("chat_id")
        if self.drafts_refused:
            return _error(400, "Bad Request: method sendMessageDraft is not available")
        if not isinstance(chat_id, int) or chat_id < 0:
            return _error(400, "Bad Request: TEXTDRAFT_PEER_INVALID")
        if not params.get("draft_id"):
            return _error(400, "Bad Request: draft_id must be non-zero")
        if utf16_len(params.get("text") or "") > 4096:
            return _error(400, "Bad Request: MESSAGE_TOO_LONG")
        return True

    async def _api_sendChatAction(self, params: Json) -> bool:
        return True

    async def _api_getFile(self, params: Json) -> Json | web.Response:
        info = self.files.get(str(params.get("file_id")))
        return info if info is not None else _error(400, "Bad Request: invalid file_id")

    async def _api_getMyCommands(self, params: Json) -> list[Json]:
        return self.commands

    async def _api_setMyCommands(self, params: Json) -> bool:
        self.commands = list(params["commands"])
        return True

    async def _api_deleteWebhook(self, params: Json) -> bool:
        return True

    async def _api_setWebhook(self, params: Json) -> bool:
        return True

    async def _api_getWebhookInfo(self, params: Json) -> Json:
        return {"url": "", "has_custom_certificate": False, "pending_update_count": 0}

    async def download(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != TOKEN:
            return web.Response(status=401)
        data = self.contents.get(request.match_info["path"])
        status = 200 if data is not None else 404
        self.calls.append(Call("download", {"path": request.match_info["path"]}, status))
        await self._notify()
        return web.Response(body=data) if data is not None else web.Response(status=404)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self.handle)
        app.router.add_get("/file/bot{token}/{path:.+}", self.download)
        return app


def _error(status: int, description: str, retry_after: int | None = None) -> web.Response:
    body: Json = {"ok": False, "error_code": status, "description": description}
    if retry_after is not None:
        body["parameters"] = {"retry_after": retry_after}
    return web.json_response(body, status=status)


async def start_fake_telegram(host: str = "127.0.0.1") -> tuple[FakeTelegram, web.AppRunner]:
    """Start a FakeTelegram on a free port; give PTB its `url` and `file_url`."""
    fake = FakeTelegram()
    # A client that goes away (PTB stopping mid long poll) cancels its handler, so cleanup is quick.
    runner = web.AppRunner(fake.app(), access_log=None, handler_cancellation=True)
    await runner.setup()
    await web.TCPSite(runner, host, 0).start()
    port = runner.addresses[0][1]
    fake.url = f"http://{host}:{port}/bot"
    fake.file_url = f"http://{host}:{port}/file/bot"
    return fake, runner


def control_routes(fake: FakeTelegram) -> list[web.RouteDef]:
    """What a test outside this process uses: send a private message, read what the bot sent and
    which methods it called (a sendChatAction says a reply is being written)."""

    async def send(request: web.Request) -> web.Response:
        user = int(request.query.get("user_id", "42"))
        # A caller that restarts this fake on the same workspace numbers its messages itself:
        # memgate skips a message id its session already holds, as a replay.
        extra: dict[str, Any] = {}
        if "message_id" in request.query:
            extra["message_id"] = int(request.query["message_id"])
        update_id = fake.message(request.query["text"], chat_id=user, user_id=user, **extra)
        return web.json_response({"update_id": update_id})

    async def sent(request: web.Request) -> web.Response:
        delivered = [{"chat_id": p.get("chat_id"), "text": p.get("plain")} for p in fake.sent()]
        return web.json_response(delivered)

    async def calls(request: web.Request) -> web.Response:
        return web.json_response([call.method for call in fake.calls])

    return [
        web.post("/ctl/message", send),
        web.get("/ctl/sent", sent),
        web.get("/ctl/calls", calls),
    ]


def main() -> None:
    """`python -m tests.fakes.telegram_api --port N`: the fake as a server of its own (e.g. a unit
    beside memgate under systemd), token TOKEN, with the control routes under /ctl/."""
    parser = argparse.ArgumentParser(description="Fake Telegram Bot API for trying memgate")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8081)
    args = parser.parse_args()

    async def start() -> tuple[web.AppRunner, str]:
        fake = FakeTelegram()
        app = fake.app()
        app.add_routes(control_routes(fake))
        runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await runner.setup()
        await web.TCPSite(runner, args.host, args.port).start()
        return runner, f"fake Telegram on http://{args.host}:{args.port}/bot"

    serve_until_interrupted(start)


if __name__ == "__main__":
    main()
