"""The console's one stylesheet, served from this module (nothing comes from a CDN)."""

from __future__ import annotations

from aiohttp import web

CSS = """
:root { color-scheme: light dark; --fg: #1d232a; --bg: #fbfbf9; --muted: #66707a; --line: #d9dcd6;
  --accent: #2f6f5e; --add: #dff3e3; --del: #f8dfdc; --panel: #ffffff; }
@media (prefers-color-scheme: dark) { :root { --fg: #e6e6e1; --bg: #16191c; --muted: #9aa3ab;
  --line: #30363c; --accent: #7cc4ad; --add: #1f3a28; --del: #46231f; --panel: #1d2125; } }
* { box-sizing: border-box; }
body { margin: 0; font: 16px/1.5 system-ui, sans-serif; color: var(--fg); background: var(--bg); }
header { display: flex; flex-wrap: wrap; gap: .5rem 1.5rem; align-items: baseline; padding: .75rem 1rem;
  border-bottom: 1px solid var(--line); background: var(--panel); }
nav { display: flex; flex-wrap: wrap; gap: .25rem .9rem; }
nav a { color: var(--muted); text-decoration: none; }
nav a[aria-current=page] { color: var(--accent); font-weight: 600; }
main { max-width: 62rem; margin: 0 auto; padding: 1rem; }
h1 { font-size: 1.4rem; margin: .5rem 0 1rem; }
h2 { font-size: 1.15rem; margin: 1.5rem 0 .5rem; }
h3, h4, h5, h6 { font-size: 1rem; margin: 1rem 0 .25rem; }
a { color: var(--accent); }
.note { padding: .5rem .75rem; border-left: 4px solid var(--accent); background: var(--panel); }
.error { border-left-color: #c0392b; }
.empty, .muted { color: var(--muted); }
.markdown, .card { background: var(--panel); border: 1px solid var(--line); border-radius: 6px;
  padding: .25rem 1rem; margin-bottom: 1rem; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; width: 100%; font-size: .92rem; }
th, td { text-align: left; padding: .35rem .5rem; border-bottom: 1px solid var(--line); vertical-align: top; }
pre { white-space: pre-wrap; word-break: break-word; background: var(--panel); border: 1px solid var(--line);
  border-radius: 6px; padding: .75rem; font-size: .85rem; }
.diff span { display: block; }
.diff .add { background: var(--add); } .diff .del { background: var(--del); }
.diff .meta { color: var(--muted); }
form.inline { display: inline; margin: 0; }
form.row { display: flex; flex-wrap: wrap; gap: .5rem; align-items: center; margin: .5rem 0 1rem; }
button, select, input[type=search], input[type=text] { font: inherit; padding: .3rem .6rem;
  border: 1px solid var(--line); border-radius: 4px; background: var(--panel); color: var(--fg); }
button { cursor: pointer; border-color: var(--accent); color: var(--accent); }
button.danger { border-color: #c0392b; color: #c0392b; }
textarea { width: 100%; min-height: 60vh; font: .9rem/1.4 ui-monospace, monospace; padding: .5rem;
  background: var(--panel); color: var(--fg); border: 1px solid var(--line); border-radius: 4px; }
.columns { display: grid; grid-template-columns: repeat(auto-fit, minmax(18rem, 1fr)); gap: 1rem; }
.message { border-left: 3px solid var(--line); padding: .1rem .75rem; margin: .5rem 0; }
.message.user { border-left-color: var(--accent); }
.message .who { color: var(--muted); font-size: .85rem; }
.message p { margin: .2rem 0; white-space: pre-wrap; }
.entry { border-bottom: 1px solid var(--line); padding: .5rem 0; }
.entry time { color: var(--muted); font-size: .85rem; display: block; }
svg.chart { width: 100%; height: auto; max-width: 40rem; }
svg.chart text { font-size: 10px; fill: var(--muted); }
svg.chart rect { fill: var(--accent); }
"""


async def stylesheet(request: web.Request) -> web.Response:
    return web.Response(text=CSS, content_type="text/css")
