"""Single-writer guard: at most one worker runs a given thread at a time.

Two workers resuming the same thread (a retried job, a double-clicked button) would both
run its pending tasks and save two children of one checkpoint. With
`compile(checkpointer=..., single_writer=True)`, or per run with
`config["configurable"]["exclusive"] = True` (`False` turns a compiled default off), a
run first takes a lock on its thread and holds it until the run returns; a second run gets
`ThreadBusy` at once instead of waiting.

The lock lives where the saver's data lives, so it also holds across processes and
machines, and it dies with its holder (no stale lock after a crash):

- PostgreSQL: a session advisory lock (`pg_try_advisory_lock`) on a 64-bit hash of
  (schema, thread id), held by a dedicated connection opened from the saver's connection
  settings (never one borrowed from its pool, so a pool of one cannot deadlock). The server
  drops it when that session ends, including when the process is killed.
- SQLite: `flock` on a lock file in `<database>.locks/`, named from a hash of the thread id;
  the kernel drops it when the process dies. No schema change.
- In-memory saver (and SQLite without a file): a lock in this process.

Before every checkpoint save and every superstep the run checks that it still holds the
lock (PostgreSQL: one `SELECT 1` on the lock connection) and stops with `ThreadLockLost`
if not. A lock lost between that check and the save cannot be detected without a schema
change (fencing tokens); the window is one round trip.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import threading
import weakref
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, Protocol

from checkpointer.errors import ConfigError, StorageUnavailableError, ThreadBusy, ThreadLockLost
from checkpointer.graph.drivers import AsyncDriver, SyncDriver
from checkpointer.graph.effects import Effect, Put, PutWrites, RunTasks
from checkpointer.graph.spec import GraphSpec
from checkpointer.savers.base import BaseCheckpointSaver
from checkpointer.types import RunnableConfig

__all__ = [
    "LOCK_APPLICATION_NAME",
    "ThreadLock",
    "acquire_thread_lock",
    "athread_lock",
    "is_exclusive",
    "lock_key",
    "thread_lock",
]

LOCK_APPLICATION_NAME = "checkpointer-thread-lock"
"""`application_name` of the PostgreSQL sessions that hold thread locks."""

_GUARDED_EFFECTS = (Put, PutWrites, RunTasks)


class ThreadLock(Protocol):
    """A held single-writer lock."""

    thread_id: str
    where: str

    def verify(self) -> None:
        """Raise `ThreadLockLost` if the lock is no longer held."""
        ...

    def release(self) -> None: ...


def is_exclusive(config: RunnableConfig, default: bool) -> bool:
    """Whether a run takes the lock: `configurable["exclusive"]` if given, else `default`."""
    configurable = config.get("configurable") or {}
    value = configurable.get("exclusive")
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(
            f"config['configurable']['exclusive'] must be True or False, got {value!r}"
        )
    return value


def lock_key(namespace: str, thread_id: str) -> int:
    """A signed 64-bit key for (namespace, thread): what PostgreSQL advisory locks take."""
    digest = hashlib.sha256(
        b"checkpointer-thread\x00"
        + namespace.encode("utf-8", "surrogatepass")
        + b"\x00"
        + thread_id.encode("utf-8", "surrogatepass")
    ).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


# ---------------------------------------------------------------- in-process lock
_local_lock = threading.Lock()
_local_held: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()


class _LocalLock:
    """Held in this process only: for the in-memory saver, whose data lives here too."""

    def __init__(self, owner: Any, thread_id: str) -> None:
        self.thread_id = thread_id
        self.where = "this process"
        self._owner = weakref.ref(owner)
        with _local_lock:
            held = _local_held.setdefault(owner, set())
            if thread_id in held:
                raise ThreadBusy(thread_id, self.where)
            held.add(thread_id)
        self._released = False

    def verify(self) -> None:
        return None

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        owner = self._owner()
        if owner is None:
            return
        with _local_lock:
            _local_held.get(owner, set()).discard(self.thread_id)


# ----------------------------------------------------------------------- SQLite
def _sqlite_lock_path(db_path: str, thread_id: str) -> str:
    name = hashlib.sha256(thread_id.encode("utf-8", "surrogatepass")).hexdigest()[:40]
    return os.path.join(os.path.abspath(db_path) + ".locks", name + ".lock")


class _FileLock:
    """`flock` on a per-thread lock file. The file is removed on release; a taker checks
    that the file it locked is still the one at the path (a releasing holder may have
    unlinked it in between) and starts over if not."""

    def __init__(self, db_path: str, thread_id: str) -> None:
        import fcntl

        self.thread_id = thread_id
        self.path = _sqlite_lock_path(db_path, thread_id)
        self.where = f"lock file {self.path}"
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise ThreadBusy(thread_id, self.where) from None
            except BaseException:
                os.close(fd)
                raise
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        self._fd: int | None = fd
        self._inode = os.fstat(fd).st_ino
        with contextlib.suppress(OSError):
            os.write(fd, f"{os.getpid()}\n".encode())

    def verify(self) -> None:
        try:
            ok = self._fd is not None and os.stat(self.path).st_ino == self._inode
        except FileNotFoundError:
            ok = False
        if not ok:
            raise ThreadLockLost(self.thread_id, self.where, "the lock file was removed")

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            with contextlib.suppress(FileNotFoundError):
                if os.stat(self.path).st_ino == self._inode:
                    os.unlink(self.path)
        finally:
            os.close(fd)


# ------------------------------------------------------------------- PostgreSQL
_NOT_CONNECT_KWARGS = {"autocommit", "prepare_threshold", "row_factory", "cursor_factory"}


def _pg_connect_args(executor: Any) -> tuple[str, dict[str, Any]]:
    """Conninfo and keyword arguments for a new session like the saver's own."""
    pool = getattr(executor, "_pool", None)
    if pool is not None:
        kwargs = {
            k: v
            for k, v in (getattr(pool, "kwargs", None) or {}).items()
            if k not in _NOT_CONNECT_KWARGS
        }
        return str(pool.conninfo), kwargs
    conn = executor._conn
    kwargs = {}
    password = getattr(conn.info, "password", None)
    if password:
        kwargs["password"] = password
    return str(conn.info.dsn), kwargs


