"""The ormsgpack fast path for plain values (maps, lists, scalars: most of a chat history).

When ormsgpack is installed (it comes with LangGraph), values shaped like records (maps,
arrays of maps) are first handed to it: without extensions it reads them 1.3-2 times as
fast as msgpack-python, with no Python call per list. A value wrapped in one of the format's
markers around plain data (a `DeltaSnapshot` or `Overwrite` of a message list, a tuple or
set of records) takes the same path: the wrapper is read here from its first bytes, the
payload by ormsgpack. `_load_plain` says why what it returns is always what msgpack-python
would have returned; `tests/test_serde_fast_path.py` holds the two paths to identical
results and errors.
"""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Callable, Sequence
from itertools import repeat
from operator import itemgetter
from typing import Any, Final

import msgpack

from checkpointer.channels.markers import DeltaSnapshot, Overwrite
from checkpointer.serde.value_types import (
    EXT_DELTA_SNAPSHOT,
    EXT_FROZENSET,
    EXT_OVERWRITE,
    EXT_SET,
    EXT_TUPLE,
)

_plain_unpackb: Callable[[bytes | memoryview], Any] | None
try:
    import ormsgpack
except ImportError:  # optional: msgpack-python alone reads everything
    _plain_unpackb = None
else:
    _plain_unpackb = ormsgpack.unpackb

_NOT_PLAIN: Final = object()
"""What `_load_plain` returns when the value must be decoded the usual way."""

_REUSED_SKIP_LIMIT: Final = 1 << 16
"""Values up to this size are checked with the thread's reused Unpacker, whose buffer grows
to the largest value fed to it and stays allocated; larger ones get an Unpacker of their own."""


class _SkipSlot(threading.local):
    """A msgpack Unpacker per thread, reused to skip over one object at a time, and the
    stream offset (`tell()`) at which its buffer was last empty.

    A check takes the Unpacker out of the slot and puts it back only once its buffer is
    empty again, so a check that fails, raises or is interrupted (or one nested in it) can
    never leave stale bytes for the next one to skip instead of its own."""

    def __init__(self) -> None:
        self.state: list[Any] = [None, 0]


_SKIP_SLOT: Final = _SkipSlot()


def _is_one_object(raw: bytes | memoryview) -> bool:
    """Whether `raw` is exactly one msgpack object, with no bytes after it.

    ormsgpack stops after the first object and ignores the rest, where msgpack-python
    (and so our format) refuses "extra data". Skipping builds no objects: a fraction of the
    cost of decoding."""
    size = len(raw)
    state = _SKIP_SLOT.state
    unpacker = state[0]
    if unpacker is None or size > _REUSED_SKIP_LIMIT:
        unpacker = msgpack.Unpacker(max_buffer_size=max(size, _REUSED_SKIP_LIMIT))
        start = 0
    else:
        state[0] = None
        start = state[1]
    unpacker.feed(raw)
    unpacker.skip()
    end = unpacker.tell()
    if end - start != size:
        return False  # bytes left over: this Unpacker is not reused
    if size <= _REUSED_SKIP_LIMIT:
        state[0] = unpacker
        state[1] = end
    return True


_MAP_HEADS: Final = frozenset({*range(0x80, 0x90), 0xDE, 0xDF})
_CONTAINER_HEADS: Final = _MAP_HEADS | {*range(0x90, 0xA0), 0xDC, 0xDD}


def _item_at(head: int) -> int:
    """For a value's first byte: 0 for a map, where the first item starts for a non-empty
    array (fixarray, array 16, array 32), -1 for anything else."""
    if head in _MAP_HEADS:
        return 0
    if 0x91 <= head <= 0x9F:
        return 1
    return {0xDC: 3, 0xDD: 5}.get(head, -1)


_ITEM_AT: Final = tuple(map(_item_at, range(256)))


def _worth_trying(raw: bytes | memoryview) -> bool:
    """Whether ormsgpack is likely to read `raw` (non-empty) faster than msgpack-python,
    judging by its first bytes: a map, or an array of maps or arrays.

    That is where ormsgpack gains (it caches map keys and makes no Python call per array,
    where our `list_hook` does); on flat arrays of scalars, single strings and the like it is
    no faster, and the end check is a loss. An array whose first item is an extension is a
    tagged value (a tuple, a dataclass...), which ormsgpack would refuse anyway."""
    at = _ITEM_AT[raw[0]]
    return at == 0 or (at > 0 and len(raw) > at and raw[at] in _CONTAINER_HEADS)


