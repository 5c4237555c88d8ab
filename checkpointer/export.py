"""Portable JSONL backups of threads: `checkpointer export` and `checkpointer import`.

One JSON object per line. The first line is a header naming the format and its version;
then every checkpoint row, channel value (blob) and pending write of the exported threads;
the last line is an `end` record with the counts, so a truncated file is refused instead of
half-imported. Values are carried exactly as stored: the serializer's `(type, bytes)` pair
as `"type"` plus base64 `"data"`, never re-encoded, so an import reproduces every value
bit for bit on any backend (SQLite to PostgreSQL and back), whatever classes the values
name. Writes keep their task id, task path and slot (`idx`).

    {"format": "checkpointer-export", "version": 2, "serializer": "checkpointer-msgpack", ...}
    {"kind": "checkpoint", "thread_id": "t1", "checkpoint_ns": "", "checkpoint_id": "...",
     "parent_checkpoint_id": null, "run_id": "...", "checkpoint": {...}, "metadata": {...}}
    {"kind": "blob", "thread_id": "t1", "checkpoint_ns": "", "channel": "messages",
     "version": "...", "type": "msgpack", "data": "kscAMJA="}
    {"kind": "blob", ..., "version": "...", "type": "tail+msgpack", "data": "...",
     "base": "..."}
    {"kind": "write", "thread_id": "t1", "checkpoint_ns": "", "checkpoint_id": "...",
     "task_id": "...", "task_path": "chat", "idx": 0, "channel": "messages",
     "type": "msgpack", "data": "..."}
    {"kind": "end", "threads": 1, "checkpoints": 12, "blobs": 30, "writes": 41}

A blob record with a `"base"` is a tail row (`savers/sql/tails.py`): its value is the
value stored at version `base` of the same channel (a list, or a list inside a marker such
as a delta snapshot) with the items in its data appended to that list; the file carries
the base record too, and an import refuses a tail whose base it lacks.

An import runs in one transaction: it lands completely or not at all.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol, TextIO

from checkpointer.errors import CheckpointerError, ConfigError, CorruptValueError
from checkpointer.savers.sql.dialect import Dialect
from checkpointer.savers.sql.inspect import (
    all_thread_ids_plan,
    existing_threads_plan,
    footprint_plan,
)
from checkpointer.savers.sql.plan import Plan
from checkpointer.savers.sql.records import decode_checkpoint, decode_metadata
from checkpointer.savers.sql.tails import TAIL_PREFIX, has_tails_stmt, is_tail, orphan_tails_stmt
from checkpointer.savers.sql.transfer import (
    BlobRow,
    CheckpointRow,
    WriteRow,
    blobs_page_plan,
    checkpoints_page_plan,
    insert_rows_plan,
    refresh_thread_summaries_plan,
    writes_page_plan,
)
from checkpointer.types import check_id, utc_now_iso

FORMAT = "checkpointer-export"
VERSION = 4
"""2: checkpoint records may keep small values inline (`channel_values`, see
`savers/sql/inline.py`), which a reader of version 1 would drop. 3: blob records may be
tail rows (`"base"`), which a reader of version 2 would store without their base (its
reads would then fail on every such value). 4: a tail may continue a list inside payload
markers (a delta channel's snapshot, schema revision 0011), which a reader of version 3
would join into a wrong value. A file says 4 only when it holds a tail, so exports
without tails still import into earlier versions. Files of versions 1 to 3 import as
before."""
TAILS_VERSION = 4
"""What a file holding tail rows (blob records with a `"base"`) says."""
PLAIN_VERSION = 2
"""What a file without tail rows says."""
SERIALIZER = "checkpointer-msgpack"
PAGE_SIZE = 500
BATCH_SIZE = 500


class ExportFormatError(CheckpointerError, ValueError):
    """An export file is not one this version can import (or is damaged)."""


@dataclass(slots=True)
class TransferCounts:
    threads: int = 0
    checkpoints: int = 0
    blobs: int = 0
    writes: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class PlanRunner(Protocol):
    """What export and import need of a database: its dialect and a way to run plans
    (`checkpointer.inspect.Database` is one)."""

    @property
    def dialect(self) -> Dialect: ...

    def run(self, plan: Plan[Any], *, txn: bool = False) -> Any: ...


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _line(record: dict[str, Any]) -> str:
    # ASCII-only: lone surrogates in metadata survive, and the file is plain 7-bit text.
    return json.dumps(record, ensure_ascii=True, separators=(",", ":")) + "\n"


def checkpoint_record(row: CheckpointRow) -> dict[str, Any]:
    return {
        "kind": "checkpoint",
        "thread_id": row.thread_id,
        "checkpoint_ns": row.checkpoint_ns,
        "checkpoint_id": row.checkpoint_id,
        "parent_checkpoint_id": row.parent_checkpoint_id,
        "run_id": row.run_id,
        "checkpoint": row.checkpoint,
        "metadata": row.metadata,
    }


def blob_record(row: BlobRow) -> dict[str, Any]:
    record = {
        "kind": "blob",
        "thread_id": row.thread_id,
        "checkpoint_ns": row.checkpoint_ns,
        "channel": row.channel,
        "version": row.version,
        "type": row.type,
        "data": _b64(row.blob),
    }
    if row.base_version is not None:
        record["base"] = row.base_version
    return record


def write_record(row: WriteRow) -> dict[str, Any]:
    return {
        "kind": "write",
        "thread_id": row.thread_id,
        "checkpoint_ns": row.checkpoint_ns,
        "checkpoint_id": row.checkpoint_id,
        "task_id": row.task_id,
        "task_path": row.task_path,
        "idx": row.idx,
        "channel": row.channel,
        "type": row.type,
        "data": _b64(row.blob),
    }


# --------------------------------------------------------------------------- export
def has_tails_stmt_plan(d: Dialect, thread_ids: Sequence[str] | None) -> Plan[bool]:
    """Whether the threads (every thread: None) hold a tail row, so the file needs
    version `TAILS_VERSION`."""
    rows = yield has_tails_stmt(d, thread_ids)
    return bool(rows)


def export_threads(
    db: PlanRunner,
    thread_ids: Sequence[str] | None,
    out: TextIO,
    *,
    page_size: int = PAGE_SIZE,
    on_thread: Callable[[str, TransferCounts], None] | None = None,
) -> TransferCounts:
    """Write the threads (all when None) to `out` as JSONL; returns what was written.
    Each thread is read page by page, so memory stays bounded on threads of any size."""
    d = db.dialect
    if thread_ids is None:
        threads: list[str] = db.run(all_thread_ids_plan(d))
    else:
        threads = list(dict.fromkeys(thread_ids))
    counts = TransferCounts()
    tails = db.run(has_tails_stmt_plan(d, None if thread_ids is None else threads))
    out.write(
        _line(
            {
                "format": FORMAT,
                "version": TAILS_VERSION if tails else PLAIN_VERSION,
                "serializer": SERIALIZER,
                "created_at": utc_now_iso(),
                "source": d.name,
                "threads": threads,
            }
        )
    )
    for thread_id in threads:
        cp_after: tuple[str, str] | None = None
        while True:
            rows = db.run(checkpoints_page_plan(d, thread_id, cp_after, page_size))
            out.writelines(_line(checkpoint_record(r)) for r in rows)
            counts.checkpoints += len(rows)
            if len(rows) < page_size:
                break
            cp_after = (rows[-1].checkpoint_ns, rows[-1].checkpoint_id)
        blob_after: tuple[str, str, str] | None = None
        while True:
            blobs = db.run(blobs_page_plan(d, thread_id, blob_after, page_size))
            out.writelines(_line(blob_record(r)) for r in blobs)
            counts.blobs += len(blobs)
            if len(blobs) < page_size:
                break
            blob_after = (blobs[-1].checkpoint_ns, blobs[-1].channel, blobs[-1].version)
        write_after: tuple[str, str, str, int] | None = None
        while True:
            writes = db.run(writes_page_plan(d, thread_id, write_after, page_size))
            out.writelines(_line(write_record(r)) for r in writes)
            counts.writes += len(writes)
            if len(writes) < page_size:
                break
            last = writes[-1]
            write_after = (last.checkpoint_ns, last.checkpoint_id, last.task_id, last.idx)
        counts.threads += 1
        if on_thread is not None:
            on_thread(thread_id, counts)
    out.write(_line({"kind": "end", **counts.as_dict()}))
    return counts


# --------------------------------------------------------------------------- import
def read_header(line: str) -> dict[str, Any]:
    """The header of an export file, checked: right format, a version we can read."""
    try:
        header = json.loads(line)
    except ValueError as exc:
        raise ExportFormatError(f"not a checkpointer export (line 1 is not JSON: {exc})") from exc
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ExportFormatError(f"not a checkpointer export (line 1 has no format {FORMAT!r})")
    version = header.get("version")
    if not isinstance(version, int) or version > VERSION or version < 1:
        raise ExportFormatError(
            f"export format version {version!r} is not supported (this version reads "
            f"1..{VERSION}); upgrade checkpointer"
        )
    if header.get("serializer", SERIALIZER) != SERIALIZER:
        raise ExportFormatError(f"values were written by serializer {header.get('serializer')!r}")
    threads = header.get("threads")
    if not isinstance(threads, list) or not all(isinstance(t, str) for t in threads):
        raise ExportFormatError("the header does not list the exported threads")
    for thread_id in threads:
        _checked_id(thread_id, "header thread id", 1)
    return header


_ID_KEYS = frozenset(
    ("thread_id", "checkpoint_ns", "checkpoint_id", "parent_checkpoint_id", "run_id",
     "task_id", "task_path")
)  # fmt: skip
"""Record fields that are ids: held to the savers' id rule (`types.check_id`)."""


def _checked_id(value: str, key: str, n: int) -> str:
    try:
        return check_id(value, key)
    except ConfigError as exc:
        raise ExportFormatError(f"line {n}: {exc}") from exc


def _text(value: str, key: str, n: int) -> str:
    """A string a database can store as text: no lone surrogate (not UTF-8)."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ExportFormatError(f"line {n}: {key!r} is not valid UTF-8") from exc
    return value


def _str(record: dict[str, Any], key: str, n: int) -> str:
    value = record.get(key)
    if not isinstance(value, str):
        raise ExportFormatError(f"line {n}: {record.get('kind')} record needs a string {key!r}")
    return _checked_id(value, key, n) if key in _ID_KEYS else _text(value, key, n)


def _opt_str(record: dict[str, Any], key: str, n: int) -> str | None:
    value = record.get(key)
    if value is not None and not isinstance(value, str):
        raise ExportFormatError(f"line {n}: {key!r} must be a string or null")
    if value is not None and key in _ID_KEYS:
        return _checked_id(value, key, n)
    return value if value is None else _text(value, key, n)


def _data(record: dict[str, Any], n: int) -> bytes:
    try:
        return base64.b64decode(_str(record, "data", n), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ExportFormatError(f"line {n}: 'data' is not valid base64") from exc


def _dict(record: dict[str, Any], key: str, n: int) -> dict[str, Any]:
    value = record.get(key)
    if not isinstance(value, dict):
        raise ExportFormatError(f"line {n}: {key!r} must be an object")
    return value


def _checked(doc: dict[str, Any], n: int, *, record: bool) -> dict[str, Any]:
    """`doc` unchanged, once the savers' decoder accepts its shape (a checkpoint record,
    or metadata): what no saver could read back is refused here, not met on a later read."""
    try:
        if record:
            decode_checkpoint(dict(doc), "", {})
        else:
            decode_metadata(dict(doc))
    except CorruptValueError as exc:
        raise ExportFormatError(f"line {n}: {exc.reason}") from exc
    return doc


def import_plan(
    d: Dialect,
    lines: Iterable[str],
    *,
    replace: bool = False,
    counts: TransferCounts | None = None,
    on_line: Callable[[int], None] | None = None,
) -> Plan[TransferCounts]:
    """Insert an export file's rows. Run it in ONE transaction: any problem (a damaged
    line, a missing end record, a thread that exists without `replace`) rolls it all back.

    `on_line(n)` is called with the size of each line read, for progress reporting.
    """
    counts = counts if counts is not None else TransferCounts()
    it = iter(lines)
    first = next(it, None)
    if first is None:
        raise ExportFormatError("the export file is empty")
    if on_line is not None:
        on_line(len(first))
    header = read_header(first)
    threads: list[str] = list(dict.fromkeys(header["threads"]))
    wanted = set(threads)
    existing = yield from existing_threads_plan(d, threads)
    if existing and not replace:
        names = ", ".join(repr(t) for t in sorted(existing))
        raise CheckpointerError(
            f"thread(s) {names} already exist in the target; pass --replace to overwrite them"
        )
    for thread_id in sorted(existing):
        delete_thread_plan = getattr(d, "delete_thread_plan")  # noqa: B009 - both dialects
        yield from delete_thread_plan(thread_id).plan
    checkpoints: list[CheckpointRow] = []
    blobs: list[BlobRow] = []
    writes: list[WriteRow] = []
    with_checkpoints: set[str] = set()
    end: dict[str, Any] | None = None
    for n, line in enumerate(it, start=2):
        if on_line is not None:
            on_line(len(line))
        if not line.strip():
            continue
        if end is not None:
            raise ExportFormatError(f"line {n}: data after the end record")
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise ExportFormatError(f"line {n}: not JSON ({exc})") from exc
        if not isinstance(record, dict):
            raise ExportFormatError(f"line {n}: expected a JSON object")
        kind = record.get("kind")
        if kind == "end":
            end = record
            continue
        thread_id = _str(record, "thread_id", n)
        if thread_id not in wanted:
            raise ExportFormatError(f"line {n}: thread {thread_id!r} is not in the header")
        ns = _str(record, "checkpoint_ns", n)
        if kind == "checkpoint":
            with_checkpoints.add(thread_id)
            checkpoints.append(
                CheckpointRow(
                    thread_id,
                    ns,
                    _str(record, "checkpoint_id", n),
                    _opt_str(record, "parent_checkpoint_id", n),
                    _opt_str(record, "run_id", n),
                    _checked(_dict(record, "checkpoint", n), n, record=True),
                    _checked(_dict(record, "metadata", n), n, record=False),
                )
            )
        elif kind == "blob":
            type_ = _str(record, "type", n)
            base = _opt_str(record, "base", n)
            if (base is not None) != is_tail(type_):
                raise ExportFormatError(
                    f"line {n}: a blob record has a 'base' exactly when its type starts "
                    f"with {TAIL_PREFIX!r} (got type {type_!r}, base {base!r})"
                )
            blobs.append(
                BlobRow(
                    thread_id,
                    ns,
                    _str(record, "channel", n),
                    _str(record, "version", n),
                    type_,
                    _data(record, n),
                    base,
                )
            )
        elif kind == "write":
            idx = record.get("idx")
            if not isinstance(idx, int) or isinstance(idx, bool):
                raise ExportFormatError(f"line {n}: 'idx' must be an integer")
            task_id = _str(record, "task_id", n)
            try:
                d.encode_write_key(task_id, idx)
            except ValueError as exc:
                raise ExportFormatError(f"line {n}: {exc}") from exc
            writes.append(
                WriteRow(
                    thread_id,
                    ns,
                    _str(record, "checkpoint_id", n),
                    task_id,
                    idx,
                    _str(record, "task_path", n),
                    _str(record, "channel", n),
                    _str(record, "type", n),
                    _data(record, n),
                )
            )
        else:
            raise ExportFormatError(f"line {n}: unknown record kind {kind!r}")
        if len(checkpoints) + len(blobs) + len(writes) >= BATCH_SIZE:
            yield from _flush(d, counts, checkpoints, blobs, writes)
    yield from _flush(d, counts, checkpoints, blobs, writes)
    if end is None:
        raise ExportFormatError("the export file is truncated: it has no end record")
    expected = {k: end.get(k) for k in ("checkpoints", "blobs", "writes")}
    got = {"checkpoints": counts.checkpoints, "blobs": counts.blobs, "writes": counts.writes}
    if expected != got:
        raise ExportFormatError(
            f"the export file is damaged: the end record says {expected}, the file holds {got}"
        )
    empty = [t for t in threads if t not in with_checkpoints]
    if empty:
        # With --replace the thread was deleted above: importing "nothing" for it would
        # lose it. The transaction rolls back.
        names = ", ".join(repr(t) for t in empty)
        raise ExportFormatError(
            f"the export file lists thread(s) {names} in its header but holds no checkpoint "
            "of them; refusing it (nothing was imported or deleted)"
        )
    orphans = yield orphan_tails_stmt(d, threads)
    if orphans:
        t, ns, channel, version = orphans[0]
        raise ExportFormatError(
            f"the export file is damaged: the value of channel {channel!r} at version "
            f"{version!r} (thread {t!r}, namespace {ns!r}) continues a list whose record is "
            "not in the file; nothing was imported"
        )
    stored = yield from footprint_plan(d, threads)
    kept = {
        "checkpoints": len(stored.checkpoints),
        "blobs": sum(stored.blobs.values()),
        "writes": sum(stored.writes.values()),
    }
    if kept != got:
        # Rows with the same key twice: the database kept one of each, so the file is not
        # what an export writes; which copy should win is not ours to guess.
        extra = {k: got[k] - kept[k] for k in got if got[k] != kept[k]}
        raise ExportFormatError(
            "the export file is damaged: it repeats records with the same key "
            f"({', '.join(f'{n} duplicate {k}' for k, n in extra.items())}); "
            "nothing was imported"
        )
    yield from refresh_thread_summaries_plan(d, threads)
    counts.threads = len(threads)
    return counts


def _flush(
    d: Dialect,
    counts: TransferCounts,
    checkpoints: list[CheckpointRow],
    blobs: list[BlobRow],
    writes: list[WriteRow],
) -> Plan[None]:
    yield from insert_rows_plan(d, checkpoints, blobs, writes)
    counts.checkpoints += len(checkpoints)
    counts.blobs += len(blobs)
    counts.writes += len(writes)
    checkpoints.clear()
    blobs.clear()
    writes.clear()


def import_threads(
    db: PlanRunner,
    lines: Iterable[str],
    *,
    replace: bool = False,
    on_line: Callable[[int], None] | None = None,
) -> TransferCounts:
    """Import an export file (its lines) into `db`, in one transaction."""
    counts = TransferCounts()
    db.run(
        import_plan(db.dialect, lines, replace=replace, counts=counts, on_line=on_line), txn=True
    )
    return counts
