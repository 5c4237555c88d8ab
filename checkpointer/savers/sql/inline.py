"""Small scalar channel values kept in the checkpoint record instead of value rows.

A graph's state is mostly small scalars (counters, flags, short strings, `None` for a
triggered edge) beside one or two large values. Stored as value rows, each costs a row and
an index entry per change (more than the value) and one more row to read back for every
checkpoint. The SQL savers keep them in the record, under `channel_values`:

    {"v": 4, "ts": "...", "channel_versions": {...}, ..., "channel_values": {"turn": 3}}

Rules:
- Only `None`, `bool`, `int` within 64 bits and `str` of at most `INLINE_TEXT_MAX`
  characters without NUL (PostgreSQL's jsonb refuses it), of exactly those types: an
  `IntEnum` or a `str` subclass goes to a value row and keeps its class.
- The value of a channel at a version lives in one place, decided when the version is
  stored: a value row, or the records. A record holds the inline value of every channel at
  its version: those it stores now, and those of unchanged channels carried from its
  parent's record, or, at a version the parent's record does not hold (a `__copy__` fork
  put beside the checkpoint it copies, a re-put), from a record of the thread that holds
  it (`puts.inline_sources_stmt`). `put` is allowed to leave unchanged channels out of
  `channel_values`, so they are never taken from there. A reader never looks beyond one
  record.
- Only with a serializer whose stored form of these values is plain
  (`stores_scalars_inline`: the msgpack serializer and wrappers that keep its bytes). An
  encrypting one seals every value. Records written before are read through the
  serializer in force, each inline value as the value row it stands for
  (`stored_form`): a serializer refusing plaintext refuses it, and `reencrypt` moves it
  into a sealed value row.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from checkpointer.errors import CorruptValueError
from checkpointer.serde import Serializer
from checkpointer.serde.located import is_located

RECORD_KEY = "channel_values"
INLINE_TEXT_MAX = 64
INLINE_STORED_MAX = 4 * INLINE_TEXT_MAX + 3
"""The most bytes the stored form of an inline value takes (64 four-byte characters and
a msgpack header)."""
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
SCALAR_TYPES = frozenset((type(None), bool, int, str))
"""The exact types of inline values."""

Inline = dict[str, Any]
Versions = Mapping[str, Any]
Parent = tuple[Versions, Inline, Mapping[str, str]]
"""A parent checkpoint as a put needs it: versions, inline values, tail hints (`tails.py`)."""


def serde_inlines(serde: Serializer) -> bool:
    """Whether values written through `serde` may go into records."""
    return getattr(serde, "stores_scalars_inline", False) is True and not is_located(serde)


def inlinable(value: Any) -> bool:
    kind = type(value)
    if kind is str:
        if len(value) > INLINE_TEXT_MAX or "\x00" in value:
            return False
        if value.isascii():
            return True
        try:
            value.encode("utf-8")  # a lone surrogate cannot go into a JSON text column
        except UnicodeEncodeError:
            return False
        return True
    if kind is int:
        return _INT_MIN <= value <= _INT_MAX
    return value is None or kind is bool


def carried(parent: Parent | None, versions: Versions, unchanged: set[str]) -> Inline:
    """The parent's inline values of the `unchanged` channels still at the same version."""
    if parent is None:
        return {}
    parent_versions, parent_inline = parent[0], parent[1]
    return {
        ch: value
        for ch, value in parent_inline.items()
        if ch in unchanged and ch in versions and parent_versions.get(ch) == versions[ch]
    }


_FROM_SQL: dict[str, Callable[[str], Any]] = {
    # SQLite json_each types, then PostgreSQL jsonb_typeof ones.
    "null": lambda _: None,
    "true": lambda _: True,
    "false": lambda _: False,
    "integer": int,
    "text": str,
    "boolean": lambda text: text == "true",
    "number": int,
    "string": str,
}


def from_sql(kind: str, text: str | None, where: Mapping[str, str | None]) -> Any:
    """An inline value read in SQL as (JSON type, text) by `Dialect.inline_value`."""
    convert = _FROM_SQL.get(kind)
    try:
        if convert is None or (text is None and kind != "null"):
            raise ValueError(kind)
        return convert(text or "")
    except ValueError:
        raise CorruptValueError(
            f"checkpoint record holds an inline value of JSON type {kind!r}", **where
        ) from None


_PLAIN_NAME = re.compile(r"[0-9A-Za-z._:+~-]*")


def inline_probe(channel: str) -> str | None:
    """Text that a JSON record holding `channel` inline contains after its
    `"channel_values"` key, for a test cheaper than parsing it; None when the name has
    characters that JSON writers escape differently (the parse then decides)."""
    return f'"{channel}":' if _PLAIN_NAME.fullmatch(channel) else None


def stored_form(value: Any) -> tuple[str, bytes]:
    """The value row an inline value stands for: what the msgpack serializer stores."""
    from checkpointer.serde.msgpack_serde import default_serializer

    return default_serializer().dumps_typed(value)


def read_inline(
    fields: Mapping[str, Any],
    where: Mapping[str, str | None],
    load: Callable[[str, Any, Versions], Any] | None = None,
) -> Inline | None:
    """A parsed record's inline values (None if it has none), checked; `load(channel,
    value, channel_versions)` reads each through a serializer that does not take them as
    they are."""
    inline = fields.get(RECORD_KEY)
    if inline is None:
        return None
    if type(inline) is not dict or not SCALAR_TYPES.issuperset(map(type, inline.values())):
        raise CorruptValueError("checkpoint record channel_values is malformed", **where)
    if load is None:
        return inline
    versions = fields.get("channel_versions")
    versions = versions if type(versions) is dict else {}
    return {ch: load(ch, value, versions) for ch, value in inline.items()}


def inline_at_versions(
    fields: Mapping[str, Any], where: Mapping[str, str | None]
) -> list[tuple[str, str, Any]]:
    """(channel, version, value) of the values a parsed record keeps inline."""
    inline = read_inline(fields, where) or {}
    versions = fields.get("channel_versions")
    if type(versions) is not dict:
        return []
    return [(ch, str(versions[ch]), v) for ch, v in inline.items() if ch in versions]


class RecentInline:
    """The versions, inline values and tail hints of the checkpoints a saver wrote last, by
    (thread, namespace, checkpoint id): the next `put` on one of them carries them forward
    without reading the parent's record back. Bounded; cleared by deletes."""

    def __init__(self, size: int = 256) -> None:
        self._size = size
        self._entries: OrderedDict[tuple[str, str, str], Parent] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str, str]) -> Parent | None:
        with self._lock:
            return self._entries.get(key)

    def remember(
        self,
        key: tuple[str, str, str],
        versions: Versions,
        inline: Inline,
        tails: Mapping[str, str] | None = None,
    ) -> None:
        with self._lock:
            self._entries[key] = (dict(versions), inline, tails or {})
            self._entries.move_to_end(key)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
