"""Reading databases written by LangGraph's own savers, read-only, for the time-travel tools.

`LangGraphReader` implements `checkpointer.reader.Reader` over the tables of
`langgraph-checkpoint-sqlite` (one `checkpoints` table whose `checkpoint` column holds the
whole serialized checkpoint, values included, and a `writes` table) and
`langgraph-checkpoint-postgres` (`checkpoints` with the record as JSONB and primitive
values inline, `checkpoint_blobs` by channel version, `checkpoint_writes`,
`checkpoint_migrations`), at the schema levels those packages have shipped: writes without
a `task_path` column (older SQLite files, Postgres before its tenth migration), blobs of
type `empty`. It issues SELECTs only, on a connection that cannot write
(`checkpointer.inspect.Database.open(..., readonly=True)`), and decodes values with
LangGraph's own serializer (`JsonPlusSerializer`), so it needs `langgraph` installed.

Delta channels: LangGraph's `DeltaChannel` stores a `_DeltaSnapshot` on snapshot steps and
nothing otherwise; a snapshot reads back as our `DeltaSnapshot`, and the walk that finds a
channel's seed and the writes since follows parent pointers as LangGraph's own
`get_delta_channel_history` does, so the views rebuild and show them as on our databases.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from checkpointer.channels import DeltaSnapshot
from checkpointer.errors import CheckpointerError
from checkpointer.reader import Loaded, Unloadable, raw_size
from checkpointer.savers.sql.inspect import (
    Ancestor,
    ChannelBytes,
    RawHistoryRow,
    RawTuple,
    RawWrite,
    SkeletonNode,
    Stats,
    TableStats,
    ThreadBytes,
    ThreadSummary,
    WriteInfo,
    all_thread_ids_plan,
    existing_threads_plan,
    resolve_checkpoint_plan,
)
from checkpointer.savers.sql.plan import Plan, Stmt
from checkpointer.types import INTERRUPT

WRITE_HINT = (
    "this is a database of LangGraph's own saver, which the tools only read; "
    "run `checkpointer import-langgraph SOURCE --url TARGET` to move its threads into a "
    "checkpointer database, then work on that"
)


class LangGraphSerdeMissing(CheckpointerError):
    """A LangGraph database was found but LangGraph (its serializer) is not installed."""


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def has_langgraph_tables(db: Any) -> bool:
    """Whether the database (a read-only `Database`) holds LangGraph's saver tables."""
    return _layout(db) is not None


def _layout(db: Any) -> dict[str, Any] | None:
    d = db.dialect
    if d.name == "postgresql":
        schema = d.schema
        rows = db.run(
            _rows_plan(
                "SELECT table_name, column_name FROM information_schema.columns "
                "WHERE table_schema = %(s)s AND table_name IN "
                "('checkpoints', 'checkpoint_blobs', 'checkpoint_writes', 'checkpoint_migrations')",
                {"s": schema},
            )
        )
        columns: dict[str, set[str]] = {}
        for table, column in rows:
            columns.setdefault(str(table), set()).add(str(column))
        if not {"checkpoints", "checkpoint_writes"} <= set(columns):
            return None
        q = _quote(schema)
        return {
            "pg": True,
            "checkpoints": f"{q}.checkpoints",
            "blobs": f"{q}.checkpoint_blobs" if "checkpoint_blobs" in columns else None,
            "writes": f"{q}.checkpoint_writes",
            "write_value": "blob",
            "task_path": "task_path" in columns["checkpoint_writes"],
            "migrations": f"{q}.checkpoint_migrations"
            if "checkpoint_migrations" in columns
            else None,
        }
    tables = {
        str(r[0])
        for r in db.run(_rows_plan("SELECT name FROM sqlite_master WHERE type = 'table'", {}))
    }
    if not {"checkpoints", "writes"} <= tables:
        return None
    cols = {str(r[1]) for r in db.run(_rows_plan("PRAGMA table_info(writes)", {}))}
    cp_cols = {str(r[1]) for r in db.run(_rows_plan("PRAGMA table_info(checkpoints)", {}))}
    if "checkpoint" not in cp_cols or "value" not in cols:
        return None
    return {
        "pg": False,
        "checkpoints": "checkpoints",
        "blobs": None,
        "writes": "writes",
        "write_value": "value",
        "task_path": "task_path" in cols,
        "migrations": None,
    }


