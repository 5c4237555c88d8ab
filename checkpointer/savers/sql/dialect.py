"""The `Dialect` base: the SQL fragments that differ between SQLite and PostgreSQL (JSON
access, arrays, placeholders, collation) and the statements whose shape differs (bulk
inserts). Every other statement is written once, against this interface."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from checkpointer.savers.sql.plan import Op, Plan, Stmt

if TYPE_CHECKING:
    from checkpointer.savers.sql.tails import TailRow


class Dialect:
    """SQL fragments that differ between SQLite and PostgreSQL; everything else is shared."""

    name: str = ""
    checkpoints: str = ""
    blobs: str = ""
    writes: str = ""
    threads: str = ""
    stored_channels: str | None = None
    """A table of (thread_id, checkpoint_ns, channel) listing the channels with value rows,
    where the value rows' key cannot answer that by a seek (SQLite, revision 0012)."""
    row_key: str | None = None
    """A column that tells a table's rows apart within one statement and sorts as nothing
    in particular (SQLite's rowid): `list` pages number their checkpoints by it and order
    them in Python, where the database's text order is Python's (see `reads._tuples_sql`).
    None where text order is the database's collation (PostgreSQL)."""

    def lookup(self, table: str, alias: str, columns: str, condition: str) -> str:
        """Join `table` as a per-row primary-key lookup, whatever the planner estimates:
        SQLite runs CROSS JOIN in the written order; PostgreSQL needs LATERAL. Otherwise a
        planner may scan the whole thread once per row (or hash-join it)."""
        return f"CROSS JOIN {table} {alias} ON {condition}"

    _sql_cache: dict[tuple[Any, ...], str]

    def sql(self, key: tuple[Any, ...], build: Callable[[], str]) -> str:
        """Statement text built once per shape: only parameters vary between calls."""
        try:
            cache = self._sql_cache
        except AttributeError:
            cache = self._sql_cache = {}
        text = cache.get(key)
        if text is None:
            text = cache[key] = build()
        return text

    def p(self, name: str) -> str:
        """A named placeholder."""
        raise NotImplementedError

    def bigint(self, expr: str) -> str:
        return expr

    def text(self, expr: str) -> str:
        """An expression typed as text (PostgreSQL cannot infer a bare parameter's type)."""
        return expr

    def null(self, kind: str) -> str:
        """A typed NULL: the first branch of a UNION fixes each column's type."""
        return "NULL"

    def json_param(self, name: str) -> str:
        """A placeholder for JSON text going into a JSON column."""
        return self.p(name)

    def task_id_param(self, name: str) -> str:
        return self.p(name)

    def task_id_text(self, column: str) -> str:
        return column

    def encode_task_id(self, task_id: str) -> Any:
        """The stored form of a task id: the ONE place that conversion happens."""
        raise NotImplementedError

    def encode_write_key(self, task_id: str, idx: int) -> tuple[Any, int]:
        """The stored `(task_id, idx)` of a write; `decode_write_key` inverts it exactly."""
        return self.encode_task_id(task_id), idx

    def encode_write_keys(self, task_id: str, idxs: Sequence[int]) -> tuple[Any, list[int]]:
        """`encode_write_key` of one task's writes: the stored task id and each stored idx
        (a dialect whose task id encoding costs more than a call does it once)."""
        stored = [self.encode_write_key(task_id, idx) for idx in idxs]
        task = stored[0][0] if stored else self.encode_write_key(task_id, 0)[0]
        return task, [idx for _, idx in stored]

    def decode_write_key(self, stored_task_id: Any, stored_idx: int) -> tuple[str, int]:
        return str(stored_task_id), int(stored_idx)

    def decode_write_keys(
        self, stored_task_ids: Sequence[Any], stored_idxs: Sequence[Any]
    ) -> list[tuple[str, int]]:
        """`decode_write_key` of many writes (a delta history's thousand): where the
        stored key is the key, as read it is, in one C-level pass."""
        if {str}.issuperset(map(type, stored_task_ids)) and {int}.issuperset(
            map(type, stored_idxs)
        ):
            return list(zip(stored_task_ids, stored_idxs))
        return list(map(self.decode_write_key, stored_task_ids, stored_idxs))

    def task_name(self, task_id: str) -> str | None:
        """What the writes table's `task_name` holds for `task_id`: where the task id
        column holds every id as it is (SQLite's text), nothing."""
        return None

    def versions_join(self, record: str, alias: str) -> str:
        """A FROM fragment listing `record`'s channel_versions as rows (`alias`.key, .value)."""
        raise NotImplementedError

    def versions_value(self, alias: str) -> str:
        return f"{alias}.value"

    def hints_join(self, record: str, alias: str) -> str:
        """A FROM fragment listing `record`'s tail hints (`tails.TAILS_KEY`) as rows
        (`alias`.key = channel, .value = base version); none when it has none."""
        raise NotImplementedError

    def version_of(self, record: str, channel: str) -> str:
        """The version text of `channel` (an SQL expression) in a checkpoint record."""
        raise NotImplementedError

    def versions_column(self, record: str) -> str:
        """The channel_versions object of a record, as the driver returns JSON."""
        raise NotImplementedError

    def inline_has(self, record: str, channel: str, probe: str) -> str:
        """Whether `record` keeps the value of `channel` (an SQL expression) inline.
        `probe` is a parameter holding `inline_probe(channel)`, for a cheap first test."""
        raise NotImplementedError

    def record_has_inline(self, record: str) -> str:
        """Whether `record` may keep values inline (cheap; false only when it does not)."""
        raise NotImplementedError

    def inline_keys_column(self, record: str) -> str:
        """A JSON array of the channels `record` keeps inline (NULL if none)."""
        raise NotImplementedError

    def inline_value(self, record: str, channel: str) -> tuple[str, str]:
        """(JSON type, value as text) of `channel`'s inline value in `record`, as two SQL
        expressions; `inline.from_sql` turns them back into the value."""
        raise NotImplementedError

    json_guarded = False
    """Whether JSON reads tolerate damaged records (a `guarded()` copy)."""

    def guarded(self) -> Dialect:
        """This dialect with JSON reads that tolerate a damaged checkpoint record (text
        that is not JSON, a non-object where an object belongs), so that one such row does
        not abort a statement reading others: its decoder then names it. Only used to
        retry a read that failed on one (`json_damage`): the statements of the hot path
        stay as they are."""
        clone: Dialect | None = self.__dict__.get("_guarded_copy")
        if clone is None:
            clone = copy.copy(self)
            clone.__dict__.pop("_sql_cache", None)
            clone.json_guarded = True
            self._guarded_copy = clone
        return clone

    def json_damage(self, exc: BaseException) -> bool:
        """Whether a statement failed on a damaged JSON record (then retry `guarded()`)."""
        return False

    def damaged_record_probe(self, record: str) -> str | None:
        """An always-false condition that makes the statement fail, as parsing would, on a
        record that is not JSON; None where not needed (see `delta_sql.stored_at`)."""
        return None

    def record_unreadable(self, record: str) -> str | None:
        """A condition true where a checkpoint record's channel versions cannot be read
        (guarded dialects; None: no check in the statement)."""
        return None

    def counters_column(self, column: str) -> str:
        """The metadata's counters_since_delta_snapshot object, as the driver returns JSON."""
        raise NotImplementedError

    def in_list(self, column: str, name: str) -> str:
        raise NotImplementedError

    def list_param(self, values: Sequence[Any]) -> Any:
        raise NotImplementedError

    def metadata_filter(self, column: str, key_name: str, value_name: str, value: Any) -> str:
        """SQL true where the metadata's value at the bound path `key_name` is JSON-equal
        (`checkpointer.savers.metadata`) to the bound `value_name`; the text may depend on
        the filter value's JSON type, never on the value itself."""
        raise NotImplementedError

    def metadata_filter_params(self, key: str, value: Any) -> tuple[Any, Any]:
        raise NotImplementedError

    def check_metadata(self, text: str) -> str:
        """Metadata JSON text as the metadata column stores it (PostgreSQL jsonb cannot
        hold NUL: see `metadata.escape_json_text`)."""
        return text

    def typed(self, expr: str, kind: str) -> str:
        """An expression cast to `kind` (text, float, bigint, int, ts, bool) where the
        database cannot infer a bare parameter's type (PostgreSQL); as is elsewhere."""
        return expr

    def ts_param(self, when: datetime) -> Any:
        """A timestamp as the summary table stores it."""
        raise NotImplementedError

    def decode_ts(self, value: Any) -> datetime | None:
        raise NotImplementedError

    def add_seconds(self, ts: str, seconds: str) -> str:
        """SQL for the timestamp `ts` plus `seconds` (both SQL expressions)."""
        raise NotImplementedError

    def greatest(self, *values: str) -> str:
        """The largest of SQL expressions that are never NULL (each written once)."""
        raise NotImplementedError

    def least(self, *values: str) -> str:
        """The smallest of SQL expressions that are never NULL (each written once)."""
        raise NotImplementedError

    def size(self, column: str, *, text: bool = False) -> str:
        """Stored payload bytes of a value column (`text=True`: UTF-8 bytes of a JSON/text
        column). The one definition of "bytes" the summaries and reports use."""
        raise NotImplementedError

    def json_field(self, column: str, key: str) -> str:
        """A top-level field of a JSON column as text (`key` is a constant of ours)."""
        raise NotImplementedError

    def ids_table(self, name: str) -> str:
        """A subquery with one row (column `tid`) per value of the list parameter `name`."""
        raise NotImplementedError

    def lock_thread(self, thread_id: str) -> Stmt | None:
        """A statement that makes concurrent writers of the thread wait until the current
        transaction ends (None where the transaction already excludes them: SQLite's
        BEGIN IMMEDIATE)."""
        return None

    def insert_blobs(self, thread_id: str, rows: list[tuple[str, str, str, str, bytes]]) -> Stmt:
        """Insert (ns, channel, version, type, blob) rows that do not exist yet."""
        raise NotImplementedError

    def checkpoint_upsert_values(self) -> str:
        """The SET list when a checkpoint is written again."""
        return (
            "checkpoint = excluded.checkpoint, metadata = excluded.metadata, "
            "run_id = excluded.run_id"
        )

    # Statements whose shape differs (bulk inserts) are built by the dialect.
    def put_plan(
        self,
        thread_id: str,
        ns: str,
        checkpoint_id: str,
        parent_id: str | None,
        run_id: str | None,
        record: str,
        metadata: str,
        blobs: list[tuple[str, str, str, bytes]],
        now: datetime,
        tails: Sequence[TailRow] = (),
    ) -> Op[None]:
        """Blobs, tails (each written whole instead if its base is not stored, see
        `tails.py`), the checkpoint and the thread summary, in one transaction."""
        raise NotImplementedError

    def put_writes_plan(
        self,
        thread_id: str,
        ns: str,
        checkpoint_id: str,
        task_id: Any,
        task_path: str,
        rows: list[tuple[int, str, str, bytes]],
        replace: bool,
        now: datetime,
        task_name: str | None = None,
    ) -> Op[None]:
        """The writes and the thread summary, in one transaction (`task_name`: see
        `Dialect.task_name`)."""
        raise NotImplementedError

    def delete_keys(self, table: str, columns: Sequence[str], keys: list[tuple[Any, ...]]) -> Stmt:
        raise NotImplementedError

    def delete_thread_plan(self, thread_id: str) -> Op[None]:
        raise NotImplementedError

    def copy_thread_plan(self, source: str, target: str) -> Op[None]:
        raise NotImplementedError

    # Schema management.
    def version_plan(self) -> Plan[str | None]:
        raise NotImplementedError

    def setup_plan(self) -> Plan[None]:
        raise NotImplementedError

    def file_setup_plan(self) -> Plan[None] | None:
        """Settings of the database file itself, run by `setup()` before `setup_plan` and
        outside its transaction (SQLite: WAL, incremental auto-vacuum). None when the
        backend has none. Never run on an ordinary connection: changing them takes the
        write lock, which a read must never need."""
        return None

    def describe(self) -> str:
        """Names the database in errors."""
        return self.name