class _AdvisoryLock:
    """A session advisory lock held by a connection of its own."""

    def __init__(self, conninfo: str, kwargs: dict[str, Any], schema: str, thread_id: str):
        import psycopg

        self.thread_id = thread_id
        self.key = lock_key(schema, thread_id)
        self.where = f"PostgreSQL advisory lock {self.key} (schema {schema!r})"
        try:
            conn = psycopg.connect(
                conninfo,
                **{**kwargs, "autocommit": True, "application_name": LOCK_APPLICATION_NAME},
            )
        except psycopg.OperationalError as exc:
            raise StorageUnavailableError(
                f"cannot open a session for the single-writer lock of thread {thread_id!r}: {exc}"
            ) from exc
        try:
            row = conn.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)).fetchone()
        except BaseException:
            conn.close()
            raise
        if not row or not row[0]:
            conn.close()
            raise ThreadBusy(thread_id, self.where)
        self._conn: Any = conn

    def verify(self) -> None:
        conn = self._conn
        if conn is None:
            raise ThreadLockLost(self.thread_id, self.where, "already released")
        try:
            conn.execute("SELECT 1").fetchone()
        except Exception as exc:
            raise ThreadLockLost(self.thread_id, self.where, f"lock session failed: {exc}") from exc

    def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            if not conn.closed and not conn.broken:
                conn.execute("SELECT pg_advisory_unlock(%s)", (self.key,))
        except Exception:
            pass  # closing the session releases it anyway
        finally:
            conn.close()


