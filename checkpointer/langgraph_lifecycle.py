"""Opening, setting up and closing the saver behind a `LangGraphSaver`.

LangGraph's own savers are opened as context managers around a URL and set up by the app
(`with PostgresSaver.from_conn_string(url) as cp: cp.setup()`; `async with
AsyncPostgresSaver.from_conn_string(url) as cp: await cp.setup()`). `LangGraphSaver`
offers the same shapes for every backend, one URL picking it; this module holds the
parts that do not depend on LangGraph, so `langgraph.py` stays about conversion.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    AsyncExitStack,
    ExitStack,
)
from typing import Any, Generic, TypeVar

from checkpointer.errors import ConfigError
from checkpointer.savers.base import BaseCheckpointSaver
from checkpointer.savers.sql.migration import parse_url

W = TypeVar("W")


def backend_of(conn_string: str | os.PathLike[str]) -> tuple[str, str]:
    """('postgres', URL) or ('sqlite', path or URL) for what `from_conn_string` takes: a
    `postgresql://` URL, a `sqlite:///path` URL, a file path, or ":memory:"."""
    text = os.fspath(conn_string)
    try:
        kind, _ = parse_url(text)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return kind, text


def open_sync_saver(
    stack: ExitStack, conn_string: str | os.PathLike[str], setup: bool, options: dict[str, Any]
) -> BaseCheckpointSaver:
    """The sync saver for `conn_string`, closed when `stack` closes."""
    kind, text = backend_of(conn_string)
    cm: AbstractContextManager[Any]
    if kind == "postgres":
        from checkpointer.savers.postgres import PostgresSaver

        cm = PostgresSaver.from_conn_string(text, setup=setup, **options)
    else:
        from checkpointer.savers.sqlite import SqliteSaver

        cm = SqliteSaver.from_conn_string(text, setup=setup, **options)
    saver: BaseCheckpointSaver = stack.enter_context(cm)
    return saver


async def open_async_saver(
    stack: AsyncExitStack,
    conn_string: str | os.PathLike[str],
    setup: bool,
    options: dict[str, Any],
) -> BaseCheckpointSaver:
    """The async saver for `conn_string`, closed when `stack` closes."""
    kind, text = backend_of(conn_string)
    cm: AbstractAsyncContextManager[Any]
    if kind == "postgres":
        from checkpointer.savers.postgres import AsyncPostgresSaver

        cm = AsyncPostgresSaver.from_conn_string(text, setup=setup, **options)
    else:
        from checkpointer.savers.sqlite import AsyncSqliteSaver

        cm = AsyncSqliteSaver.from_conn_string(text, setup=setup, **options)
    saver: BaseCheckpointSaver = await stack.enter_async_context(cm)
    return saver


class Opening(Generic[W]):
    """What `from_conn_string` returns: `with` opens the sync saver of the URL's backend,
    `async with` the async one; either gives the wrapped saver and closes it on exit."""

    def __init__(
        self,
        wrap: Callable[[BaseCheckpointSaver], W],
        conn_string: str | os.PathLike[str],
        setup: bool,
        options: dict[str, Any],
    ) -> None:
        backend_of(conn_string)  # a bad URL fails here, where it was written
        self._wrap = wrap
        self._conn_string = conn_string
        self._setup = setup
        self._options = options
        self._stack: ExitStack | None = None
        self._astack: AsyncExitStack | None = None

    def __enter__(self) -> W:
        with ExitStack() as stack:
            saver = open_sync_saver(stack, self._conn_string, self._setup, self._options)
            wrapped = self._wrap(saver)
            self._stack = stack.pop_all()
        return wrapped

    def __exit__(self, *exc: object) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.close()

    async def __aenter__(self) -> W:
        async with AsyncExitStack() as stack:
            saver = await open_async_saver(stack, self._conn_string, self._setup, self._options)
            wrapped = self._wrap(saver)
            self._astack = stack.pop_all()
        return wrapped

    async def __aexit__(self, *exc: object) -> None:
        stack, self._astack = self._astack, None
        if stack is not None:
            await stack.aclose()


def is_async_saver(saver: BaseCheckpointSaver) -> bool:
    """Whether `saver`'s own methods are the async ones (its `setup` is a coroutine)."""
    return asyncio.iscoroutinefunction(getattr(saver, "setup", None))


def on_saver_loop(saver: BaseCheckpointSaver) -> bool:
    """Whether the running event loop (if any) is the one an async saver runs on, or the
    saver is bound to none yet (it binds to the first loop that drives it)."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        return False
    loop = getattr(saver, "loop", None)
    return loop is None or loop is running or loop.is_closed()


def setup_saver(saver: BaseCheckpointSaver) -> Awaitable[None] | None:
    """Create or upgrade `saver`'s schema from sync code. For an async saver called on its
    own event loop it returns the awaitable instead (`await cp.setup()`, as with
    LangGraph's async savers); from another thread it runs there and waits."""
    setup = getattr(saver, "setup", None)
    if setup is None:
        return None  # nothing to set up (in-memory)
    if not is_async_saver(saver):
        setup()
        return None
    if on_saver_loop(saver):
        awaitable: Awaitable[None] = setup()
        return awaitable
    run_sync = saver._sync  # type: ignore[attr-defined]  # AsyncSqlSaver's bridge
    run_sync("setup", setup())
    return None


async def asetup_saver(saver: BaseCheckpointSaver) -> None:
    """Create or upgrade `saver`'s schema from async code, sync savers in a worker thread."""
    setup = getattr(saver, "setup", None)
    if setup is None:
        return
    if is_async_saver(saver):
        await setup()
    else:
        await asyncio.to_thread(setup)


def close_saver(saver: BaseCheckpointSaver) -> Awaitable[None] | None:
    """Close `saver` from sync code (an async one on its own loop: the awaitable)."""
    if not is_async_saver(saver):
        close = getattr(saver, "close", None)
        if close is not None:
            close()
        return None
    if on_saver_loop(saver):
        awaitable: Awaitable[None] = saver.aclose()  # type: ignore[attr-defined]
        return awaitable
    saver._sync("aclose", saver.aclose())  # type: ignore[attr-defined]
    return None


async def aclose_saver(saver: BaseCheckpointSaver) -> None:
    if is_async_saver(saver):
        await saver.aclose()  # type: ignore[attr-defined]
        return
    close = getattr(saver, "close", None)
    if close is not None:
        close()
