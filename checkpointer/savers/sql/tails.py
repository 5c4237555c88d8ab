"""Tail rows: a growing list stored as what it gained since a whole earlier version.

A chat history (`Annotated[list, operator.add]`, `add_messages`) gets a new version at
every step: the previous list plus a few items. Stored whole, every step re-encodes,
recompresses and rewrites the entire history (most of a classic put's time, and of the
database's bytes). From schema revision 0010 a value row may instead be a *tail*:

- its `base_version` names a *whole* row (no base of its own) of the same thread,
  namespace and channel, whose value is a list, or from revision 0011 a list inside
  payload markers (a delta channel's `DeltaSnapshot` of its message list);
- its type is `TAIL_PREFIX` + the tag of its bytes, which serialize the list of the items
  that follow the base's; its value is the base's value with those items appended to its
  list (inside the same markers).

A delta channel snapshots its whole value every `snapshot_frequency` steps: stored whole,
a thread of N steps held N^2 / (2 * frequency) items in snapshots, and listing it decoded
them all. As tails, its snapshots cost about what one list written whole a few times does.

A base is one hop away, so a read fetches at most one more row per tail, and bases are
few and shared (`bases_stmt` fetches each once), so the value cache keeps them decoded.
An unknown reader meets an unknown tag and fails loudly (`unknown serialization tag`)
rather than returning only the tail.

Why a tail is the same value. msgpack encodes an array as a header then its items one
after another, and our serializer encodes each item on its own (an object is an array led
by its marker; nothing refers across items). So if the new list's item bytes start with
the base's item bytes, its first items are exactly the base's items, as encoded, and the
rest of its bytes encode the items after them: a header for that many items in front of
them is the encoding of the list of the new items (`ListTails.encode`). A payload marker
is the same few bytes in front of the list whatever it holds (`fast_path.list_inside`), so
a tail continues only a base written with the very same marker bytes.

Puts (`ListTails`): per (thread, namespace, channel) the last whole list written by this
saver is remembered as bytes. A new version whose bytes extend it by at most
`1 / TAIL_SHARE` of its size is written as a tail; anything else (a fork, an edit, a list
grown too far past its base) is written whole and becomes the next base. The statement
inserts a tail only if its base is stored, whole, and as long as the bytes remembered (a
base from a rolled-back put, or deleted by another process since, is refused), else the
value is written whole instead (`TailRow.whole`), in the same transaction.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

from checkpointer.errors import CorruptValueError
from checkpointer.savers.sql.dialect import Dialect
from checkpointer.savers.sql.plan import Plan, Row, Stmt
from checkpointer.serde import Serializer
from checkpointer.serde.compression import CompressingSerializer
from checkpointer.serde.fast_path import _array_head, list_inside, list_of
from checkpointer.serde.frames import (
    DEFAULT_LEVEL,
    ZSTD_SUFFIX,
    compress,
    decompress_typed,
    is_compressed,
    limit_of,
)
from checkpointer.serde.located import ValueLocation
from checkpointer.serde.msgpack_serde import MsgpackSerializer
from checkpointer.serde.value_cache import ValueCache
from checkpointer.serde.value_types import TAG_MSGPACK

Typed = tuple[str, bytes]

TAILS_KEY: Final = "__tails__"
"""A checkpoint record's hint {channel: base version} for its values stored as tails, so
that a read fetches their bases in its one statement. Only a hint: a tail row's
`base_version` is what counts (a tail without a hint costs a second statement, a hint
without a tail an unused row)."""

TAIL_PREFIX: Final = "tail+"
"""Leads the type of a tail row: `tail+msgpack`, `tail+msgpack+zstd`."""

MIN_BASE_BYTES: Final = 4096
"""Lists encoded shorter than this are always written whole: rewriting them costs little,
and the value cache keeps decoded only values at least this large (bases must be)."""

TAIL_SHARE: Final = 8
"""A tail may hold up to 1/TAIL_SHARE of its base's bytes; past that the list is written
whole again. A base of n items is then rewritten every n/8 steps, and the average tail is
n/16 items: for a list growing by one item a step, about 1/8 of the bytes written whole."""

REMEMBERED_BYTES: Final = 32 * 1024 * 1024
"""What the bases remembered for puts may hold in all (the oldest are forgotten first)."""


def hints_of(fields: Mapping[str, Any]) -> dict[str, str]:
    """The tail hints of a parsed checkpoint record ({} if none, or malformed)."""
    hints = fields.get(TAILS_KEY)
    if type(hints) is not dict:
        return {}
    return {ch: b for ch, b in hints.items() if type(b) is str}


def is_tail(tag: str) -> bool:
    return tag.startswith(TAIL_PREFIX)


def items_tag(tag: str) -> str:
    """The tag of a tail row's bytes (the list of its items)."""
    return tag[len(TAIL_PREFIX) :]


