"""Decoded stored values of the in-memory saver, kept to hand each read a fresh copy.

A stored value never changes: the saver keeps its serialized form as an immutable
`(tag, bytes)` pair, and a new value is a new pair. So once a pair is decoded, later reads
of that very pair (the head read by every `get_state`, a page of `list`) can be answered
from the decoded form, if the copy handed out is fresh (no caller ever shares a mutable
object with the saver or another caller) and costs less than decoding again.

Only values whose fresh copy is cheap and exact are kept (`copier_for`): immutable scalars
(handed out as they are), a dict or list of scalars (one C copy), a list of such dicts (a
chat history: one C copy per message, 5x faster than ormsgpack decodes it), a dict of
those (metadata), and a `DeltaSnapshot` of those. Small values of other shapes that
ormsgpack reads exactly as the serializer does (no extension in them, one object: checked
once per pair) are read by ormsgpack from then on (a checkpoint record: a quarter of the
serializer's cost with its hooks). Anything else (class instances, tuples, sets, values
of codecs, compressed or sealed bytes) is decoded on every read, as before. Metadata is
kept by the identity of its stored JSON text, decoded as `stored_metadata` does.

A checkpoint read entirely from kept values gets a `_Template`, so that reading it again
(`list` of a thread) makes its tuple parts without looking each value up; each read checks
the template still holds (see the class).

Lists grow by appending (LangGraph's `add_messages`, `operator.add`): each version of a
channel stores the previous one's items plus a few. Per (thread, namespace, channel) the
latest list decoded is kept as a *base*, with where each of its items ends in its bytes.
A stored list whose items' bytes are a prefix of the base's, ending on an item boundary,
holds exactly the base's first items (msgpack is read front to back, and the same bytes
give the same objects); one whose bytes extend the base's holds its items plus what its
remaining bytes decode to (by `fast_path._load_plain`, whose results are the usual path's).
So a `list` of a thread of 1,000 growing histories decodes the newest and compares bytes
for the others, and a chat loop's next read decodes only the new messages. The kept lists
share their (never handed out) items with the base.

Entries are keyed by the stored pair's identity and hold the pair, so a key cannot be
reused while its entry lives; the cache is bounded by `CHECKPOINTER_VALUE_CACHE_BYTES`
(see `serde.value_cache`; 0 disables) and forgets the oldest entries first. It is only used
with a `MsgpackSerializer` (any settings: plain data decodes alike under every class
policy), and every method expects the caller to hold the saver's lock.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from operator import attrgetter
from typing import Any, Final

import msgpack

from checkpointer.savers.base import loads_json, metadata_counters_as_pairs
from checkpointer.savers.memory_store import BlobKey, StoredCheckpoint, ordered_writes
from checkpointer.serde.fast_path import (
    _NOT_PLAIN,
    _array_head,
    _is_one_object,
    _load_plain,
    _plain_unpackb,
    array_header,
)
from checkpointer.serde.fresh_copy import Copier, copier_for
from checkpointer.serde.fresh_copy import copy_records as _copy_records
from checkpointer.serde.fresh_copy import is_record as _is_record
from checkpointer.serde.fresh_copy import same as _same
from checkpointer.serde.value_cache import max_bytes_from_env
from checkpointer.serde.value_types import EXT_CODEC, TAG_BYTES, TAG_MSGPACK, TAG_NULL
from checkpointer.types import PendingWrite

Typed = tuple[str, bytes]
ChannelKey = tuple[str, str, str]
"""(thread, namespace, channel): where a base list is kept."""

_MIN_BASE_BYTES: Final = 4096
"""Smaller lists are decoded again rather than kept as a base: comparing and bookkeeping
would cost about what decoding does."""

_PLAIN_TAGS: Final = frozenset({TAG_MSGPACK, TAG_BYTES, TAG_NULL})
"""Tags whose bytes are the value's own (not compressed, not sealed): only those are kept."""

_CODEC_MARKERS: Final = tuple(
    head + bytes([EXT_CODEC]) for head in (b"\xc7\x00", b"\xc8\x00\x00", b"\xc9\x00\x00\x00\x00")
)
"""The codec marker, in each form an empty msgpack extension can take. A codec's `decode`
may return a plain dict or str, and codecs are registered per serializer and may change:
values whose bytes hold one (or the same bytes inside a string) are never kept, so that
what is kept reads alike under every `MsgpackSerializer`."""