def _load_plain(raw: bytes | memoryview) -> Any:
    """`raw` decoded by ormsgpack, or `_NOT_PLAIN` if it may differ from msgpack-python's
    (or is not worth trying, see `_worth_trying`).

    Called without an `ext_hook`, ormsgpack refuses at the first extension, so everything
    our hooks would rebuild (tagged arrays, big ints, UUIDs...) takes the usual path, which
    also gives the precise errors. It refuses as well map keys that are not str, strings
    that are not strict UTF-8 (we accept lone surrogates) and nesting msgpack-python would
    still accept (a shallower limit). What it does read it reads as msgpack-python does,
    except that it ignores bytes after the object: `_is_one_object` checks for those.

    Wrapped values (`_unwrap`) are the wrappers' own types around what the payload decodes
    to: exactly what the hooks build from the same bytes.
    """
    unpackb = _plain_unpackb
    if unpackb is None or not raw:
        return _NOT_PLAIN
    wrappers: list[Callable[[Any], Any]] | None = None
    if raw[0] in _WRAPPER_HEADS:
        wrappers, raw = _unwrap(raw)
        if not raw:
            return _NOT_PLAIN
    if not _worth_trying(raw):
        return _NOT_PLAIN
    try:
        value = _unpack_without_gc(unpackb, raw) if len(raw) >= _NO_GC_MIN_SIZE else unpackb(raw)
        if not _is_one_object(raw):
            return _NOT_PLAIN
        if wrappers:
            for wrap in reversed(wrappers):
                value = wrap(value)
    except Exception:
        return _NOT_PLAIN  # ormsgpack refused (or the check failed): the usual path decides
    return value


_NO_GC_MIN_SIZE: Final = 1 << 15
"""From this size on, a value is decoded with the cyclic garbage collector paused."""