@dataclass(frozen=True, slots=True)
class TailRow:
    """A value row to write as a tail of `base_version`, or `whole()` if that is refused."""

    channel: str
    version: str
    type: str
    blob: bytes
    base_version: str
    base_size: int
    """The stored length of the base row's bytes, checked by the insert."""
    whole: Callable[[], Typed]


def whole_row(tail: TailRow) -> tuple[str, str, str, bytes]:
    """The (channel, version, type, blob) row to write when `tail` is refused."""
    return (tail.channel, tail.version, *tail.whole())


@dataclass(frozen=True, slots=True)
class _Base:
    version: str
    items: bytes
    """The base's encoding without its markers and array header: the bytes of its items."""
    count: int
    stored_size: int
    markers: bytes
    """The payload markers' bytes in front of the list (empty for a plain list)."""


def can_be_tail(value: Any) -> bool:
    """Whether `ListTails.encode` takes `value`: a non-empty list, or one inside payload
    markers (a `DeltaSnapshot` of a message list)."""
    return bool(list_of(value))


def list_codec(serde: Serializer) -> tuple[Callable[[Any], Typed], Callable[[Typed], Typed]] | None:
    """(encode, finish) when `serde` is our msgpack serializer, alone or compressed:
    `encode` gives a value's msgpack bytes, `finish` what the serializer stores for them.
    None for any other serializer (encrypting, located, a user's own): no tails."""
    if type(serde) is MsgpackSerializer:
        return serde.dumps_typed, _as_is
    if type(serde) is CompressingSerializer and type(serde.inner) is MsgpackSerializer:
        return serde.inner.dumps_typed, serde.compress_typed
    return None


def _as_is(data: Typed) -> Typed:
    return data