_PLAIN_MAX_BYTES: Final = 1024
"""Larger values of other shapes are left to the serializer, which hands them to ormsgpack
itself (`msgpack_serde._PLAIN_MIN_SIZE`)."""

_ENTRY_COST: Final = 200
"""Bytes counted per entry besides its value (the entry tuple, its dict slot)."""


def metadata_from_json(text: str) -> dict[str, Any]:
    """Metadata decoded from its stored JSON, as the SQL savers decode theirs."""
    return metadata_counters_as_pairs(loads_json(text))


def _may_hold_codec(raw: bytes) -> bool:
    return any(marker in raw for marker in _CODEC_MARKERS)


def _item_ends(items: memoryview, count: int) -> list[int] | None:
    """Where each of `count` msgpack objects packed one after another in `items` ends, or
    None unless they fill `items` exactly."""
    unpacker = msgpack.Unpacker(max_buffer_size=max(len(items), 1))
    unpacker.feed(items)
    ends = []
    try:
        for _ in range(count):
            unpacker.skip()
            ends.append(unpacker.tell())
    except Exception:
        return None
    return ends if (ends[-1] if ends else 0) == len(items) else None


class _Base:
    """A channel's latest decoded list: its stored bytes, header length, items (private,
    shared by the entries made from it), where each item ends after the header, and the
    bytes it counts in the cache's size."""

    __slots__ = ("cost", "ends", "header", "items", "raw")

    def __init__(self, raw: bytes, header: int, items: list[Any], ends: list[int]) -> None:
        self.raw = raw
        self.header = header
        self.items = items
        self.ends = ends
        self.cost = len(raw) + 8 * len(ends) + _ENTRY_COST


class _Template:
    """How to make a stored checkpoint's tuple parts from kept values alone (a `list` of
    a thread reads each checkpoint again): its record and metadata (copier, kept form), the
    pairs stored at its channels' blob keys (None where there is none), its channel values
    and pending writes with the immutable ones made once (scalars, and writes of them:
    tuples, shared safely) and the others copied per read.

    Valid while the checkpoint, its record and metadata are the same objects, its channel
    versions are equal to what they were (one dict comparison in C against a copy kept
    here), its blob keys and writes hold equal pairs (equal bytes decode alike; blob keys
    that had none still none), and no `put_writes` came since (`forget_templates`: a
    replaced write may move in the order)."""

    __slots__ = (
        "copied_values",
        "copied_writes",
        "cost",
        "keys",
        "metadata",
        "metadata_text",
        "pairs",
        "pending",
        "record",
        "record_data",
        "stored",
        "values",
        "versions",
        "write_pairs",
    )

    def __init__(
        self,
        stored: StoredCheckpoint,
        record: tuple[Copier, Any],
        metadata: tuple[Copier, Any],
        values: list[tuple[str, BlobKey, Typed | None, Copier | None, Any]],
        writes: list[tuple[str, str, Copier, Any]],
    ) -> None:
        self.stored = stored
        self.record_data = stored.record
        self.metadata_text = stored.metadata
        self.record = record
        self.metadata = metadata
        self.versions = dict(stored.channel_versions)
        self.write_pairs = list(map(_WRITE_VALUE, stored.writes.values()))
        self.keys = [key for _, key, _, _, _ in values]
        self.pairs = [data for _, _, data, _, _ in values]
        # Channel values in stored order; a mutable one is a placeholder replaced per read
        # (which keeps its place in the dict).
        self.values = {ch: kept for ch, _, data, _, kept in values if data is not None}
        self.copied_values: list[tuple[str, Copier, Any]] = [
            (ch, copier, kept)
            for ch, _, data, copier, kept in values
            if data is not None and copier is not None and copier is not _same
        ]
        self.pending = [(task, ch, kept) for task, ch, _, kept in writes]
        self.copied_writes = [
            (i, task, ch, copier, kept)
            for i, (task, ch, copier, kept) in enumerate(writes)
            if copier is not _same
        ]
        self.cost = _ENTRY_COST + 64 * (len(values) + len(writes)) + 32 * len(self.versions)


_WRITE_VALUE: Final = attrgetter("value")

_Entry = tuple[object, Any, Copier, int]
"""(stored pair or metadata text, decoded value never handed out, its copier, cost in
bytes)."""


