"""Checkpoint records and metadata as the checkpoints table stores them (JSON), and the
checked decoding of both; the value decoders shared by reads and delta history."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from itertools import chain
from typing import Any

from checkpointer.errors import (
    CorruptValueError,
    SerializationError,
)
from checkpointer.savers.base import (
    CompactJsonEncoder,
    dumps_json,
    loads_json,
    metadata_counters_as_pairs,
)
from checkpointer.savers.metadata import NUL_ESCAPE as _ESCAPE_CHAR
from checkpointer.savers.metadata import unescape_json_value
from checkpointer.savers.sql.inline import RECORD_KEY as INLINE_KEY
from checkpointer.savers.sql.inline import (
    SCALAR_TYPES,
    read_inline,
    stored_form,
)
from checkpointer.savers.sql.record_seal import SEAL_KEY
from checkpointer.savers.sql.tails import TAILS_KEY
from checkpointer.serde import Serializer
from checkpointer.serde.located import ValueLocation, is_located, load_at
from checkpointer.types import (
    Checkpoint,
    CheckpointMetadata,
)


def encode_record(
    checkpoint: Checkpoint,
    inline: Mapping[str, Any] | None = None,
    seal: Callable[[Mapping[str, Any]], list[str]] | None = None,
    tails: Mapping[str, str] | None = None,
) -> str:
    """The checkpoint minus its values (and its id, which is a column), as JSON text, with
    the small scalar values `inline` (see `inline.py`) if any, the hints of values stored
    as tails (`tails.TAILS_KEY`) if any, and the record's seal (`record_seal.py`) when
    `seal` is given."""
    try:
        if seal is None:  # built in stored order: inline values first (see `record_json`)
            record: dict[str, Any] = {INLINE_KEY: inline} if inline else {}
            for k, v in checkpoint.items():
                if k != "channel_values" and k != "id":
                    record[k] = v
            if tails:
                record[TAILS_KEY] = tails
            return _encode_record(record)
        record = {k: v for k, v in checkpoint.items() if k not in ("channel_values", "id")}
        if inline:
            record[INLINE_KEY] = inline
        record[SEAL_KEY] = seal(record)
        return record_json(record)
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"checkpoint record is not JSON-serializable: {exc}") from exc


def record_json(record: Mapping[str, Any]) -> str:
    """A checkpoint record as every write stores it: compact JSON in key order, except
    that inline values come first (SQLite's delta walk looks for them at the start of the
    text only, see `SqliteDialect.inline_has`)."""
    if INLINE_KEY in record:
        record = {INLINE_KEY: record[INLINE_KEY], **record}
    return _encode_record(record)


_encode_record = CompactJsonEncoder(json.JSONEncoder(ensure_ascii=False, separators=(",", ":")))
"""`json.dumps(record, ensure_ascii=False, separators=(",", ":"))`, its encoder built once
per thread instead of on every put."""


def encode_metadata(metadata: Mapping[str, Any]) -> str:
    return dumps_json(metadata if type(metadata) is dict else dict(metadata))


def json_value(value: Any) -> Any:
    """jsonb comes back parsed (psycopg); SQLite gives text."""
    if isinstance(value, str | bytes):
        return json.loads(value)
    return value


Where = Mapping[str, str | None]
"""The location fields of a `CorruptValueError` (thread_id, checkpoint_ns, checkpoint_id)."""

_VERSION_TYPES = frozenset((str, int, float))
_STR = frozenset((str,))
_DICT = frozenset((dict,))
_dict_values = dict.values
_scan_json: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_NO_WHERE: Where = {}


def _json_type(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean"}.get(
        type(value), "null" if value is None else "number"
    )


def _scanned_object(text: str) -> dict[str, Any] | None:
    """`text` parsed by the C scanner when it is exactly one JSON object (as the savers
    write records and metadata), else None: `json_object` then parses it again for the
    value or the error. One call where `loads_json` + the checks made three."""
    try:
        value, end = _scan_json(text, 0)
    except (StopIteration, ValueError, RecursionError):
        return None
    return value if end == len(text) and type(value) is dict else None


def json_object(value: Any, what: str, where: Where) -> dict[str, Any]:
    """A JSON column as a dict, or CorruptValueError naming the record: the row was written
    around the saver (or damaged), and must not surface as a JSON or attribute error."""
    if type(value) is str:
        parsed = _scanned_object(value)
        if parsed is not None:
            return parsed
    if isinstance(value, str | bytes):
        try:
            value = loads_json(value)
        except (ValueError, RecursionError) as exc:
            raise CorruptValueError(f"{what} is not valid JSON ({exc})", **where) from exc
    if type(value) is not dict:
        raise CorruptValueError(f"{what} is not a JSON object (got {_json_type(value)})", **where)
    return value


def _is_versions(value: Any) -> bool:
    """A {channel: version} object (a version is a string or a number). The checks run in
    C (`map`, `issuperset`): these records are decoded on every read."""
    return type(value) is dict and _VERSION_TYPES.issuperset(map(type, value.values()))


def _is_versions_seen(value: Any) -> bool:
    """A {task: {channel: version}} object: `_is_versions` of every entry, in two passes in
    C instead of a Python call per entry."""
    if type(value) is not dict:
        return False
    entries = value.values()
    return _DICT.issuperset(map(type, entries)) and _VERSION_TYPES.issuperset(
        map(type, chain.from_iterable(map(_dict_values, entries)))
    )


def decode_metadata(
    value: Any, where: Where = _NO_WHERE, escaped: bool = False
) -> CheckpointMetadata:
    """The metadata column, checked for the one field the savers rely on (counters of the
    delta channels: an object of pairs); CorruptValueError otherwise. jsonb arrives parsed,
    or as text when `escaped` (see `metadata_escaped`), with PostgreSQL's NUL escapes
    undone here (SQLite's text holds NUL as it is). Escaped text that holds no escape
    character (U+FFFF, which jsonb's text form writes as it is) has nothing to undo: the
    walk over every key and string is skipped."""
    if type(value) is str and not (escaped and _ESCAPE_CHAR in value):
        parsed = _scanned_object(value)  # the common case, without the layers below
        if parsed is not None:
            if "counters_since_delta_snapshot" not in parsed:
                return parsed  # type: ignore[return-value]
            return metadata_counters_as_pairs(parsed, where)  # type: ignore[return-value]
    if not isinstance(value, str | bytes):
        value = unescape_json_value(value)
    elif escaped and (_ESCAPE_CHAR in value if type(value) is str else _ESCAPE_UTF8 in value):
        value = unescape_json_value(json_object(value, "metadata", where))
    return metadata_counters_as_pairs(json_object(value, "metadata", where), where)  # type: ignore[return-value]


_ESCAPE_UTF8 = _ESCAPE_CHAR.encode("utf-8")


def metadata_escaped(d: Any) -> bool:
    """Whether dialect `d` stores metadata with NUL escaped (`Dialect.check_metadata`
    changes the escape character: PostgreSQL's jsonb), so read text must be unescaped."""
    return bool(d.check_metadata(_ESCAPE_CHAR) != _ESCAPE_CHAR)


def decode_checkpoint(
    record: Any,
    checkpoint_id: str,
    values: dict[str, Any],
    where: Where = _NO_WHERE,
    load_inline: Callable[[str, Any, Mapping[str, Any]], Any] | None = None,
    verify: Callable[[dict[str, Any]], None] | None = None,
) -> Checkpoint:
    """The checkpoint column plus its id and values: the value rows' `values` and the
    record's inline ones (read through `load_inline` when given). Type checks only, one
    level deep (on the hot path of every read): a record of the wrong shape is a
    CorruptValueError naming the field, not a TypeError somewhere in the runtime later."""
    fields = json_object(record, "checkpoint record", where)
    if verify is not None:  # a located serializer: check (and drop) the record's seal
        verify(fields)
    elif SEAL_KEY in fields:
        del fields[SEAL_KEY]
    if TAILS_KEY in fields:
        del fields[TAILS_KEY]
    inline = fields.get(INLINE_KEY)
    if inline is not None:
        if (
            load_inline is not None
            or type(inline) is not dict
            or not SCALAR_TYPES.issuperset(map(type, inline.values()))
        ):
            inline = read_inline(fields, where, load_inline)  # checked, or loaded
        if not values:
            values.update(inline)  # type: ignore[arg-type]
        elif inline:  # value rows first, as they came
            values.update({ch: v for ch, v in inline.items() if ch not in values})
    versions = fields.setdefault("channel_versions", {})
    if not _is_versions(versions):
        raise CorruptValueError("checkpoint record channel_versions is malformed", **where)
    if not _is_versions_seen(fields.setdefault("versions_seen", {})):
        raise CorruptValueError("checkpoint record versions_seen is malformed", **where)
    updated = fields.setdefault("updated_channels", None)
    if updated is not None and (
        type(updated) is not list or not _STR.issuperset(map(type, updated))
    ):
        raise CorruptValueError("checkpoint record updated_channels is malformed", **where)
    fields["id"] = checkpoint_id
    fields["channel_values"] = values
    return fields  # type: ignore[return-value]


def version_text(version: Any) -> str:
    """The text form of a channel version, as the blob key stores it."""
    return str(version)


def inline_loader(
    serde: Serializer, thread_id: str, ns: str, where: Where
) -> Callable[[str, Any, Mapping[str, Any]], Any]:
    """Reads a record's inline values through a serializer that does not keep values
    inline (encryption): each as the value row it stands for, at that row's location, so a
    serializer refusing plaintext refuses it."""
    located = is_located(serde)

    def load(channel: str, value: Any, versions: Mapping[str, Any]) -> Any:
        version = version_text(versions.get(channel))
        location = ValueLocation.blob(thread_id, ns, channel, version) if located else None
        return load_at(serde, stored_form(value), location, **where, channel=channel)

    return load


def write_value(
    fast: Callable[[tuple[str, bytes]], Any] | None,
    read: Callable[..., Any],
    located: bool,
    data: tuple[str, bytes],
    thread_id: str,
    ns: str,
    checkpoint_id: str,
    task_id: str,
    idx: int,
    channel: str,
) -> Any:
    """A pending write's value: through the batch loader `fast` when there is one, else
    (or when it fails) through `read` at the write's location, whose error names it. Plain
    arguments, no dicts: this runs for every write of a history or a page."""
    if fast is not None:
        try:
            return fast(data)
        except Exception:
            pass
    location = (
        ValueLocation.write(thread_id, ns, checkpoint_id, task_id, idx, channel)
        if located
        else None
    )
    return read(
        data,
        location,
        thread_id=thread_id,
        checkpoint_ns=ns,
        checkpoint_id=checkpoint_id,
        channel=channel,
        task_id=task_id,
    )