def _rows_plan(sql: str, params: Any) -> Plan[list[Any]]:
    rows: list[Any] = yield Stmt(sql, params, fetch=True)
    return rows


class _Tables:
    """Our dialect with LangGraph's checkpoint table: the plans that only read thread and
    checkpoint ids (`resolve`, `existing_threads`) run on it unchanged."""

    def __init__(self, dialect: Any, checkpoints: str) -> None:
        self._dialect = dialect
        self.checkpoints = checkpoints

    def __getattr__(self, name: str) -> Any:
        return getattr(self._dialect, name)


def langgraph_serde() -> Any:
    try:
        from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
    except ImportError as exc:
        raise LangGraphSerdeMissing(
            "this database was written by LangGraph's own saver; reading its values needs "
            "LangGraph's serializer: pip install langgraph"
        ) from exc
    return JsonPlusSerializer()


def _ours(value: Any) -> Any:
    """LangGraph's `_DeltaSnapshot` as ours (the views and replay know that one)."""
    if type(value).__name__ == "_DeltaSnapshot" and hasattr(value, "value"):
        return DeltaSnapshot(value.value)
    return value


def _doc(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, bytes | bytearray | memoryview):
        value = bytes(value).decode("utf-8", "replace")
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return {}
        return parsed if isinstance(parsed, dict) else {}
    return dict(value) if isinstance(value, dict) else {}


