"""The operator's HTTP endpoints of `memgate run`: /healthz (JSON) and /metrics (Prometheus text).

The only module of ours that serves HTTP with aiohttp.web; it is imported only when
`health.listen` is set, so a gateway without the endpoint (and every `memgate chat`) never loads
the web server.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from aiohttp import web

from gateway.config.fields import parse_listen
from gateway.service.metrics import METRICS_CONTENT_TYPE, Metrics

log = logging.getLogger(__name__)


def health_server(
    listen: str, metrics: Metrics, status: Callable[[], dict[str, Any]]
) -> AbstractAsyncContextManager[str]:
    """Serve /healthz (JSON; 503 when a channel is down) and /metrics on `listen`."""

    async def healthz(request: web.Request) -> web.Response:
        body = status()
        code = 200 if body.get("status") == "ok" else 503
        return web.Response(
            text=json.dumps(body, indent=2), status=code, content_type="application/json"
        )

    async def prometheus(request: web.Request) -> web.Response:
        response = web.Response(body=metrics.render())
        response.headers["Content-Type"] = METRICS_CONTENT_TYPE
        return response

    @asynccontextmanager
    async def serving() -> AsyncIterator[str]:
        app = web.Application()
        app.router.add_get("/healthz", healthz)
        app.router.add_get("/metrics", prometheus)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        host, port = parse_listen(listen)
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
            log.info("health endpoint listening on http://%s:%d", host, port)
            yield f"http://{host}:{port}"
        finally:
            await runner.cleanup()

    return serving()