# ------------------------------------------------------------------------ choose
def acquire_thread_lock(saver: BaseCheckpointSaver, thread_id: str) -> ThreadLock:
    """Take the single-writer lock of `thread_id` on `saver`'s storage, or raise
    `ThreadBusy` at once if another worker holds it."""
    from checkpointer.savers.memory import InMemorySaver

    thread_id = str(thread_id)
    if isinstance(saver, InMemorySaver):
        return _LocalLock(saver, thread_id)
    executor = getattr(saver, "_executor", None)
    dialect = getattr(saver, "_dialect", None)
    name = getattr(dialect, "name", None)
    if name == "postgresql":
        conninfo, kwargs = _pg_connect_args(executor)
        return _AdvisoryLock(conninfo, kwargs, dialect.schema, thread_id)  # type: ignore[union-attr]
    if name == "sqlite":
        path = getattr(executor, "path", None) or _sqlite_file_of(executor)
        if path:
            try:
                import fcntl  # noqa: F401
            except ImportError as exc:  # pragma: no cover - Windows
                raise ConfigError("single_writer on SQLite needs POSIX file locks (fcntl)") from exc
            return _FileLock(path, thread_id)
        return _LocalLock(saver, thread_id)
    raise ConfigError(
        f"single_writer / exclusive runs are not supported with {type(saver).__name__}: "
        "use the in-memory, SQLite or PostgreSQL savers"
    )


def _sqlite_file_of(executor: Any) -> str | None:
    """The file behind a user-given sqlite3 connection (None: in-memory or unknown)."""
    from checkpointer.savers.sql.sync_exec import is_memory_path

    conn = getattr(executor, "_shared", None)
    if conn is None or not hasattr(conn, "execute"):
        return None
    lock = getattr(executor, "_shared_lock", None)
    with lock if lock is not None else contextlib.nullcontext():
        rows = conn.execute("PRAGMA database_list").fetchall()
    for _, name, file in rows:
        if name == "main" and file and not is_memory_path(file):
            return str(file)
    return None


@contextmanager
def thread_lock(
    saver: BaseCheckpointSaver, thread_id: str, enabled: bool = True
) -> Iterator[ThreadLock | None]:
    """Hold the thread's lock for the block (nothing when not `enabled`)."""
    if not enabled:
        yield None
        return
    lock = acquire_thread_lock(saver, thread_id)
    try:
        yield lock
    finally:
        lock.release()


@asynccontextmanager
async def athread_lock(
    saver: BaseCheckpointSaver, thread_id: str, enabled: bool = True
) -> AsyncIterator[ThreadLock | None]:
    """`thread_lock` for async runs: taking and releasing happen off the event loop."""
    if not enabled:
        yield None
        return
    lock = await asyncio.to_thread(acquire_thread_lock, saver, thread_id)
    try:
        yield lock
    finally:
        await asyncio.shield(asyncio.to_thread(lock.release))


# ----------------------------------------------------------------------- drivers
class GuardedSyncDriver(SyncDriver):
    """A sync driver that checks the lock before each write to storage."""

    def __init__(self, graph: GraphSpec, saver: BaseCheckpointSaver, lock: ThreadLock) -> None:
        super().__init__(graph, saver)
        self.lock = lock

    def perform(self, effect: Effect) -> Any:
        if isinstance(effect, _GUARDED_EFFECTS):
            self.lock.verify()
        return super().perform(effect)


class GuardedAsyncDriver(AsyncDriver):
    """An async driver that checks the lock before each write to storage."""

    def __init__(self, graph: GraphSpec, saver: BaseCheckpointSaver, lock: ThreadLock) -> None:
        super().__init__(graph, saver)
        self.lock = lock

    async def perform(self, effect: Effect) -> Any:
        if isinstance(effect, _GUARDED_EFFECTS):
            if isinstance(self.lock, _AdvisoryLock):
                await asyncio.to_thread(self.lock.verify)  # a round trip: off the loop
            else:
                self.lock.verify()
        return await super().perform(effect)


def sync_driver(
    graph: GraphSpec, saver: BaseCheckpointSaver, lock: ThreadLock | None
) -> SyncDriver:
    return SyncDriver(graph, saver) if lock is None else GuardedSyncDriver(graph, saver, lock)


def async_driver(
    graph: GraphSpec, saver: BaseCheckpointSaver, lock: ThreadLock | None
) -> AsyncDriver:
    return AsyncDriver(graph, saver) if lock is None else GuardedAsyncDriver(graph, saver, lock)
