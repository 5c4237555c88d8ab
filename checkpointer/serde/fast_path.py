"""The ormsgpack fast path for plain values (maps, lists, scalars: most of a chat history).

When ormsgpack is installed (it comes with LangGraph), values of 1 KB or more shaped like
records (maps, arrays of maps) are first handed to it: without extensions it reads them
1.3-1.6 times as fast as msgpack-python. `_load_plain` says why what it returns is always
what msgpack-python would have returned; `tests/test_serde_fast_path.py` holds the two
paths to identical results and errors.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Final

import msgpack

_plain_unpackb: Callable[[bytes], Any] | None
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


def _is_one_object(raw: bytes) -> bool:
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


def _worth_trying(raw: bytes) -> bool:
    """Whether ormsgpack is likely to read `raw` (non-empty) faster than msgpack-python,
    judging by its first bytes: a map, or an array of maps or arrays.

    That is where ormsgpack gains (it caches map keys and makes no Python call per array,
    where our `list_hook` does); on flat arrays of scalars, single strings and the like it is
    no faster, and the end check is a loss. An array whose first item is an extension is a
    tagged value (a tuple, a dataclass...), which ormsgpack would refuse anyway."""
    at = _ITEM_AT[raw[0]]
    return at == 0 or (at > 0 and len(raw) > at and raw[at] in _CONTAINER_HEADS)


def _load_plain(raw: bytes) -> Any:
    """`raw` decoded by ormsgpack, or `_NOT_PLAIN` if it may differ from msgpack-python's
    (or is not worth trying, see `_worth_trying`).

    Called without an `ext_hook`, ormsgpack refuses at the first extension, so everything
    our hooks would rebuild (tagged arrays, big ints, UUIDs...) takes the usual path, which
    also gives the precise errors. It refuses as well map keys that are not str, strings
    that are not strict UTF-8 (we accept lone surrogates) and nesting msgpack-python would
    still accept (a shallower limit). What it does read it reads as msgpack-python does,
    except that it ignores bytes after the object: `_is_one_object` checks for those.
    """
    unpackb = _plain_unpackb
    if unpackb is None or not raw or not _worth_trying(raw):
        return _NOT_PLAIN
    try:
        value = unpackb(raw)
        if _is_one_object(raw):
            return value
    except Exception:
        pass  # ormsgpack refused (or the check failed): the usual path decides
    return _NOT_PLAIN
