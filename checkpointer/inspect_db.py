"""Our own checkpoint database opened for the time-travel tools: `Database`.

Split from `checkpointer.inspect` (the views) so that each stays small. `Database` runs the
sans-I/O plans of `savers.sql.inspect` / `savers.sql.transfer` on a SQLite file or a
PostgreSQL schema, read-only when asked (nothing can then change the database), and loads
values leniently (see `checkpointer.reader`).
"""

from __future__ import annotations

import dataclasses
import os
import re
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from checkpointer.channels import (
    DeltaSnapshot,
)
from checkpointer.errors import CheckpointerError, CheckpointNotFoundError, DeserializationError
from checkpointer.reader import (
    ENCRYPTED_NO_KEY,
    DatabaseUnavailableError,
    Loaded,
    Located,
    ReadOnlyError,
    UnknownThreadError,
    Unloadable,
    raw_size,
)
from checkpointer.savers.sql.dialect import Dialect
from checkpointer.savers.sql.inspect import (
    Ancestor,
    RawHistoryRow,
    RawTuple,
    RawWrite,
    SkeletonNode,
    Stats,
    ThreadSummary,
    all_thread_ids_plan,
    ancestors_plan,
    existing_threads_plan,
    raw_delta_history_plan,
    raw_tuple_plan,
    raw_writes_plan,
    resolve_checkpoint_plan,
    skeleton_plan,
    snapshot_marked,
    stats_plan,
    thread_summaries_plan,
)
from checkpointer.savers.sql.migration import check_revision, parse_url
from checkpointer.savers.sql.plan import Op, Plan, Stmt
from checkpointer.savers.sql.saver import SyncExecutor, SyncSqlSaver
from checkpointer.serde import MsgpackSerializer
from checkpointer.serde.compression import decompress_typed
from checkpointer.serde.located import ValueLocation
from checkpointer.types import make_config

TAG_ENCRYPTED = "aesgcm"  # the encrypted serializer's tag (checkpointer.serde.encryption)

T = TypeVar("T")


def mask_url(url: str) -> str:
    """A URL safe to print: the password replaced by ***."""
    return re.sub(r"(//[^:/@]+:)[^@]*@", r"\1***@", url)


def tool_serializer(modules: Sequence[str] = (), types: Sequence[type] = ()) -> MsgpackSerializer:
    """Our serializer, strict, plus the modules and types the user allowed (LangGraph's
    value types are added by `Database.load` when a value needs them: importing LangGraph
    costs a second, and most commands never load a LangChain message). Strict: a tool
    shows the classes it was told about, whatever else its own process has loaded."""
    return MsgpackSerializer(strict=True).with_modules(*modules).with_types(*types)


def with_langgraph_types(serde: MsgpackSerializer) -> MsgpackSerializer | None:
    """`serde` able to load what LangGraph stores (messages, Send, Interrupt), or None
    when LangGraph is not installed."""
    try:
        from checkpointer.langgraph import langgraph_serializer
    except ImportError:
        return None
    return langgraph_serializer(serde)