class DecodedValues:
    """Decoded forms of stored values, handed out as fresh copies (see the module doc)."""

    def __init__(self, max_bytes: int | None = None) -> None:
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._bases: OrderedDict[ChannelKey, _Base] = OrderedDict()
        self._templates: OrderedDict[int, _Template] = OrderedDict()
        self._size = 0
        self.max_bytes = max_bytes_from_env() if max_bytes is None else max_bytes

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size(self) -> int:
        """Bytes counted for what is kept: stored bytes of each value decoded, 8 per item
        of a list made from a base, plus a fixed cost per entry."""
        return self._size

    def clear(self) -> None:
        """Forget everything (the saver deleted values: their pairs need not stay alive)."""
        self._entries.clear()
        self._bases.clear()
        self._templates.clear()
        self._size = 0

    def load(
        self, fast: Callable[[Typed], Any], data: Typed, channel: ChannelKey | None = None
    ) -> Any:
        """`fast(data)`, or a fresh copy of it from what was decoded before. `channel`
        names where a stored channel value lives, for lists that grow (module doc)."""
        entry = self._entries.get(id(data))
        if entry is not None and entry[0] is data:
            return entry[2](entry[1])
        if not self.max_bytes:
            return fast(data)
        raw = data[1]
        if channel is not None and data[0] == TAG_MSGPACK and type(raw) is bytes:
            items = self._from_base(channel, raw)
            if items is not None:
                self._keep(data, items, _copy_records, 8 * len(items) + _ENTRY_COST)
                return _copy_records(items)
        value = fast(data)
        copier = copier_for(value)
        if copier is None:
            # Small values of other shapes (a checkpoint record, nested data) that ormsgpack
            # reads alike (`fast_path._load_plain`: no extension, one object): read by it
            # from then on, fresh each time, instead of through the serializer's hooks.
            if (
                _plain_unpackb is not None
                and len(raw) < _PLAIN_MAX_BYTES
                and data[0] == TAG_MSGPACK
                and type(raw) is bytes
                and raw
            ):
                try:
                    _plain_unpackb(raw)
                    plain = _is_one_object(raw)
                except Exception:
                    plain = False
                if plain:
                    self._keep(data, raw, _plain_unpackb, _ENTRY_COST)
            return value
        if data[0] in _PLAIN_TAGS and not _may_hold_codec(raw):
            kept = copier(value)  # the caller's value is theirs; the cache keeps a copy
            self._keep(data, kept, copier, len(raw) + _ENTRY_COST)
            if (
                channel is not None
                and copier is _copy_records
                and len(raw) >= _MIN_BASE_BYTES
                and data[0] == TAG_MSGPACK
                and type(raw) is bytes
            ):
                header = array_header(raw)
                if header is not None and header[0] == len(kept):
                    ends = _item_ends(memoryview(raw)[header[1] :], header[0])
                    if ends is not None:
                        self._set_base(channel, _Base(raw, header[1], kept, ends))
        return value

    def metadata(self, text: str) -> dict[str, Any]:
        """A checkpoint's metadata decoded from its stored JSON `text` (`stored_metadata`),
        or a fresh copy of it from what was decoded before."""
        entry = self._entries.get(id(text))
        if entry is not None and entry[0] is text:
            return entry[2](entry[1])
        value = metadata_from_json(text)
        copier = copier_for(value) if self.max_bytes else None
        if copier is not None:
            self._keep(text, copier(value), copier, len(text) + _ENTRY_COST)
        return value

    def _keep(self, data: object, value: Any, copier: Copier, cost: int) -> None:
        if cost > self.max_bytes // 2:
            return  # one value would push most others out
        entries = self._entries
        old = entries.pop(id(data), None)
        if old is not None:
            self._size -= old[3]
        entries[id(data)] = (data, value, copier, cost)
        self._size += cost
        self._evict()

    def _set_base(self, channel: ChannelKey, base: _Base) -> None:
        old = self._bases.pop(channel, None)
        if old is not None:
            self._size -= old.cost
        if base.cost > self.max_bytes // 2:
            return
        self._bases[channel] = base
        self._size += base.cost
        self._evict()

    def _evict(self) -> None:
        """Oldest templates first, then entries, then bases, until within `max_bytes`."""
        templates, entries, bases = self._templates, self._entries, self._bases
        while self._size > self.max_bytes and templates:
            self._size -= templates.popitem(last=False)[1].cost
        while self._size > self.max_bytes and entries:
            self._size -= entries.popitem(last=False)[1][3]
        while self._size > self.max_bytes and bases:
            self._size -= bases.popitem(last=False)[1].cost

    # ------------------------------------------------------------- whole tuples
    def _kept(self, data: object) -> tuple[Copier, Any] | None:
        entry = self._entries.get(id(data))
        if entry is None or entry[0] is not data:
            return None
        return entry[2], entry[1]

    def remember(
        self, thread_id: str, ns: str, stored: StoredCheckpoint, blobs: Mapping[BlobKey, Typed]
    ) -> None:
        """Make `stored`'s template if every part of it was kept by this read."""
        if not self.max_bytes:
            return
        record, metadata = self._kept(stored.record), self._kept(stored.metadata)
        if record is None or metadata is None:
            return
        values: list[tuple[str, BlobKey, Typed | None, Copier | None, Any]] = []
        for channel, version in stored.channel_versions.items():
            key = (thread_id, ns, channel, str(version))
            data = blobs.get(key)
            kept = self._kept(data) if data is not None else (None, None)
            if kept is None:
                return
            values.append((channel, key, data, *kept))
        writes = []
        for write in ordered_writes(stored.writes):
            kept = self._kept(write.value)
            if kept is None:
                return
            writes.append((write.task_id, write.channel, *kept))
        template = _Template(stored, record, metadata, values, writes)
        old = self._templates.pop(id(stored), None)
        if old is not None:
            self._size -= old.cost
        self._templates[id(stored)] = template
        self._size += template.cost
        self._evict()

    def from_template(
        self, stored: StoredCheckpoint, blobs: Mapping[BlobKey, Typed]
    ) -> tuple[Any, list[PendingWrite], dict[str, Any]] | None:
        """Fresh (checkpoint with its channel values, pending writes, metadata) of `stored`
        from its template, or None when it has none or it no longer holds."""
        template = self._templates.get(id(stored))
        if (
            template is None
            or template.stored is not stored
            or template.record_data is not stored.record
            or template.metadata_text is not stored.metadata
            or stored.channel_versions != template.versions
            or list(map(_WRITE_VALUE, stored.writes.values())) != template.write_pairs
        ):
            return None
        if list(map(blobs.get, template.keys)) != template.pairs:
            return None
        values = template.values.copy()
        for channel, copier, kept in template.copied_values:
            values[channel] = copier(kept)
        pending = template.pending.copy()
        for i, task, channel, copier, kept in template.copied_writes:
            pending[i] = (task, channel, copier(kept))
        copy_record, record = template.record
        checkpoint = copy_record(record)
        checkpoint["channel_values"] = values
        copy_metadata, metadata = template.metadata
        return checkpoint, pending, copy_metadata(metadata)

    def forget_templates(self) -> None:
        """Pending writes changed (or may have): no template holds any more."""
        templates = self._templates
        while templates:
            self._size -= templates.popitem()[1].cost

    def _from_base(self, channel: ChannelKey, raw: bytes) -> list[Any] | None:
        """The items of the list stored as `raw`, from the channel's base (module doc), as
        a list of the cache's own; None when the base does not tell them."""
        base = self._bases.get(channel)
        if base is None:
            return None
        header = array_header(raw)
        if header is None or header[0] == 0:
            return None
        count, at = header
        size = len(raw) - at
        items = base.items
        if count <= len(items):
            # A prefix: ending where the base's item `count` ends, with the same bytes.
            if base.ends[count - 1] != size or not base.raw.startswith(
                memoryview(raw)[at:], base.header
            ):
                return None
            return items[:count]
        # An extension: the base's items' bytes, then those of the new items only.
        known = len(base.raw) - base.header
        if size <= known or not raw.startswith(memoryview(base.raw)[base.header :], at):
            return None
        rest = memoryview(raw)[at + known :]
        added = count - len(items)
        extra = _load_plain(_array_head(added) + bytes(rest))
        if extra is _NOT_PLAIN or type(extra) is not list or len(extra) != added:
            return None
        for item in extra:
            if not _is_record(item):
                return None
        ends = _item_ends(rest, added)
        if ends is None:
            return None
        grown = items + extra
        self._set_base(channel, _Base(raw, at, grown, base.ends + [known + end for end in ends]))
        return grown