class ListTails:
    """The last whole list each (thread, namespace, channel) was written with, to write
    the next versions as tails of it (see module). Thread-safe; bounded by bytes."""

    def __init__(self, max_bytes: int = REMEMBERED_BYTES) -> None:
        self._lock = threading.Lock()
        self._bases: OrderedDict[tuple[str, str, str], _Base] = OrderedDict()
        self._size = 0
        self._max = max_bytes

    def __len__(self) -> int:
        return len(self._bases)

    def encode(
        self,
        codec: tuple[Callable[[Any], Typed], Callable[[Typed], Typed]],
        thread_id: str,
        ns: str,
        channel: str,
        version: str,
        value: Any,
    ) -> Typed | TailRow:
        """What to write for `value` (`can_be_tail`): a tail of the remembered base, or its
        stored form whole (then remembered as the base, if large enough)."""
        encode, finish = codec
        tag, raw = encode(value)
        found = list_inside(raw) if tag == TAG_MSGPACK else None
        if found is None:
            return finish((tag, raw))
        marked, count, head = found
        start = marked + head
        key = (thread_id, ns, channel)
        with self._lock:
            base = self._bases.get(key)
            if base is not None:
                self._bases.move_to_end(key)
        if (
            base is not None
            and base.version != version
            and count > base.count
            and raw.startswith(base.markers)
            and marked == len(base.markers)
            and len(raw) - start - len(base.items) <= len(base.items) // TAIL_SHARE
            and raw.startswith(base.items, start)
        ):
            tail = memoryview(raw)[start + len(base.items) :]
            items = finish((TAG_MSGPACK, _array_head(count - base.count) + tail))
            return TailRow(
                channel,
                version,
                TAIL_PREFIX + items[0],
                items[1],
                base.version,
                base.stored_size,
                partial(self._whole, key, version, raw, marked, start, count, finish),
            )
        return self._whole(key, version, raw, marked, start, count, finish)

    def _whole(
        self,
        key: tuple[str, str, str],
        version: str,
        raw: bytes,
        marked: int,
        start: int,
        count: int,
        finish: Callable[[Typed], Typed],
    ) -> Typed:
        """The stored form of a list written whole, remembered as the next base (also when
        a tail was refused: its remembered base is gone)."""
        stored = finish((TAG_MSGPACK, raw))
        if len(raw) - start >= MIN_BASE_BYTES:
            base = _Base(version, raw[start:], count, len(stored[1]), raw[:marked])
            self._remember(key, base)
        return stored

    def _remember(self, key: tuple[str, str, str], base: _Base) -> None:
        size = len(base.items)
        if size > self._max:
            return
        with self._lock:
            old = self._bases.pop(key, None)
            if old is not None:
                self._size -= len(old.items)
            self._bases[key] = base
            self._size += size
            while self._size > self._max:
                _, dropped = self._bases.popitem(last=False)
                self._size -= len(dropped.items)

    def forget(self, thread_id: str | None = None) -> None:
        """Drop what is remembered (of one thread): nothing breaks if this is skipped (a
        tail of a base gone is refused and written whole), but it saves that retry."""
        with self._lock:
            for key in [k for k in self._bases if thread_id is None or k[0] == thread_id]:
                self._size -= len(self._bases.pop(key).items)


# ---------------------------------------------------------------------------- reads

BaseKey = tuple[str, str, str, str]
"""(thread_id, checkpoint_ns, channel, version) of a tail row."""

BASES_CHUNK: Final = 200
"""Tail rows whose bases one statement fetches."""


def bases_stmt(d: Dialect, thread_id: str, ns: str, tails: Sequence[tuple[str, str]]) -> Stmt:
    """For tail rows (channel, version) of one thread and namespace: a row (0, channel,
    version, base_version, NULL) per tail row found, and a row (1, channel, version, type,
    blob) per whole row that is the base of any of them, each base once."""
    p = d.p
    params: dict[str, Any] = {"t": thread_id, "ns": ns}
    for i, (channel, version) in enumerate(tails):
        params[f"c{i}"], params[f"v{i}"] = channel, version

    def build() -> str:
        keys = " OR ".join(
            f"(channel = {p(f'c{i}')} AND version = {p(f'v{i}')})" for i in range(len(tails))
        )
        return (
            f"WITH tl AS (SELECT channel, version, base_version FROM {d.blobs} "
            f"WHERE thread_id = {p('t')} AND checkpoint_ns = {p('ns')} "
            f"AND base_version IS NOT NULL AND ({keys})) "
            f"SELECT 0, channel, version, base_version, {d.null('bytes')} FROM tl UNION ALL "
            f"SELECT 1, b.channel, b.version, b.type, b.blob FROM "
            f"(SELECT DISTINCT channel, base_version FROM tl) x JOIN {d.blobs} b ON "
            f"b.thread_id = {p('t')} AND b.checkpoint_ns = {p('ns')} AND "
            "b.channel = x.channel AND b.version = x.base_version AND b.base_version IS NULL"
        )

    return Stmt(d.sql(("tail_bases", len(tails)), build), params, fetch=True)