# --------------------------------------------------------------------------- database
class Database:
    """An open checkpoint database of our schema: runs plans, loads values leniently, and
    (unless opened read-only) offers the saver for lifecycle operations (delete, copy,
    prune). Implements `checkpointer.reader.Reader`."""

    kind = "checkpointer"

    def __init__(
        self,
        *,
        dialect: Dialect,
        executor: SyncExecutor,
        saver: SyncSqlSaver | None,
        where: str,
        serde: MsgpackSerializer,
    ) -> None:
        self.dialect = dialect
        self.executor = executor
        self._saver = saver
        self.where = where
        self.serde = serde
        self.value_serde: Any = None
        """A serializer holding the user's keys (see `with_keys`), tried on encrypted values."""
        self._langgraph_tried = False

    @property
    def readonly(self) -> bool:
        return self._saver is None

    @property
    def saver(self) -> SyncSqlSaver:
        if self._saver is None:
            raise ReadOnlyError(f"{self.where} was opened read-only")
        return self._saver

    @classmethod
    @contextmanager
    def open(
        cls,
        url: str,
        *,
        schema: str | None = None,
        create: bool = False,
        serde: MsgpackSerializer | None = None,
        readonly: bool = False,
    ) -> Iterator[Database]:
        """Open `url` (a SQLite path, `sqlite:///path`, or `postgresql://...`; `schema`
        applies to PostgreSQL only).

        A SQLite file that does not exist is an error unless `create` is set: a typo must
        not leave an empty database behind. A PostgreSQL server that does not answer is one
        clear error, not a connection-pool timeout. `readonly` opens the database so that
        nothing can change it (SQLite `mode=ro` and `query_only`, no journal-mode switch;
        PostgreSQL read-only transactions) and offers no saver.
        """
        serde = serde or tool_serializer()
        try:
            kind, target = parse_url(url)
        except ValueError as exc:
            raise DatabaseUnavailableError(str(exc)) from exc
        if kind == "postgres":
            with _open_postgres(target, schema, serde, readonly) as db:
                yield db
            return
        with _open_sqlite(target, create and not readonly, serde, readonly) as db:
            yield db

    def run(self, plan: Plan[T], *, txn: bool = False) -> T:
        """Run one plan (in one transaction when `txn`)."""
        return self.executor.run(Op(plan, txn=txn))

    # ------------------------------------------------------------------ schema
    def revision(self) -> str | None:
        version_plan = getattr(self.dialect, "version_plan")  # noqa: B009 - both dialects
        found: str | None = self.run(version_plan())
        return found

    def check_schema(self) -> None:
        """SchemaVersionError (with what to run) unless the schema is this code's."""
        check_revision(self.revision(), where=self.where)

    def ensure_schema(self) -> None:
        """Create the schema of an empty database; refuse to touch one at another
        revision (that is `checkpointer migrate`'s job, done on purpose)."""
        found = self.revision()
        if found is None:
            self.saver.setup()
        else:
            check_revision(found, where=self.where)

    # ------------------------------------------------------------------ values
    def load(self, raw: Any) -> Any:
        """A stored value, or an `Unloadable` saying why it cannot be shown."""
        if isinstance(raw, Loaded):
            return raw.value
        location = None
        if isinstance(raw, Located):
            raw, location = raw.pair, raw.location
        try:
            pair = decompress_typed(raw)
        except DeserializationError as exc:
            return Unloadable(str(raw[0]), raw_size(raw), one_line(str(exc)))
        if pair[0] == TAG_ENCRYPTED:
            if self.value_serde is None:
                return Unloadable(pair[0], raw_size(raw), ENCRYPTED_NO_KEY)
            try:
                if location is not None:
                    return self.value_serde.loads_typed_at(pair, location)
                return self.value_serde.loads_typed(pair)
            except CheckpointerError as exc:
                return Unloadable(pair[0], raw_size(raw), one_line(str(exc)))
        try:
            return self.serde.loads_typed(pair)
        except DeserializationError as exc:
            if not self._langgraph_tried:
                # Maybe a LangGraph value: teach the serializer LangGraph's types once.
                self._langgraph_tried = True
                extended = with_langgraph_types(self.serde)
                if extended is not None:
                    self.serde = extended
                    return self.load(raw)
            return Unloadable(pair[0], raw_size(raw), one_line(str(exc)))

    def is_snapshot(self, raw: Any) -> bool:
        """Whether stored bytes hold a `DeltaSnapshot` (told by its marker, compressed or
        not, without loading: an unloadable snapshot is still a snapshot)."""
        if isinstance(raw, Loaded):
            return isinstance(raw.value, DeltaSnapshot)
        if isinstance(raw, Located):
            raw = raw.pair
        return is_snapshot_blob(*raw)

    # ------------------------------------------------------------------ reads
    def require_threads(self, thread_ids: Sequence[str]) -> None:
        found = self.run(existing_threads_plan(self.dialect, thread_ids))
        missing = [t for t in thread_ids if t not in found]
        if missing:
            names = ", ".join(repr(t) for t in missing)
            raise UnknownThreadError(f"unknown thread {names} in {self.where}")

    def resolve(self, thread_id: str, ns: str, ref: str | None) -> str:
        """The checkpoint id `ref` names in the thread (its head when None): an exact id,
        or a prefix or suffix matching exactly one."""
        matches = self.run(resolve_checkpoint_plan(self.dialect, thread_id, ns, ref))
        return resolved(self, matches, thread_id, ns, ref)

    def all_thread_ids(self) -> list[str]:
        return self.run(all_thread_ids_plan(self.dialect))

    def thread_summaries(
        self,
        sort: str = "updated",
        limit: int | None = None,
        offset: int = 0,
        thread_ids: Sequence[str] | None = None,
    ) -> tuple[int, list[ThreadSummary]]:
        return self.run(thread_summaries_plan(self.dialect, sort, limit, offset, thread_ids))

    def namespaces(self, thread_id: str) -> list[str]:
        return self.run(namespaces_plan(self.dialect.checkpoints, self.dialect.p, thread_id))

    def namespace_head(self, thread_id: str, ns: str) -> tuple[str | None, int]:
        return self.run(
            namespace_head_plan(self.dialect.checkpoints, self.dialect.p, thread_id, ns)
        )

    def skeleton(self, thread_id: str, ns: str) -> dict[str, SkeletonNode]:
        nodes = self.run(skeleton_plan(self.dialect, thread_id, ns))
        for node in nodes.values():
            for i, w in enumerate(node.writes):
                if w.raw is not None and _sealed(w.raw):
                    where = ValueLocation.write(
                        thread_id, ns, node.checkpoint_id, w.task_id, w.idx, w.channel
                    )
                    node.writes[i] = dataclasses.replace(w, raw=Located(w.raw, where))
        return nodes

    def raw_tuple(self, thread_id: str, ns: str, checkpoint_id: str) -> RawTuple | None:
        raw = self.run(raw_tuple_plan(self.dialect, thread_id, ns, checkpoint_id))
        if raw is None:
            return None
        versions = raw.record.get("channel_versions") or {}
        for channel, pair in list(raw.blobs.items()):
            if _sealed(pair) and channel in versions:
                where = ValueLocation.blob(thread_id, ns, channel, str(versions[channel]))
                raw.blobs[channel] = Located(pair, where)
        raw.writes = [_located_write(thread_id, ns, w) for w in raw.writes]
        return raw

    def delta_rows(
        self, thread_id: str, ns: str, checkpoint_id: str, channels: Sequence[str]
    ) -> list[RawHistoryRow]:
        config = make_config(thread_id, ns, checkpoint_id)
        rows = self.run(raw_delta_history_plan(self.dialect, config, channels))
        if not any(_sealed((r.type, r.blob)) for r in rows):
            return rows
        # Encrypted values are bound to where they live: give each row its place.
        depth = max(r.depth for r in rows)
        at = {a.depth: a.checkpoint_id for a in self.ancestors(thread_id, ns, checkpoint_id, depth)}
        out: list[RawHistoryRow] = []
        for r in rows:
            cid = at.get(r.depth)
            if cid is None or not _sealed((r.type, r.blob)):
                out.append(r)
            elif r.kind == 0:
                seed = self.raw_tuple(thread_id, ns, cid)
                stored = seed.blobs.get(r.channel) if seed is not None else None
                out.append(dataclasses.replace(r, blob=stored) if stored is not None else r)
            else:
                where = ValueLocation.write(thread_id, ns, cid, r.task_id, r.idx, r.channel)
                out.append(dataclasses.replace(r, blob=Located((r.type, r.blob), where)))
        return out

    def ancestors(
        self, thread_id: str, ns: str, checkpoint_id: str, max_depth: int
    ) -> list[Ancestor]:
        return self.run(ancestors_plan(self.dialect, thread_id, ns, checkpoint_id, max_depth))

    def raw_writes(
        self,
        thread_id: str,
        ns: str,
        checkpoint_ids: Sequence[str],
        channels: Sequence[str] | None = None,
    ) -> list[RawWrite]:
        writes = self.run(raw_writes_plan(self.dialect, thread_id, ns, checkpoint_ids, channels))
        return [_located_write(thread_id, ns, w) for w in writes]

    def stats(self, thread_id: str | None = None, top: int = 10) -> Stats:
        return self.run(stats_plan(self.dialect, thread_id, top))


