"""The Jobs page: every scheduled job with its next run and state; pause, resume and remove go
through `JobTools.operate`, what `memgate jobs` reaches through the control socket."""

from __future__ import annotations

from aiohttp import web

from gateway.automation.jobs import format_time
from gateway.console.html import e, form, table
from gateway.console.view import Console, posted

ACTIONS = ("pause", "resume", "remove")


def routes(console: Console) -> list[web.RouteDef]:
    tools = console.sources.jobs
    tz = console.sources.config.tz

    async def show(request: web.Request) -> web.Response:
        csrf = console.csrf(request)
        rows = []
        for job in tools.scheduler.jobs():
            what = job.message if job.message is not None else job.prompt or ""
            kind = "message" if job.message is not None else "prompt"
            toggle = "resume" if job.paused else "pause"
            rows.append(
                [
                    f"<code>{e(job.id)}</code>",
                    e(f"{job.kind} {job.spec}"),
                    e("done" if job.next_run is None else format_time(job.next_run, tz)),
                    e(job.session),
                    f'<span class="muted">{kind}</span> {e(what[:160])}',
                    e(f"paused ({job.paused})" if job.paused else "active"),
                    form(f"/jobs/{toggle}", csrf, {"id": job.id}, toggle.capitalize())
                    + " "
                    + form("/jobs/remove", csrf, {"id": job.id}, "Remove", danger=True),
                ]
            )
        body = table(
            ["id", "when", "next run", "chat", "what", "state", ""],
            rows,
            'No scheduled jobs. The owner\'s chats make them ("remind me at 9").',
        )
        return console.respond(request, "Jobs", body)

    async def act(request: web.Request) -> web.Response:
        action = request.match_info["action"]
        job_id = (await posted(request, "id"))["id"]
        _, text = tools.operate(action, job_id)
        raise console.done("/jobs", text)

    return [
        web.get("/jobs", show),
        web.post("/jobs/{action:pause|resume|remove}", act),
    ]