def bases_groups(keys: Iterable[BaseKey]) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """Tail rows grouped for `bases_stmt`: (thread_id, ns, [(channel, version)]), each
    group at most `BASES_CHUNK` rows."""
    grouped: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for thread_id, ns, channel, version in keys:
        grouped.setdefault((thread_id, ns), set()).add((channel, version))
    out = []
    for (thread_id, ns), found in grouped.items():
        pairs = sorted(found)
        for start in range(0, len(pairs), BASES_CHUNK):
            out.append((thread_id, ns, pairs[start : start + BASES_CHUNK]))
    return out


Bases = Mapping[BaseKey, tuple[str, Typed]]
"""Tail row -> (its base's version, the base's stored pair)."""


def decode_bases(
    thread_id: str, ns: str, rows: Sequence[Row], into: dict[BaseKey, tuple[str, Typed]]
) -> None:
    """A `bases_stmt` result into `into`. A tail whose base is missing is left out: the
    read then says so (`compose`)."""
    whole = {
        (str(r[1]), str(r[2])): (str(r[3]), r[4] if type(r[4]) is bytes else bytes(r[4]))
        for r in rows
        if r[0] == 1
    }
    for r in rows:
        if r[0] == 0:
            channel, base_version = str(r[1]), str(r[3])
            base = whole.get((channel, base_version))
            if base is not None:
                into[(thread_id, ns, channel, str(r[2]))] = (base_version, base)


def load_stored(
    fast: Callable[[Typed], Any] | None,
    cache: ValueCache | None,
    read: Callable[..., Any],
    located: bool,
    thread_id: str,
    ns: str,
    channel: str,
    data: Typed,
    version: str,
    keep: bool,
) -> Any:
    """One stored value of `channel` at `version`, as the readers read values: through the
    value cache and the fast loader where there are, else by `read` (`located.load_at`),
    which names the value when it cannot be read."""
    if fast is not None:
        try:
            if cache is None:
                return fast(data)
            return cache.load(data, thread_id, ns, channel, version, fast, keep)
        except Exception:
            pass
    elif cache is not None:
        data = cache.plain(data, thread_id, ns, channel, version)
    return read(
        data,
        ValueLocation.blob(thread_id, ns, channel, version) if located else None,
        thread_id=thread_id,
        checkpoint_ns=ns,
        channel=channel,
        version=version,
    )


def load_tail(
    key: BaseKey,
    data: Typed,
    base: tuple[str, Typed] | None,
    load: Callable[[Typed, str, bool], Any],
    where: Mapping[str, Any],
    cache: ValueCache | None = None,
) -> list[Any]:
    """The value of the tail row `data` at `key`: its base's list, then its items. `base`:
    (its version, its stored pair), None if it was not found. `load(pair, version, keep)`
    reads a stored pair of the key's channel at `version` (a base is kept decoded: many
    tails share it). With `cache`, the value itself is kept decoded too (the head read
    again: `ValueCache.load_composed`)."""
    if base is None:
        raise missing_base(key, where)
    found = base

    def make() -> list[Any]:
        base_value = load(found[1], found[0], True)
        items = load((items_tag(data[0]), data[1]), key[3], False)
        return compose(base_value, items, where)

    if cache is None:
        return make()
    return cache.load_composed(key, data, found[1], make)


def bases_plan(d: Dialect, keys: Iterable[BaseKey]) -> Plan[Bases]:
    """The bases of the tail rows at `keys`, a statement per thread and namespace (and
    per `BASES_CHUNK` tails)."""
    found: dict[BaseKey, tuple[str, Typed]] = {}
    for thread_id, ns, pairs in bases_groups(keys):
        rows = yield bases_stmt(d, thread_id, ns, pairs)
        decode_bases(thread_id, ns, rows, found)
    return found


def compose(base: Any, items: Any, where: Mapping[str, Any]) -> Any:
    """A tail's value: its base (a fresh object) with its items appended to the list it is
    or holds inside payload markers (extended in place)."""
    inner = list_of(base)
    if inner is None or type(items) is not list:
        raise CorruptValueError(
            "a tail value and its base must both be lists "
            f"(got {type(base).__name__} and {type(items).__name__})",
            **where,
        )
    inner.extend(items)
    return base