def namespaces_plan(table: str, p: Any, thread_id: str) -> Plan[list[str]]:
    """The namespaces of a thread in a checkpoint table (ours or LangGraph's: both key
    checkpoints by thread, namespace and id)."""
    rows = yield Stmt(
        f"SELECT DISTINCT checkpoint_ns FROM {table} WHERE thread_id = {p('t')} "
        "ORDER BY checkpoint_ns",
        {"t": thread_id},
        fetch=True,
    )
    return [str(r[0]) for r in rows]


def namespace_head_plan(
    table: str, p: Any, thread_id: str, ns: str
) -> Plan[tuple[str | None, int]]:
    """(newest checkpoint id, checkpoint count) of a namespace, from the primary key."""
    rows = yield Stmt(
        f"SELECT MAX(checkpoint_id), COUNT(*) FROM {table} "
        f"WHERE thread_id = {p('t')} AND checkpoint_ns = {p('ns')}",
        {"t": thread_id, "ns": ns},
        fetch=True,
    )
    newest, count = rows[0] if rows else (None, 0)
    return (None if newest is None else str(newest), int(count or 0))


def _sealed(pair: Any) -> bool:
    return isinstance(pair, tuple) and len(pair) == 2 and pair[0] == TAG_ENCRYPTED


def _located_write(thread_id: str, ns: str, w: RawWrite) -> RawWrite:
    if not _sealed((w.type, w.blob)):
        return w
    where = ValueLocation.write(thread_id, ns, w.checkpoint_id, w.task_id, w.idx, w.channel)
    return dataclasses.replace(w, blob=Located((w.type, w.blob), where))


