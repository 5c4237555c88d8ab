"""The web app: Starlette routes, server-rendered pages (Jinja2, autoescaped) and a small
script that loads parts of the page on click.

Pages and fragments are GETs that only read; the three actions are POSTs that answer JSON.
Every route sits behind `security.TokenGuard`. Database calls run in worker threads (the
source serializes them on its one connection).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from checkpointer.errors import CheckpointerError, CheckpointNotFoundError
from checkpointer.inspect import UnknownThreadError
from checkpointer.lifecycle import THREAD_SORTS
from checkpointer.ui.data import ReadOnlyError, Source
from checkpointer.ui.pages import (
    KIND_LABEL,
    channel_rows,
    diff_page,
    node_rows,
    short_id,
    step_label,
    tree_view,
)
from checkpointer.ui.security import TokenGuard
from checkpointer.ui.tree import find_run
from checkpointer.ui.values import value_html

HERE = Path(__file__).parent
PAGE_SIZE = 50
RUN_PAGE = 200
"""Checkpoints of a collapsed run loaded per click."""


def _env() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals.update(
        short_id=short_id, step_label=step_label, KIND_LABEL=KIND_LABEL, value_html=value_html
    )
    env.filters["q"] = lambda s: quote(str(s), safe="")
    return env


def _int(value: str | None, default: int, *, low: int = 0, high: int = 10**9) -> int:
    try:
        return min(max(int(value or default), low), high)
    except ValueError:
        return default


class Handlers:
    """Route handlers over one source."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.env = _env()

    def render(self, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        context.update(
            read_only=self.source.read_only,
            can_export=self.source.can_export,
            where=self.source.where,
        )
        return HTMLResponse(self.env.get_template(name).render(**context), status_code=status)

    # ------------------------------------------------------------------ pages
    async def index(self, request: Request) -> Response:
        q = request.query_params
        sort = q.get("sort", "updated")
        if sort not in THREAD_SORTS:
            sort = "updated"
        query = q.get("q", "").strip()
        page = _int(q.get("page"), 1, low=1)
        thread = q.get("thread")
        ns = q.get("ns", "")
        selected = q.get("c")

        def work() -> dict[str, Any]:
            listing = self.source.threads(
                sort=sort, query=query, offset=(page - 1) * PAGE_SIZE, limit=PAGE_SIZE
            )
            context: dict[str, Any] = {
                "listing": listing,
                "page": page,
                "sorts": THREAD_SORTS,
                "pages": max(1, -(-listing.total // PAGE_SIZE)),
                "thread": thread,
                "ns": ns,
                "selected": None,
            }
            if thread:
                try:
                    tree = self.source.tree(thread, ns)
                except (UnknownThreadError, CheckpointNotFoundError) as exc:
                    context["error"] = " ".join(str(exc).split())
                    return context
                chosen = selected if selected in tree.nodes else tree.latest
                context["tree"] = tree_view(self.source, tree, chosen)
                context["selected"] = chosen
            return context

        context = await run_in_threadpool(work)
        return self.render("page.html", 404 if "error" in context else 200, **context)

    async def checkpoint(self, request: Request) -> Response:
        q = request.query_params
        thread, ns, cid = q.get("thread", ""), q.get("ns", ""), q.get("c", "")
        against = q.get("against") or None

        def work() -> dict[str, Any]:
            view = self.source.state(thread, ns, cid)
            tree = self.source.tree(thread, ns)
            entry = node_rows(self.source, tree, [cid])[0] if cid in tree.nodes else None
            base = against or view.parent_id
            diff = diff_page(self.source.diff(thread, ns, base, cid)) if base else None
            return {
                "view": view,
                "entry": entry,
                "channels": channel_rows(view),
                "diff": diff,
                "against": against,
                "thread": thread,
                "ns": ns,
            }

        return self.render("checkpoint.html", **await run_in_threadpool(work))

    async def diff(self, request: Request) -> Response:
        q = request.query_params
        thread, ns = q.get("thread", ""), q.get("ns", "")
        a, b = q.get("a", ""), q.get("b", "")
        page = await run_in_threadpool(lambda: diff_page(self.source.diff(thread, ns, a, b)))
        return self.render("diff.html", diff=page, thread=thread, ns=ns)

    async def run_rows(self, request: Request) -> Response:
        """The next checkpoints of a collapsed run's gap: `count` of them from `start`."""
        q = request.query_params
        thread, ns, first = q.get("thread", ""), q.get("ns", ""), q.get("first", "")
        start, count = _int(q.get("start"), 0), _int(q.get("count"), 0)

        def work() -> dict[str, Any]:
            tree = self.source.tree(thread, ns)
            run = find_run(tree.forest, first)
            if run is None:
                raise CheckpointNotFoundError(f"no run starting at {first!r} in {thread!r}")
            stop = min(len(run.ids), start + count)
            page_stop = min(stop, start + RUN_PAGE)
            rows = node_rows(self.source, tree, run.ids[start:page_stop])
            return {
                "rows": rows,
                "left": stop - page_stop,
                "next_start": page_stop,
                "first": first,
                "thread": thread,
                "ns": ns,
            }

        return self.render("run_rows.html", **await run_in_threadpool(work))

    async def export(self, request: Request) -> Response:
        thread = request.query_params.get("thread", "")
        if not self.source.can_export:
            return _error(403, "this database cannot be exported from here")
        body = await run_in_threadpool(self.source.export, thread)
        name = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in thread)[:80]
        return Response(
            body,
            media_type="application/x-ndjson",
            headers={"content-disposition": f'attachment; filename="{name or "thread"}.jsonl"'},
        )

    # ------------------------------------------------------------------ actions
    async def _action(self, request: Request, act: Callable[[dict[str, str]], Any]) -> Response:
        if self.source.read_only:
            return JSONResponse({"error": f"{self.source.where} is open read-only"}, 403)
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return JSONResponse({"error": "expected a JSON body"}, 400)
        if not isinstance(body, dict) or body.get("confirm") is not True:
            return JSONResponse({"error": "actions need {'confirm': true}"}, 400)
        fields = {k: str(v) for k, v in body.items() if isinstance(v, str)}
        result = await run_in_threadpool(act, fields)
        return JSONResponse(result)

    async def fork(self, request: Request) -> Response:
        def act(f: dict[str, str]) -> dict[str, Any]:
            r = self.source.fork(f.get("thread", ""), f.get("ns", ""), f.get("checkpoint", ""))
            return {"thread": r.thread_id, "ns": r.checkpoint_ns, "checkpoint": r.checkpoint_id}

        return await self._action(request, act)

    async def copy_branch(self, request: Request) -> Response:
        def act(f: dict[str, str]) -> dict[str, Any]:
            r = self.source.copy_branch(
                f.get("thread", ""), f.get("ns", ""), f.get("checkpoint", ""), f.get("target", "")
            )
            return {"thread": r.thread_id, "ns": r.checkpoint_ns, "checkpoint": r.checkpoint_id}

        return await self._action(request, act)

    async def copy_thread(self, request: Request) -> Response:
        def act(f: dict[str, str]) -> dict[str, Any]:
            target = f.get("target", "").strip()
            self.source.copy_thread(f.get("thread", ""), target)
            return {"thread": target, "ns": "", "checkpoint": None}

        return await self._action(request, act)


def _error(status: int, message: str) -> Response:
    return JSONResponse({"error": message}, status)


def _status(exc: BaseException) -> int:
    if isinstance(exc, ReadOnlyError):
        return 403
    if isinstance(exc, UnknownThreadError | CheckpointNotFoundError | LookupError):
        return 404
    return 400


def _guard_errors(
    handler: Callable[[Request], Awaitable[Response]],
) -> Callable[[Request], Awaitable[Response]]:
    """Turn a bad request (unknown thread, bad id, read-only) into a 4xx with the message,
    as JSON for the actions and as an escaped HTML note for pages."""

    async def wrapped(request: Request) -> Response:
        try:
            return await handler(request)
        except (CheckpointerError, ValueError, LookupError) as exc:
            message = " ".join(str(exc).split())
            if request.method == "POST" or request.url.path.startswith("/api/"):
                return _error(_status(exc), message)
            from markupsafe import escape

            return HTMLResponse(
                f'<div class="error">{escape(message)}</div>', status_code=_status(exc)
            )

    return wrapped


def create_app(source: Source, *, token: str, hosts: set[str] | None, port: int) -> TokenGuard:
    """The ASGI app for `source`, guarded by `token` (see `security`)."""
    h = Handlers(source)
    routes = [
        Route("/", _guard_errors(h.index)),
        Route("/frag/checkpoint", _guard_errors(h.checkpoint)),
        Route("/frag/diff", _guard_errors(h.diff)),
        Route("/frag/run", _guard_errors(h.run_rows)),
        Route("/export", _guard_errors(h.export)),
        Route("/api/fork", _guard_errors(h.fork), methods=["POST"]),
        Route("/api/copy-branch", _guard_errors(h.copy_branch), methods=["POST"]),
        Route("/api/copy-thread", _guard_errors(h.copy_thread), methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(routes=routes)
    return TokenGuard(app, token=token, hosts=hosts, cookie_name=f"checkpointer_ui_{port}")
