"""What the inspection plans share: the SQL that differs per dialect, and reading rows back.

The plans (`inspect_threads`, `inspect_tree`, `inspect_raw`, `inspect_stats`) run one text
on SQLite and PostgreSQL; only a few fragments (byte lengths, JSON fields, list aggregates)
differ, and they are spelled here, in `InspectSql`. Numbers and JSON documents come back
differently from the two drivers and are read here too. A stored `DeltaSnapshot` is told by
its first bytes, so SQL can count snapshots without loading any value.
"""

from __future__ import annotations

import io
import json
from typing import Any

from checkpointer.channels.markers import DeltaSnapshot
from checkpointer.savers.metadata import unescape_json_value
from checkpointer.savers.sql.dialect import Dialect
from checkpointer.serde import default_serializer


def _snapshot_prefix() -> bytes:
    """The bytes every stored `DeltaSnapshot` starts with (its msgpack extension marker),
    so SQL can tell snapshots from other values without loading them."""
    serde = default_serializer()
    a = serde.dumps_typed(DeltaSnapshot(None))[1]
    b = serde.dumps_typed(DeltaSnapshot([1]))[1]
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


SNAPSHOT_PREFIX = _snapshot_prefix()
COMPRESSED_MSGPACK = "msgpack+zstd"


def snapshot_marked(type_: str, blob: bytes) -> bool:
    """Whether a stored value is a `DeltaSnapshot`, told from its first bytes; a
    compressed value has only its first bytes decompressed."""
    if type_ == "msgpack":
        return bytes(blob[: len(SNAPSHOT_PREFIX)]) == SNAPSHOT_PREFIX
    if type_ != COMPRESSED_MSGPACK:
        return False
    try:
        import zstandard

        with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(bytes(blob))) as reader:
            head = reader.read(len(SNAPSHOT_PREFIX))
    except Exception:  # a corrupt frame is not a snapshot we can tell
        return False
    return bytes(head) == SNAPSHOT_PREFIX


class InspectSql:
    """The fragments that differ between SQLite and PostgreSQL for these queries."""

    def __init__(self, d: Dialect) -> None:
        self.d = d
        self.pg = d.name == "postgresql"

    def size(self, column: str, *, json_column: bool = False) -> str:
        """Stored payload bytes of a column (UTF-8 bytes for JSON/text)."""
        if self.pg:
            return f"octet_length({column}::text)" if json_column else f"octet_length({column})"
        return f"length(CAST({column} AS BLOB))"

    def record_size(self, alias: str = "") -> str:
        prefix = f"{alias}." if alias else ""
        return (
            f"({self.size(prefix + 'checkpoint', json_column=True)} + "
            f"{self.size(prefix + 'metadata', json_column=True)})"
        )

    def field(self, column: str, key: str) -> str:
        """A top-level JSON field as SQL text/number (`key` is a constant of ours)."""
        if self.pg:
            return f"({column} ->> '{key}')"
        return f"json_extract({column}, '$.{key}')"

    def distinct_list(self, column: str) -> str:
        if self.pg:
            return f"array_agg(DISTINCT {column})"
        return f"json_group_array(DISTINCT {column})"

    def list_value(self, value: Any) -> list[Any]:
        if value is None:
            return []
        if isinstance(value, str):
            return list(json.loads(value))
        return list(value)

    def is_snapshot(self, column: str) -> str:
        prefix = f"substr({column}, 1, {len(SNAPSHOT_PREFIX)})"
        return f"(type = 'msgpack' AND {prefix} = {self.d.p('snap')})"

    def where_thread(self, thread_id: str | None, params: dict[str, Any]) -> str:
        if thread_id is None:
            return ""
        params["thread_id"] = thread_id
        return f" WHERE thread_id = {self.d.p('thread_id')}"


def as_int(value: Any) -> int:
    """SUM() comes back as Decimal on PostgreSQL and None over no rows."""
    return int(value or 0)


def as_opt_int(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def json_doc(value: Any, *, metadata: bool = False) -> dict[str, Any]:
    """A JSON column as a dict: jsonb arrives parsed (psycopg), SQLite gives text. For the
    metadata column, PostgreSQL's NUL escapes are undone (`metadata.escape_json_text`)."""
    if value is None:
        return {}
    if isinstance(value, str | bytes):
        parsed = json.loads(value)
        return parsed if isinstance(parsed, dict) else {}
    return dict(unescape_json_value(value)) if metadata else dict(value)
