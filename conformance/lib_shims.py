"""Our savers in the checkpoint libraries' tests, in place of theirs.

Those tests build savers themselves (`InMemorySaver()`, `SqliteSaver.from_conn_string(...)`,
`AsyncPostgresSaver.from_conn_string(...)`, module helpers `_saver(name)`), so the runner
appends one import of this module to each library's `tests/conftest.py` in its cached copy:
the autouse fixture below then rebinds those names, in the test's own module and for that test
only, to stand-ins that open our saver wrapped in `LangGraphSaver`. Test bodies are untouched.
A stand-in is a class, so `isinstance(saver, AsyncPostgresSaver)` still tells sync from async.

Under `CONFORMANCE_BASELINE=1` nothing is rebound: LangGraph's own savers run, with the
Postgres suite pointed at our server (see `pg_urls`).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from conformance import savers

BASELINE = os.environ.get("CONFORMANCE_BASELINE") == "1"
SUITE = os.environ.get("CONFORMANCE_SUITE", "")


class Unsupported(RuntimeError):
    """The test builds a saver from LangGraph-specific parts (a raw connection, a serializer
    of LangGraph's): nothing of ours to put there. Such tests belong in excludes.txt."""


class _Meta(type):
    kind: str

    def __instancecheck__(cls, obj: object) -> bool:
        return getattr(obj, "_conformance_kind", None) == cls.kind


class _StandIn(metaclass=_Meta):
    """Stands for one of LangGraph's saver classes inside one test."""

    kind = ""
    node: Any = None

    @classmethod
    def _note(cls) -> None:
        if cls.node is not None:
            cls.node.user_properties.append(("conformance_saver", cls.kind))

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls.kind == "memory" and not args and not kwargs:
            cls._note()
            from checkpointer.savers.memory import InMemorySaver

            return savers._wrap(InMemorySaver(), "memory")
        raise Unsupported(
            f"{cls.__name__}({', '.join(map(repr, args))}) builds LangGraph's saver from its "
            "own parts; the conformance runner has no counterpart of ours"
        )


class _SyncStandIn(_StandIn):
    @classmethod
    @contextmanager
    def from_conn_string(cls, *_args: Any, **_kwargs: Any) -> Iterator[Any]:
        cls._note()
        with savers.ours_for_sync(cls.kind) as saver:
            yield saver


class _AsyncStandIn(_StandIn):
    @classmethod
    @asynccontextmanager
    async def from_conn_string(cls, *_args: Any, **_kwargs: Any) -> AsyncIterator[Any]:
        cls._note()
        async with savers.ours_for_async(cls.kind) as saver:
            yield saver


def _stand_in(name: str, kind: str, node: Any, *, is_async: bool) -> type:
    base = _AsyncStandIn if is_async else _SyncStandIn
    return type(name, (base,), {"kind": kind, "node": node, "__module__": __name__})


def _helper(original: Any, kind: str, node: Any) -> Callable[..., Any]:
    """A stand-in for a module's `_saver(name)`-style helper: our saver whatever the name,
    sync or async like the helper it replaces."""
    wrapped = getattr(original, "__wrapped__", original)
    if inspect.isasyncgenfunction(wrapped):
        akind = "async_postgres" if kind == "postgres" else kind

        @asynccontextmanager
        async def opened_async(*_args: Any, **_kwargs: Any) -> AsyncIterator[Any]:
            node.user_properties.append(("conformance_saver", akind))
            async with savers.ours_for_async(akind) as saver:
                yield saver

        return opened_async

    @contextmanager
    def opened(*_args: Any, **_kwargs: Any) -> Iterator[Any]:
        node.user_properties.append(("conformance_saver", kind))
        with savers.ours_for_sync(kind) as saver:
            yield saver

    return opened


# Names of LangGraph's savers in the libraries' test modules -> (our kind, async?).
_CLASSES = {
    "InMemorySaver": ("memory", False),
    "SqliteSaver": ("sqlite", False),
    "AsyncSqliteSaver": ("async_sqlite", True),
    "PostgresSaver": ("postgres", False),
    "AsyncPostgresSaver": ("async_postgres", True),
}
# Module-level helpers that open a Postgres saver (test_sync, test_async, test_prune).
_HELPERS = ("_saver", "_sync_saver", "_async_saver", "_base_saver", "_pool_saver", "_pipe_saver")


@pytest.fixture(autouse=True)
def _conformance_savers(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if BASELINE:
        return
    module = request.module
    for name, (kind, is_async) in _CLASSES.items():
        if hasattr(module, name):
            monkeypatch.setattr(
                module, name, _stand_in(name, kind, request.node, is_async=is_async)
            )
    if SUITE == "checkpoint-postgres":
        for name in _HELPERS:
            original = getattr(module, name, None)
            # test_prune's own `_saver` delegates to `_sync_saver` / `_async_saver`.
            if original is None or (name == "_saver" and hasattr(module, "_sync_saver")):
                continue
            monkeypatch.setattr(module, name, _helper(original, "postgres", request.node))


def pg_urls() -> tuple[str, str]:
    """(server URL ending in "/", URL of this session's database) on our server, for the
    Postgres library's `DEFAULT_POSTGRES_URI` (they append a database name) and
    `DEFAULT_URI` (one database the tests share, emptied before each)."""
    parts = urlsplit(savers.PG_URL)
    server = urlunsplit((parts.scheme, parts.netloc, "/", "", ""))
    database = os.environ.get("CONFORMANCE_PG_DB") or parts.path.lstrip("/")
    return server, urlunsplit((parts.scheme, parts.netloc, "/" + database, parts.query, ""))
