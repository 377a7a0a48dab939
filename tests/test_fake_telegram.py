"""The fake Telegram server's control routes, which a test in another process drives it with."""

from __future__ import annotations

import aiohttp
from aiohttp import web

from tests.fakes.telegram_api import TOKEN, FakeTelegram, control_routes


async def test_control_routes_send_a_message_and_list_the_replies() -> None:
    """/ctl/message queues an update getUpdates hands out; /ctl/sent and /ctl/calls list calls."""
    fake = FakeTelegram()
    app = fake.app()
    app.add_routes(control_routes(fake))
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{base}/ctl/message", params={"text": "hi", "user_id": "7"}):
                pass
            async with http.post(f"{base}/bot{TOKEN}/getUpdates") as answer:
                updates = (await answer.json())["result"]
            assert [u["message"]["text"] for u in updates] == ["hi"]
            assert updates[0]["message"]["from"]["id"] == 7
            send = {"chat_id": "7", "text": "<b>hello</b>", "parse_mode": "HTML"}
            async with http.post(f"{base}/bot{TOKEN}/sendMessage", data=send):
                pass
            async with http.get(f"{base}/ctl/sent") as answer:
                assert await answer.json() == [{"chat_id": 7, "text": "hello"}]
            async with http.get(f"{base}/ctl/calls") as answer:
                assert await answer.json() == ["getUpdates", "sendMessage"]
    finally:
        await runner.cleanup()