def missing_base(key: BaseKey, where: Mapping[str, Any]) -> CorruptValueError:
    return CorruptValueError(
        f"the value of channel {key[2]!r} at version {key[3]!r} continues a list "
        "whose stored row is missing",
        **where,
    )


# ------------------------------------------------------------------ the other row users
def read_list_head(raw: bytes | memoryview, where: Mapping[str, Any]) -> tuple[int, int, int]:
    """`fast_path.list_inside` of the bytes of a tail row or its base, or CorruptValueError."""
    found = list_inside(raw)
    if found is None:
        raise CorruptValueError("a tail value or its base is not a msgpack list", **where)
    return found


def join_whole(base: Typed, tail: Typed, where: Mapping[str, Any]) -> Typed:
    """The stored pair of a tail row's value written whole, made from bytes alone: the
    base's markers, one array header, the base's items, the tail's items (the converse of
    `ListTails.encode`, see module). `base` is the base row's pair (plain `msgpack`,
    compressed or not), `tail` the tail row's (`tail+...`). Compressed (`+zstd`) when
    either was and it saves space. No value is deserialized, so no class allowlist is
    involved: what copies, re-encryption and inspection use to turn a tail into an
    ordinary row."""
    base_tag, base_raw = decompress_typed((base[0], bytes(base[1])))
    items_tag_, items_raw = decompress_typed((items_tag(tail[0]), bytes(tail[1])))
    if base_tag != TAG_MSGPACK or items_tag_ != TAG_MSGPACK:
        raise CorruptValueError(
            f"a tail value (tag {tail[0]!r}) and its base (tag {base[0]!r}) must both be "
            "msgpack lists",
            **where,
        )
    marked, base_count, base_head = read_list_head(base_raw, where)
    unmarked, count, head = read_list_head(items_raw, where)
    if unmarked:
        raise CorruptValueError("the items of a tail value are not a plain list", **where)
    raw = b"".join(
        (
            memoryview(base_raw)[:marked],
            _array_head(base_count + count),
            memoryview(base_raw)[marked + base_head :],
            memoryview(items_raw)[head:],
        )
    )
    if (is_compressed(base[0]) or is_compressed(tail[0])) and len(raw) <= limit_of(None):
        packed = compress(raw, DEFAULT_LEVEL)
        if len(packed) < len(raw):
            return TAG_MSGPACK + ZSTD_SUFFIX, packed
    return TAG_MSGPACK, raw


def has_tails_stmt(d: Dialect, thread_ids: Sequence[str] | None) -> Stmt:
    """A row when any of the threads (any thread, None) holds a tail row."""
    params: dict[str, Any] = {}
    where = "base_version IS NOT NULL"
    if thread_ids is not None:
        params["threads"] = d.list_param(list(thread_ids))
        where += f" AND {d.in_list('thread_id', 'threads')}"
    return Stmt(f"SELECT 1 FROM {d.blobs} WHERE {where} LIMIT 1", params, fetch=True)


def orphan_tails_stmt(d: Dialect, thread_ids: Sequence[str]) -> Stmt:
    """(thread_id, checkpoint_ns, channel, version) of tail rows of the threads whose base
    is not stored whole: what rows written around the saver (an import) must not leave."""
    return Stmt(
        f"SELECT t.thread_id, t.checkpoint_ns, t.channel, t.version FROM {d.blobs} t "
        f"WHERE {d.in_list('t.thread_id', 'threads')} AND t.base_version IS NOT NULL "
        f"AND NOT EXISTS (SELECT 1 FROM {d.blobs} b WHERE b.thread_id = t.thread_id AND "
        "b.checkpoint_ns = t.checkpoint_ns AND b.channel = t.channel AND "
        "b.version = t.base_version AND b.base_version IS NULL) "
        "ORDER BY t.thread_id, t.checkpoint_ns, t.channel, t.version LIMIT 10",
        {"threads": d.list_param(list(thread_ids))},
        fetch=True,
    )
