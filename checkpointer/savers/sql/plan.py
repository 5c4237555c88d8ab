"""Sans-I/O plumbing of the SQL savers: a saver operation is a *plan*, a generator that
yields `Stmt`s and receives their rows; an `Op` says how to run it. A runner (`sync_exec`,
`async_exec`) drives it; nothing here touches a connection."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")
Row = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Stmt:
    """One statement for a runner: `many` runs it once per parameter set (executemany);
    `script` runs it to completion as a script (SQLite pragmas that work step by step,
    such as `incremental_vacuum`; no parameters)."""

    sql: str
    params: Any = ()
    fetch: bool = False
    many: bool = False
    script: bool = False


Plan = Generator[Stmt, list[Row], T]


@dataclass(slots=True)
class Op(Generic[T]):
    """A plan plus how to run it: `txn` asks for one write transaction around every
    statement (SQLite `BEGIN IMMEDIATE`; a PostgreSQL transaction block).

    `write` marks a single-statement write run without a transaction block: on SQLite it
    still queues behind this process's other writers instead of meeting SQLite's busy
    handler, which sleeps.

    `restart` builds the plan afresh. Only an op that is safe to run again from the start
    has one (see `repeatable`); an executor that lost its connection mid-op may re-run
    such an op on a new connection, and must never re-run any other.
    """

    plan: Plan[T]
    txn: bool = False
    restart: Callable[[], Plan[T]] | None = None
    write: bool = False


def repeatable(build: Callable[[], Op[T]]) -> Op[T]:
    """`build()`'s op, marked safe to repeat: a retry calls `build` again for a new plan.

    Mark only ops whose repetition is harmless even if the first run committed without
    the client hearing back (a connection lost during COMMIT): reads; the schema setup
    (one version-checked transaction); put and put_writes (upserts keyed by their ids,
    whose summary deltas are measured against the rows already there, so a repeat adds
    nothing). Deletes, prune, retention, copy, pin, TTL and maintenance stay unmarked: a
    repeat could undo or destroy what another writer did in between.
    """
    op = build()
    op.restart = lambda: build().plan
    return op


def read_plan(make: Callable[[], Plan[T]]) -> Op[T]:
    """A read-only plan built by `make`, safe to repeat."""
    return repeatable(lambda: Op(make()))


def read_op(stmt: Stmt) -> Op[list[Row]]:
    """A one-statement read, safe to repeat."""
    return read_plan(lambda: single(stmt))


def single(stmt: Stmt) -> Plan[list[Row]]:
    """A plan of one statement, returning its rows."""
    rows = yield stmt
    return rows


def each(stmts: Iterable[Stmt]) -> Plan[None]:
    """A plan running statements in order. (`yield from` a plain list would break: the
    runner sends rows back, and a list iterator cannot receive them.)"""
    for stmt in stmts:  # noqa: UP028
        yield stmt


StatementHook = Callable[[str], None]