def resolved(reader: Any, matches: list[str], thread_id: str, ns: str, ref: str | None) -> str:
    """The one checkpoint id of `matches`, or the error saying why there is none."""
    if len(matches) == 1:
        return matches[0]
    if not matches:
        reader.require_threads([thread_id])
        where = f"thread {thread_id!r}" + (f" namespace {ns!r}" if ns else "")
        if ref is None:
            raise UnknownThreadError(f"{where} has no checkpoints")
        raise CheckpointNotFoundError(f"unknown checkpoint {ref!r} in {where}")
    listed = ", ".join(matches[:3])
    raise CheckpointNotFoundError(
        f"checkpoint {ref!r} is ambiguous in thread {thread_id!r}: {listed}"
        + (" ..." if len(matches) > 3 else "")
    )


class _ReadOnlyExecutor:
    """Runs read plans on one connection that cannot write; refuses write operations."""

    def __init__(self, conn: Any, run: Any, where: str) -> None:
        self._conn = conn
        self._run = run
        self._where = where

    def run(self, op: Op[T]) -> T:
        if op.write:
            raise ReadOnlyError(f"{self._where} was opened read-only")
        result: T = self._run(self._conn, op)
        return result

    def close(self) -> None:
        return None


def sqlite_readonly_connection(path: str) -> sqlite3.Connection:
    """A connection that cannot change the file: `mode=ro` (SQLite opens it read-only,
    never creating it or writing a header) plus `PRAGMA query_only`."""
    if not os.path.exists(path):
        raise DatabaseUnavailableError(f"no such SQLite database: {path!r}")
    if os.path.isdir(path):
        raise DatabaseUnavailableError(f"{path!r} is a directory, not a SQLite database")
    try:
        conn = sqlite3.connect(
            f"{Path(path).resolve().as_uri()}?mode=ro",
            uri=True,
            isolation_level=None,
            check_same_thread=False,
            timeout=5.0,
        )
        conn.execute("PRAGMA query_only = 1")
        conn.execute("PRAGMA busy_timeout = 5000")
    except sqlite3.Error as exc:
        raise DatabaseUnavailableError(f"cannot open SQLite database {path!r}: {exc}") from exc
    return conn


