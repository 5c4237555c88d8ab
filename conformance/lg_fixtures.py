"""LangGraph's `sync_checkpointer` / `async_checkpointer` fixtures, parametrized over the
savers this run selected (env `CONFORMANCE_SAVERS`).

The runner appends one import of this module to the end of langgraph's `tests/conftest.py`
in its cached copy, so these names replace LangGraph's fixtures of the same names; the test
bodies are untouched. Param ids are the saver kinds (`memory`, `async_postgres`, ...), so
node ids read `test_x[sqlite-sync]`.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from conformance import savers


def selected() -> list[str]:
    raw = os.environ.get("CONFORMANCE_SAVERS", ",".join(savers.OURS))
    return [k for k in raw.split(",") if k]


def _id(kind: str) -> str:
    """LangGraph's savers keep LangGraph's param ids (`memory`, `sqlite`, `postgres`): its
    syrupy snapshots are named after them. The baseline therefore runs in a session of its
    own."""
    return kind.removeprefix("lg-")


def _mark(request: pytest.FixtureRequest, kind: str) -> None:
    request.node.user_properties.append(("conformance_saver", kind))


@pytest.fixture(params=selected(), ids=_id)
def sync_checkpointer(request: pytest.FixtureRequest) -> Iterator[Any]:
    kind: str = request.param
    _mark(request, kind)
    if kind == "lg-memory":
        from tests.conftest_checkpointer import _checkpointer_memory

        with _checkpointer_memory() as saver:
            yield saver
    elif kind == "lg-sqlite":
        from tests.conftest_checkpointer import _checkpointer_sqlite

        with _checkpointer_sqlite() as saver:
            yield saver
    elif kind == "lg-postgres":
        with savers.langgraph_postgres_sync() as saver:
            yield saver
    else:
        with savers.ours_for_sync(kind) as saver:
            yield saver


@pytest.fixture(params=selected(), ids=_id)
async def async_checkpointer(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    kind: str = request.param
    _mark(request, kind)
    if kind == "lg-memory":
        from tests.conftest_checkpointer import _checkpointer_memory

        with _checkpointer_memory() as saver:
            yield saver
    elif kind == "lg-sqlite":
        from tests.conftest_checkpointer import _checkpointer_sqlite_aio

        async with _checkpointer_sqlite_aio() as saver:
            yield saver
    elif kind == "lg-postgres":
        async with savers.langgraph_postgres_async() as saver:
            yield saver
    else:
        async with savers.ours_for_async(kind) as saver:
            yield saver