def _opt_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class LangGraphReader:
    """A read-only `Reader` over LangGraph's saver tables (see the module docstring)."""

    kind = "langgraph"

    def __init__(self, db: Any, layout: dict[str, Any]) -> None:
        self.db = db
        self.layout = layout
        self.pg: bool = layout["pg"]
        self.where = f"{db.where} (written by LangGraph's own saver)"
        self.serde = langgraph_serde()
        self.tables = _Tables(db.dialect, layout["checkpoints"])
        self.dialect = db.dialect

    @classmethod
    def over(cls, db: Any) -> LangGraphReader:
        layout = _layout(db)
        if layout is None:
            raise CheckpointerError(f"{db.where} holds no LangGraph checkpoint tables")
        return cls(db, layout)

    # ------------------------------------------------------------------ plumbing
    def _rows(self, sql: str, params: dict[str, Any]) -> list[Any]:
        return self.db.run(_rows_plan(sql, params))

    def _p(self, name: str) -> str:
        return self.db.dialect.p(name)

    def _key(self, *, with_id: bool = True) -> str:
        key = f"thread_id = {self._p('t')} AND checkpoint_ns = {self._p('ns')}"
        return key + (f" AND checkpoint_id = {self._p('cid')}" if with_id else "")

    def _size(self, column: str, *, text: bool = False) -> str:
        if self.pg:
            return f"COALESCE(octet_length({column}{'::text' if text else ''}), 0)"
        return f"COALESCE(length(CAST({column} AS BLOB)), 0)"

    def _step_sql(self, alias: str = "") -> str:
        col = f"{alias}metadata"
        if self.pg:
            return f"({col} ->> 'step')"
        return f"json_extract(CAST({col} AS TEXT), '$.step')"

    def _task_path(self) -> str:
        return "task_path" if self.layout["task_path"] else "''"

    # ------------------------------------------------------------------ values
    def load_native(self, raw: Any) -> Any:
        """A value as LangGraph's serializer gives it (raises on bytes it cannot read)."""
        if isinstance(raw, Loaded):
            return raw.value
        type_, blob = raw
        return self.serde.loads_typed((str(type_), bytes(blob) if blob is not None else b""))

    def load(self, raw: Any) -> Any:
        try:
            return _ours(self.load_native(raw))
        except Exception as exc:  # whatever LangGraph's serializer raises
            type_ = "loaded" if isinstance(raw, Loaded) else str(raw[0])
            reason = " ".join(str(exc).split()) or type(exc).__name__
            return Unloadable(type_, raw_size(raw), reason)

    def is_snapshot(self, raw: Any) -> bool:
        return isinstance(self.load(raw), DeltaSnapshot)

    def _record(self, type_: Any, checkpoint: Any) -> dict[str, Any]:
        """The checkpoint record, values included (SQLite keeps them in it)."""
        if self.pg:
            return dict(checkpoint or {})
        loaded = self.serde.loads_typed((str(type_), bytes(checkpoint)))
        return dict(loaded) if isinstance(loaded, dict) else {}

    # ------------------------------------------------------------------ reads
    def require_threads(self, thread_ids: Sequence[str]) -> None:
        from checkpointer.reader import UnknownThreadError

        found = self.db.run(existing_threads_plan(self.tables, thread_ids))  # type: ignore[arg-type]
        missing = [t for t in thread_ids if t not in found]
        if missing:
            names = ", ".join(repr(t) for t in missing)
            raise UnknownThreadError(f"unknown thread {names} in {self.where}")

    def resolve(self, thread_id: str, ns: str, ref: str | None) -> str:
        from checkpointer.inspect_db import resolved

        plan = resolve_checkpoint_plan(self.tables, thread_id, ns, ref)  # type: ignore[arg-type]
        return resolved(self, self.db.run(plan), thread_id, ns, ref)

    def all_thread_ids(self) -> list[str]:
        return self.db.run(all_thread_ids_plan(self.tables))  # type: ignore[arg-type]

    def namespaces(self, thread_id: str) -> list[str]:
        from checkpointer.inspect_db import namespaces_plan

        return self.db.run(namespaces_plan(self.layout["checkpoints"], self._p, thread_id))

    def namespace_head(self, thread_id: str, ns: str) -> tuple[str | None, int]:
        from checkpointer.inspect_db import namespace_head_plan

        plan = namespace_head_plan(self.layout["checkpoints"], self._p, thread_id, ns)
        return self.db.run(plan)

    def thread_summaries(
        self,
        sort: str = "updated",
        limit: int | None = None,
        offset: int = 0,
        thread_ids: Sequence[str] | None = None,
    ) -> tuple[int, list[ThreadSummary]]:
        """Like ours; "updated" orders by the newest checkpoint id (LangGraph's ids are
        time-ordered UUIDs), so only the listed threads' head records are read."""
        cp, wr = self.layout["checkpoints"], self.layout["writes"]
        value = self.layout["write_value"]
        rec = f"{self._size('checkpoint', text=True)} + {self._size('metadata', text=True)}"
        parts = [
            f"SELECT thread_id, 1 AS n, {rec} AS b FROM {cp}",
            f"SELECT thread_id, 0, {self._size(value)} FROM {wr}",
        ]
        if self.layout["blobs"]:
            parts.append(f"SELECT thread_id, 0, {self._size('blob')} FROM {self.layout['blobs']}")
        rows = self._rows(
            "SELECT thread_id, SUM(n), SUM(b) FROM (" + " UNION ALL ".join(parts) + ") x "
            "GROUP BY thread_id HAVING SUM(n) > 0",
            {},
        )
        heads = {
            str(t): (str(root or last), str(last))
            for t, root, last in self._rows(
                "SELECT thread_id, MAX(CASE WHEN checkpoint_ns = '' THEN checkpoint_id END), "
                f"MAX(checkpoint_id) FROM {cp} GROUP BY thread_id",
                {},
            )
        }
        items = [(str(t), int(n or 0), int(b or 0)) for t, n, b in rows]
        if thread_ids is not None:
            wanted = {str(t) for t in thread_ids}
            items = [i for i in items if i[0] in wanted]
        key = {
            "updated": lambda i: (_neg(heads[i[0]][1]), i[0]),
            "count": lambda i: (-i[1], i[0]),
            "bytes": lambda i: (-i[2], i[0]),
            "id": lambda i: (i[0],),
        }[sort]
        items.sort(key=key)
        page = items[offset:] if limit is None else items[offset : offset + limit]
        out: list[ThreadSummary] = []
        for thread_id, n, size in page:
            head = heads[thread_id][0]
            ns_rows = self._rows(
                f"SELECT DISTINCT checkpoint_ns FROM {cp} WHERE thread_id = {self._p('t')}",
                {"t": thread_id},
            )
            head_rows = self._rows(
                f"SELECT type, checkpoint, metadata FROM {cp} WHERE thread_id = {self._p('t')} "
                f"AND checkpoint_id = {self._p('cid')} ORDER BY checkpoint_ns LIMIT 1",
                {"t": thread_id, "cid": head},
            )
            step = ts = None
            if head_rows:
                type_, checkpoint, metadata = head_rows[0]
                step = _opt_int(_doc(metadata).get("step"))
                try:
                    ts = self._record(type_, checkpoint).get("ts")
                except Exception:
                    ts = None
            out.append(
                ThreadSummary(
                    thread_id=thread_id,
                    namespaces=sorted(str(r[0]) for r in ns_rows),
                    checkpoints=n,
                    last_checkpoint_id=head,
                    last_step=step,
                    last_updated=None if ts is None else str(ts),
                    bytes=size,
                )
            )
        return len(items), out

    def _writes(self, thread_id: str, ns: str, where: str, params: dict[str, Any]) -> list[Any]:
        value = self.layout["write_value"]
        return self._rows(
            f"SELECT checkpoint_id, task_id, {self._task_path()}, idx, channel, type, {value} "
            f"FROM {self.layout['writes']} WHERE {self._key(with_id=False)}{where}",
            {"t": thread_id, "ns": ns, **params},
        )

    @staticmethod
    def _sorted_writes(rows: list[Any]) -> list[RawWrite]:
        writes = [
            RawWrite(
                str(cid),
                str(task_id),
                str(path or ""),
                int(idx),
                str(channel),
                str(type_ or ""),
                bytes(blob) if blob is not None else b"",
            )
            for cid, task_id, path, idx, channel, type_, blob in rows
        ]
        writes.sort(key=lambda w: (w.checkpoint_id, w.task_path, w.task_id, w.idx))
        return writes

    def skeleton(self, thread_id: str, ns: str) -> dict[str, SkeletonNode]:
        rows = self._rows(
            f"SELECT checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata "
            f"FROM {self.layout['checkpoints']} WHERE {self._key(with_id=False)} "
            "ORDER BY checkpoint_id",
            {"t": thread_id, "ns": ns},
        )
        nodes: dict[str, SkeletonNode] = {}
        for cid, pid, type_, checkpoint, metadata in rows:
            try:
                record = self._record(type_, checkpoint)
            except Exception:
                record = {}
            record.pop("channel_values", None)
            nodes[str(cid)] = SkeletonNode(
                str(cid), None if pid is None else str(pid), record, _doc(metadata)
            )
        for w in self._sorted_writes(self._writes(thread_id, ns, "", {})):
            node = nodes.get(w.checkpoint_id)
            if node is not None:
                raw = (w.type, w.blob) if w.channel == INTERRUPT else None
                node.writes.append(WriteInfo(w.task_id, w.task_path, w.idx, w.channel, raw))
        return nodes

    def raw_tuple(self, thread_id: str, ns: str, checkpoint_id: str) -> RawTuple | None:
        params = {"t": thread_id, "ns": ns, "cid": checkpoint_id}
        rows = self._rows(
            f"SELECT parent_checkpoint_id, type, checkpoint, metadata "
            f"FROM {self.layout['checkpoints']} WHERE {self._key()}",
            params,
        )
        if not rows:
            return None
        pid, type_, checkpoint, metadata = rows[0]
        record = self._record(type_, checkpoint)
        values = record.pop("channel_values", None) or {}
        versions = record.get("channel_versions") or {}
        blobs: dict[str, Any] = {
            str(ch): Loaded(v) for ch, v in values.items() if not self.pg or ch in versions
        }
        if self.pg and self.layout["blobs"]:
            # The values of the checkpoint's versions, as LangGraph's own SELECT joins them.
            for ch, bt, blob in self._rows(
                f"SELECT bl.channel, bl.type, bl.blob FROM {self.layout['checkpoints']} c "
                "CROSS JOIN LATERAL jsonb_each_text(c.checkpoint -> 'channel_versions') v "
                f"JOIN {self.layout['blobs']} bl ON bl.thread_id = c.thread_id "
                "AND bl.checkpoint_ns = c.checkpoint_ns AND bl.channel = v.key "
                "AND bl.version = v.value WHERE c.thread_id = %(t)s "
                "AND c.checkpoint_ns = %(ns)s AND c.checkpoint_id = %(cid)s",
                params,
            ):
                if bt != "empty" and blob is not None:
                    blobs[str(ch)] = (str(bt), bytes(blob))
                elif isinstance(blobs.get(str(ch)), Loaded):
                    del blobs[str(ch)]  # a value recorded as absent
        writes = self._sorted_writes(
            self._writes(thread_id, ns, f" AND checkpoint_id = {self._p('cid')}", params)
        )
        return RawTuple(
            thread_id=thread_id,
            checkpoint_ns=ns,
            checkpoint_id=checkpoint_id,
            parent_id=None if pid is None else str(pid),
            record=record,
            metadata=_doc(metadata),
            blobs=blobs,
            writes=writes,
        )

    def ancestors(
        self, thread_id: str, ns: str, checkpoint_id: str, max_depth: int
    ) -> list[Ancestor]:
        cp = self.layout["checkpoints"]
        rows = self._rows(
            "WITH RECURSIVE walk(checkpoint_id, parent_id, step, depth) AS ("
            f"SELECT checkpoint_id, parent_checkpoint_id, {self._step_sql()}, 0 FROM {cp} "
            f"WHERE {self._key()} UNION ALL SELECT c.checkpoint_id, c.parent_checkpoint_id, "
            f"{self._step_sql('c.')}, w.depth + 1 FROM walk w JOIN {cp} c "
            f"ON c.thread_id = {self._p('t')} AND c.checkpoint_ns = {self._p('ns')} "
            f"AND c.checkpoint_id = w.parent_id WHERE w.depth < {self._p('max')}) "
            "SELECT depth, checkpoint_id, parent_id, step FROM walk ORDER BY depth",
            {"t": thread_id, "ns": ns, "cid": checkpoint_id, "max": max_depth},
        )
        out: list[Ancestor] = []
        seen: set[str] = set()
        for depth, cid, pid, step in rows:
            if str(cid) in seen:  # a hand-made loop: stop where it closes
                break
            seen.add(str(cid))
            try:
                step_int = None if step is None else int(step)
            except (TypeError, ValueError):
                step_int = None
            out.append(Ancestor(int(depth), str(cid), None if pid is None else str(pid), step_int))
        return out

    def delta_rows(
        self, thread_id: str, ns: str, checkpoint_id: str, channels: Sequence[str]
    ) -> list[RawHistoryRow]:
        """Per channel, walking parent pointers from the target's parent: the writes of
        each ancestor, up to and including the nearest one that stores a value (the seed);
        oldest first, each checkpoint's writes in (task path, task id, idx) order, as our
        savers' walk returns them."""
        seeking = set(channels)
        out: list[RawHistoryRow] = []
        for at in self.ancestors(thread_id, ns, checkpoint_id, 10_000_000)[1:]:
            if not seeking:
                break
            raw = self.raw_tuple(thread_id, ns, at.checkpoint_id)
            if raw is None:
                break
            for w in raw.writes:
                if w.channel in seeking:
                    out.append(
                        RawHistoryRow(
                            1, at.depth, w.channel, w.task_path, w.task_id, w.idx, w.type, w.blob
                        )
                    )
            for channel in sorted(seeking):
                if channel in raw.blobs:
                    stored = raw.blobs[channel]
                    type_, blob = ("", stored) if isinstance(stored, Loaded) else stored
                    out.append(RawHistoryRow(0, at.depth, channel, "", "", -1, type_, blob))
                    seeking.discard(channel)
        order = {id(row): i for i, row in enumerate(out)}
        return sorted(out, key=lambda r: (-r.depth, r.kind, order[id(r)]))

    def raw_writes(
        self,
        thread_id: str,
        ns: str,
        checkpoint_ids: Sequence[str],
        channels: Sequence[str] | None = None,
    ) -> list[RawWrite]:
        if not checkpoint_ids or (channels is not None and not channels):
            return []
        wanted = set(checkpoint_ids)
        rows = [w for w in self._sorted_writes(self._writes(thread_id, ns, "", {}))]
        return [
            w
            for w in rows
            if w.checkpoint_id in wanted and (channels is None or w.channel in channels)
        ]

    def stats(self, thread_id: str | None = None, top: int = 10) -> Stats:
        """Rows and bytes per table, thread and channel. Snapshots are not told apart
        here (LangGraph's SQLite saver keeps values inside each checkpoint record)."""
        params: dict[str, Any] = {}
        where = ""
        if thread_id is not None:
            params["t"] = thread_id
            where = f" WHERE thread_id = {self._p('t')}"
        cp, wr, bl = self.layout["checkpoints"], self.layout["writes"], self.layout["blobs"]
        value = self.layout["write_value"]
        rec = f"{self._size('checkpoint', text=True)} + {self._size('metadata', text=True)}"
        tables: list[TableStats] = []
        sources = [("checkpoints", cp, rec), ("writes", wr, self._size(value))]
        if bl:
            sources.insert(1, ("blobs", bl, self._size("blob")))
        for name, table, size in sources:
            n, b = self._rows(
                f"SELECT COUNT(*), COALESCE(SUM({size}), 0) FROM {table}{where}", params
            )[0]
            tables.append(TableStats(name, int(n or 0), int(b or 0)))
        per_thread: dict[str, list[int]] = {}
        for name, table, size in sources:
            for t, n, b in self._rows(
                f"SELECT thread_id, COUNT(*), COALESCE(SUM({size}), 0) FROM {table}{where} "
                "GROUP BY thread_id",
                params,
            ):
                tally = per_thread.setdefault(str(t), [0, 0, 0, 0])
                if name == "checkpoints":
                    tally[0], tally[1] = int(n or 0), int(b or 0)
                elif name == "blobs":
                    tally[2] = int(b or 0)
                else:
                    tally[3] = int(b or 0)
        threads = sorted(
            (ThreadBytes(t, *v) for t, v in per_thread.items()),
            key=lambda x: (-x.total, x.thread_id),
        )
        per_channel: dict[str, list[int]] = {}
        channel_sources = [("w", wr, self._size(value))]
        if bl:
            channel_sources.insert(0, ("b", bl, self._size("blob")))
        for kind, table, size in channel_sources:
            for ch, n, b in self._rows(
                f"SELECT channel, COUNT(*), COALESCE(SUM({size}), 0) FROM {table}{where} "
                "GROUP BY channel",
                params,
            ):
                tally = per_channel.setdefault(str(ch), [0, 0, 0, 0])
                if kind == "b":
                    tally[0], tally[1] = int(n or 0), int(b or 0)
                else:
                    tally[2], tally[3] = int(n or 0), int(b or 0)
        channels = sorted(
            (ChannelBytes(ch, v[0], v[1], 0, 0, v[2], v[3]) for ch, v in per_channel.items()),
            key=lambda c: (-c.total, c.channel),
        )
        database_bytes = free_bytes = None
        if thread_id is None and not self.pg:
            size_rows = self._rows(
                "SELECT p.page_count * s.page_size, f.freelist_count * s.page_size "
                "FROM pragma_page_count() p, pragma_page_size() s, pragma_freelist_count() f",
                {},
            )
            if size_rows:
                database_bytes, free_bytes = int(size_rows[0][0]), int(size_rows[0][1])
        return Stats(
            tables=tables,
            threads=threads[: max(top, 0)],
            thread_count=len(threads),
            channels=channels,
            database_bytes=database_bytes,
            free_bytes=free_bytes,
        )

    # ------------------------------------------------------------------ import
    def checkpoints_oldest_first(self, thread_id: str) -> Iterator[RawTuple]:
        """Every checkpoint of a thread, each namespace's parents before their children
        (what an import needs)."""
        for ns in self.namespaces(thread_id):
            nodes = self.skeleton(thread_id, ns)
            done: set[str] = set()
            order: list[str] = []
            for cid in sorted(nodes):
                chain: list[str] = []
                cursor: str | None = cid
                while cursor is not None and cursor in nodes and cursor not in done:
                    if cursor in chain:
                        break
                    chain.append(cursor)
                    cursor = nodes[cursor].parent_id
                for c in reversed(chain):
                    done.add(c)
                    order.append(c)
            for cid in order:
                raw = self.raw_tuple(thread_id, ns, cid)
                if raw is not None:
                    yield raw


def _neg(text: str) -> tuple[int, ...]:
    """A sort key that orders strings descending."""
    return (*(-ord(c) for c in text), 1)