class _CollectorPause:
    """Pauses the cyclic collector while any thread is inside a large decode.

    Counted under a lock: a decode through msgpack-python's Python hooks can switch threads
    mid-way, and a plain "disable, then re-enable if it was on" would let the thread that
    started second see the collector off and leave it off for good when it finishes last.
    The first thread in records whether the collector was on; the last one out restores it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._was_enabled = False

    def __enter__(self) -> None:
        with self._lock:
            if self._depth == 0:
                self._was_enabled = gc.isenabled()
                gc.disable()
            self._depth += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0 and self._was_enabled:
                gc.enable()


_collector_pause = _CollectorPause()


def _unpack_without_gc(
    unpackb: Callable[[bytes | memoryview], Any], raw: bytes | memoryview
) -> Any:
    """`unpackb(raw)` with the cyclic garbage collector paused.

    A 500 KB message list is some 1,500 new dicts: in a process holding a large heap
    (LangGraph, pydantic, the app), the collections their allocation triggers cost several
    times the decode itself (8 ms against 1 ms for a get_state, measured). What is decoded
    is plain data, which holds no reference cycle; the collector resumes right after, with
    its allocation count intact, so at most one collection is deferred."""
    with _collector_pause:
        return unpackb(raw)


# ------------------------------------------------------------------------ wrappers
_EMPTY_EXT: Final = b"\xc7\x00"
"""How msgpack-python writes a marker (an extension with no data): ext 8, length 0."""

_PAYLOAD_WRAPPERS: Final[dict[int, Callable[[Any], Any]]] = {
    EXT_DELTA_SNAPSHOT: DeltaSnapshot,
    EXT_OVERWRITE: Overwrite,
}
"""Markers written as `[marker, payload]`: the value is `factory(payload)`."""

_ITEM_WRAPPERS: Final[dict[int, Callable[[Any], Any]]] = {
    EXT_TUPLE: tuple,
    EXT_SET: set,
    EXT_FROZENSET: frozenset,
}
"""Markers written as `[marker, *items]`: the value is `factory(items)`."""

_WRAPPER_HEADS: Final = frozenset({*range(0x91, 0xA0), 0xDC, 0xDD})
_MAX_WRAPPERS: Final = 8
"""Wrappers peeled at most (a snapshot of an overwrite of a tuple...); deeper nests take the
usual path."""


def _unwrap(raw: bytes | memoryview) -> tuple[list[Callable[[Any], Any]], bytes | memoryview]:
    """The wrappers around `raw`'s payload, outermost first, and the payload's bytes: one
    msgpack object for the payload wrappers; for the item wrappers (only innermost) the
    items re-framed as a plain array, so that ormsgpack reads them in one call.

    Only the encodings msgpack-python writes are recognised (shortest array header, the
    marker as ext 8 of length 0); anything else is returned as it is, and the usual path
    reads it. Set and frozenset items that do not hash make the factory raise: the caller
    then leaves the value to the usual path, which raises its own error."""
    wrappers: list[Callable[[Any], Any]] = []
    view = memoryview(raw)
    while len(wrappers) < _MAX_WRAPPERS:
        header = array_header(view)
        if header is None:
            break
        count, at = header
        if count < 1 or view[at : at + 2] != _EMPTY_EXT or len(view) < at + 3:
            break
        code = view[at + 2]
        rest = view[at + 3 :]
        payload = _PAYLOAD_WRAPPERS.get(code)
        if payload is not None and count == 2:
            wrappers.append(payload)
            view = rest
            continue
        items = _ITEM_WRAPPERS.get(code)
        if items is not None:
            wrappers.append(items)
            return wrappers, _array_head(count - 1) + bytes(rest)
        break
    return wrappers, view if wrappers else raw  # a view: no copy of a large payload


PAYLOAD_MARKERS: Final = tuple(_PAYLOAD_WRAPPERS.values())
"""The types `_PAYLOAD_WRAPPERS` makes: a marker around one payload, `.value`."""


def list_inside(raw: bytes | memoryview) -> tuple[int, int, int] | None:
    """Where the list is in msgpack bytes that encode a list, or a list inside payload
    markers (a `DeltaSnapshot` or `Overwrite` of one, as msgpack-python writes them):
    (the markers' length, the list's item count, its header's length); None for anything
    else. The bytes of the markers, then of the list: what a tail row continues
    (`savers/sql/tails.py`)."""
    view = memoryview(raw)
    at = 0
    for _ in range(_MAX_WRAPPERS):
        if (
            view[at : at + 1] == b"\x92"
            and view[at + 1 : at + 3] == _EMPTY_EXT
            and len(view) > at + 3
            and view[at + 3] in _PAYLOAD_WRAPPERS
        ):
            at += 4
            continue
        break
    header = array_header(view[at:])
    if header is None:
        return None
    first = at + header[1]
    if header[0] and view[first : first + 2] == _EMPTY_EXT:
        return None  # led by a marker: a tagged value (a tuple, a set...), not a list
    return at, header[0], header[1]


def list_of(value: Any) -> list[Any] | None:
    """The list `value` is, or holds inside payload markers (`list_inside`'s values)."""
    for _ in range(_MAX_WRAPPERS):
        if type(value) not in PAYLOAD_MARKERS:
            break
        value = value.value
    return value if type(value) is list else None


def array_header(raw: bytes | memoryview) -> tuple[int, int] | None:
    """(item count, header length) of msgpack bytes that start with an array, or None."""
    if not raw:
        return None
    head = raw[0]
    if 0x90 <= head <= 0x9F:
        return head - 0x90, 1
    if head == 0xDC and len(raw) >= 3:
        return int.from_bytes(raw[1:3], "big"), 3
    if head == 0xDD and len(raw) >= 5:
        return int.from_bytes(raw[1:5], "big"), 5
    return None


def _array_head(count: int) -> bytes:
    """The shortest msgpack array header for `count` items."""
    if count < 16:
        return bytes([0x90 + count])
    if count < 1 << 16:
        return b"\xdc" + count.to_bytes(2, "big")
    return b"\xdd" + count.to_bytes(4, "big")


_BATCH_MIN: Final = 8
"""Fewer values than this decode one by one: the batch's set-up would not pay."""


_FENCE_HEAD: Final = b"\xc4\x10"
"""msgpack bin 8 of 16 bytes: the header of a batch's fence (`load_plain_batch`)."""

_PAIR_HEAD: Final = b"\x92"
"""msgpack array of 2: a value and the fence that must follow it."""

_FIRST, _SECOND = itemgetter(0), itemgetter(1)


def load_plain_batch(raws: Sequence[bytes]) -> list[Any] | None:
    """Many small values (a delta history's writes) decoded by ormsgpack with no Python
    code per value, or None when any of them must take the usual path (`_load_plain` says
    why the results are then msgpack-python's).

    ormsgpack ignores bytes after the object it reads, so each value is read as a pair,
    itself then a fence: 16 random bytes drawn for this call. A value with bytes left
    over, or cut short, leaves no fence where it should be, and the batch is refused.
    Measured on a thousand chat writes: 0.7 ms, against 1.1 for one array of all the
    values checked by skipping over them with msgpack-python (its copy of the batch and
    its skips cost as much as the decoding)."""
    unpackb = _plain_unpackb
    count = len(raws)
    if unpackb is None or count < _BATCH_MIN:
        return None
    fence = os.urandom(16)
    framed = _FENCE_HEAD + fence
    try:
        with _collector_pause:  # thousands of new containers, none in a cycle
            pairs = list(map(unpackb, map(b"".join, zip(repeat(_PAIR_HEAD), raws, repeat(framed)))))
            values = list(map(_FIRST, pairs))
    except Exception:
        return None  # an extension, a key that is not a string... (see `_load_plain`)
    if list(map(_SECOND, pairs)).count(fence) != count:
        return None  # some value was not exactly one object
    return values