@contextmanager
def _open_sqlite(
    path: str, create: bool, serde: MsgpackSerializer, readonly: bool = False
) -> Iterator[Database]:
    from checkpointer.savers.sql.sqlite_dialect import SqliteDialect
    from checkpointer.savers.sql.sync_exec import SqliteExecutor, is_memory_path, run_sqlite_op
    from checkpointer.savers.sqlite import SqliteSaver

    where = f"SQLite database {path!r}"
    if is_memory_path(path):
        conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    elif readonly:
        conn = sqlite_readonly_connection(path)
    else:
        if not create and not os.path.exists(path):
            raise DatabaseUnavailableError(f"no such SQLite database: {path!r}")
        if os.path.isdir(path):
            raise DatabaseUnavailableError(f"{path!r} is a directory, not a SQLite database")
        mode = "rwc" if create else "rw"
        try:
            conn = sqlite3.connect(
                f"{Path(path).resolve().as_uri()}?mode={mode}",
                uri=True,
                isolation_level=None,
                check_same_thread=False,
                timeout=5.0,
            )
        except sqlite3.Error as exc:
            raise DatabaseUnavailableError(f"cannot open {where}: {exc}") from exc
    try:
        executor: Any
        saver: SqliteSaver | None
        if readonly:
            executor = _ReadOnlyExecutor(conn, lambda c, op: run_sqlite_op(c, op, None), where)
            saver = None
        else:
            executor = SqliteExecutor(conn)
            saver = SqliteSaver(conn, serde=serde)
        yield Database(
            dialect=SqliteDialect(where),
            executor=executor,
            saver=saver,
            where=where,
            serde=serde,
        )
    except sqlite3.DatabaseError as exc:
        raise DatabaseUnavailableError(f"cannot read {where}: {exc}") from exc
    finally:
        conn.close()


def postgres_connection(url: str, *, readonly: bool, **kwargs: Any) -> Any:
    """A psycopg connection (autocommit, no prepared statements) that answers within a
    few seconds or fails with one clear error; `readonly` makes every transaction of the
    session read-only, so no statement can change anything."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    masked = mask_url(url)
    try:
        options = conninfo_to_dict(url)
    except psycopg.Error as exc:
        raise DatabaseUnavailableError(f"bad PostgreSQL URL {masked}: {_one_line(exc)}") from exc
    extra: dict[str, Any] = {} if "connect_timeout" in options else {"connect_timeout": 10}
    try:
        conn = psycopg.Connection.connect(
            url, autocommit=True, prepare_threshold=None, **extra, **kwargs
        )
        if readonly:
            conn.execute("SET default_transaction_read_only = on")
    except psycopg.Error as exc:
        raise DatabaseUnavailableError(
            f"cannot connect to PostgreSQL at {masked}: {_one_line(exc)}"
        ) from exc
    return conn


@contextmanager
def _open_postgres(
    url: str, schema: str | None, serde: MsgpackSerializer, readonly: bool = False
) -> Iterator[Database]:
    from checkpointer.savers.postgres import PostgresSaver
    from checkpointer.savers.sql.postgres_dialect import PostgresDialect
    from checkpointer.savers.sql.sync_exec import PostgresExecutor

    conn = postgres_connection(url, readonly=readonly)
    try:
        if schema is None:
            # The URL may choose it (`options=-csearch_path=...`); else this is `public`.
            row = conn.execute("SELECT current_schema()").fetchone()
            schema = str(row[0]) if row and row[0] else "public"
        dialect = PostgresDialect(schema)
        saver = (
            None
            if readonly
            else PostgresSaver(conn, schema=schema, serde=serde, prepare_threshold=None)
        )
        yield Database(
            dialect=dialect,
            executor=PostgresExecutor(conn, prepare=False),
            saver=saver,
            where=f"PostgreSQL schema {schema!r} at {mask_url(url)}",
            serde=serde,
        )
    finally:
        conn.close()


def _one_line(exc: BaseException) -> str:
    return one_line(str(exc))


def one_line(text: str) -> str:
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def is_snapshot_blob(type_: str, blob: bytes) -> bool:
    """Whether stored bytes hold a `DeltaSnapshot` (told by its marker, without loading:
    an unloadable snapshot is still a snapshot); a compressed value is looked into."""
    return snapshot_marked(type_, blob)
