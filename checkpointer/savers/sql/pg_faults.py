"""What the PostgreSQL executors do when a connection dies: which failures count as a lost
connection, how many times an operation may be re-run, and the typed error otherwise.

Why each kind of operation is or is not re-run on a fresh connection:

- An operation whose connection failed before any of its statements was sent (the
  pre-flight check of a pooled connection failed) did nothing: any operation may go on.
- A repeatable operation (`Op.restart`: reads, setup, put, put_writes; see
  `plan.repeatable`) is re-run from a new plan. It is re-run even when the connection
  died during COMMIT, when the first run may or may not have committed: a repeat is
  harmless either way.
- Anything else (deletes, prune, retention, copy, pin, TTL, maintenance, CLI plans) is not
  re-run once a statement was sent: it may have committed, and a repeat could destroy what
  another writer did in between. It fails with `StorageUnavailableError`, saying so.
- A saver on a single connection (no pool) cannot reconnect; it fails the same way.

Only connection-class failures are handled here; an error in the SQL itself (constraint
violation, bad data) propagates unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, TypeVar

from checkpointer.errors import StorageUnavailableError
from checkpointer.savers.sql.plan import Op

T = TypeVar("T")

DEFAULT_RETRIES = 2
"""Re-runs after the first attempt: enough for a pool whose idle connections all died (the
first failure purges them), few enough to fail fast when the server is really down."""

DEFAULT_RETRY_BACKOFF = 0.1
"""Seconds before the first re-run; each further one waits twice as long."""

_SHUTDOWN_STATES = frozenset({"57P01", "57P02", "57P03"})
"""admin_shutdown (pg_terminate_backend, fast shutdown), crash_shutdown, cannot_connect_now
(server starting or stopping)."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently an executor re-runs an operation on a fresh connection."""

    retries: int = DEFAULT_RETRIES
    backoff: float = DEFAULT_RETRY_BACKOFF

    def __post_init__(self) -> None:
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or self.retries < 0:
            raise ValueError(f"retries must be an int >= 0, got {self.retries!r}")
        if isinstance(self.backoff, bool) or not isinstance(self.backoff, int | float):
            raise ValueError(f"retry_backoff must be a number of seconds, got {self.backoff!r}")
        if not 0 <= self.backoff <= 60:
            raise ValueError(f"retry_backoff must be between 0 and 60 seconds, got {self.backoff}")

    def delay(self, retry: int) -> float:
        """Seconds to wait before re-run number `retry` (1-based)."""
        return float(self.backoff) * 2 ** (retry - 1)


def is_connection_failure(exc: BaseException, conn: Any) -> bool:
    """Whether `exc` means the connection is gone rather than the SQL being wrong: SQLSTATE
    class 08 (connection exception), a server shutdown or restart, or any driver error that
    left the connection closed (server gone, socket reset, "the connection is closed")."""
    import psycopg

    if not isinstance(exc, psycopg.Error):
        return False
    state = exc.sqlstate or ""
    if state.startswith("08") or state in _SHUTDOWN_STATES:
        return True
    if not isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return False
    return conn is not None and bool(conn.closed or getattr(conn, "broken", False))


def is_pool_timeout(exc: BaseException) -> bool:
    """No pooled connection within the pool's timeout: the server is down, or every
    connection is busy. The wait already happened, so it is not retried."""
    from psycopg_pool import PoolTimeout

    return isinstance(exc, PoolTimeout)


def location(source: Any) -> str:
    """`host=... port=... dbname=...` of a conninfo, pool or connection, for error messages.
    Only these three settings are read: a password never ends up in a message."""
    from psycopg.conninfo import conninfo_to_dict

    settings: dict[str, Any] = {}
    try:
        if isinstance(source, str):
            settings = conninfo_to_dict(source)
        elif hasattr(source, "conninfo"):  # a pool
            settings = {**conninfo_to_dict(source.conninfo), **(source.kwargs or {})}
        else:
            info = source.info
            settings = {"host": info.host, "port": info.port, "dbname": info.dbname}
    except Exception:  # describing the database must never fail an operation
        return ""
    return " ".join(
        f"{key}={settings[key]}" for key in ("host", "port", "dbname") if settings.get(key)
    )


def _reason(exc: BaseException) -> str:
    text = " ".join(part.strip() for part in str(exc).splitlines() if part.strip())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def unavailable(where: str, exc: BaseException, why: str) -> StorageUnavailableError:
    """The typed error for a connection failure we do not (or no longer) recover from."""
    return StorageUnavailableError(f"{where}: connection failed ({_reason(exc)}); {why}")


def gave_up(where: str, exc: BaseException, retries: int) -> StorageUnavailableError:
    attempts = "once" if retries == 0 else f"on {retries + 1} connections in a row"
    return unavailable(
        where,
        exc,
        f"the operation failed {attempts} (retries={retries}); it is safe to repeat, so "
        "retry it once the server is reachable",
    )


def not_repeatable(where: str, exc: BaseException) -> StorageUnavailableError:
    return unavailable(
        where,
        exc,
        "this operation is not re-run automatically because repeating it is not safe, and "
        "it may or may not have taken effect: check its result, then retry it if needed",
    )


def single_connection(where: str, exc: BaseException) -> StorageUnavailableError:
    return unavailable(
        where,
        exc,
        "this saver uses one connection, which cannot be reopened: create a new saver, or "
        "give it a URL or a connection pool so that it can reconnect",
    )


def pool_exhausted(where: str, exc: BaseException) -> StorageUnavailableError:
    return unavailable(
        where,
        exc,
        "no pooled connection became available in time (the server is down or "
        "unreachable, or every connection is busy); nothing was sent",
    )


def next_attempt(
    op: Op[T],
    attempt: Op[T],
    lost: BaseException,
    *,
    where: str,
    pooled: bool,
    sent: bool,
    retries: int,
    policy: RetryPolicy,
) -> tuple[Op[T], float]:
    """After `attempt` of `op` lost its connection: the attempt to run next and the seconds
    to wait first, or the typed error. One place for the rules both executors follow: a
    single connection cannot reconnect; an operation that reached the server is re-run
    only if it can be rebuilt (`op.restart`); at most `policy.retries` re-runs."""
    if not pooled:
        raise single_connection(where, lost) from lost
    if sent and op.restart is None:
        raise not_repeatable(where, lost) from lost
    if retries >= policy.retries:
        raise gave_up(where, lost, policy.retries) from lost
    if sent:
        assert op.restart is not None
        attempt = replace(op, plan=op.restart())
    return attempt, policy.delay(retries + 1)
