"""A bounded cache of decompressed stored values, one per saver.

A stored channel value never changes: `(thread_id, checkpoint_ns, channel, version)` names
one value for good (DESIGN 3.1). Reading the head of a thread again (`get_state` polled by
a UI, `get_tuple` then `get_state`, a delta history walking the same snapshot) would
decompress the same zstd frame each time: a quarter to a third of such a read. The cache
keeps, per location, the stored bytes and their decompressed form, and hands out the
decompressed pair: the value itself is decoded again by the serializer on every read
(ormsgpack makes a fresh object faster than a deep copy could), so no caller ever shares a
mutable object, and the serializer's class policy applies to every read as before.

Safety does not depend on invalidation: an entry serves a read only when the stored bytes
are the very bytes it was made from (compared in full, a memcmp), so a row rewritten by
another process, a thread deleted and written again, or bytes moved from elsewhere are
decompressed afresh. Only zstd framing is undone here, which does not depend on where a
value is stored: an encrypting serializer still decrypts and checks every value at its own
location (its ciphertext is not compressed, so it is never cached at all). Savers drop a
thread's entries when they delete, prune or overwrite it, to free the memory early.

Decoded values (`load`): a value that is plain data of a shape
`serde.fresh_copy` can copy exactly (a chat history: a list of flat dicts; a `DeltaSnapshot`
of one) is also kept decoded, and later reads of the same bytes get a fresh copy of it,
several times faster than decoding again; the copy kept is never the one handed out.
Listings read through the cache without adding to it. Only what
ormsgpack reads without any extension is kept that way (`fast_path._load_plain`), so no
class policy or codec decides what such a value is: it reads alike under every
`MsgpackSerializer`.

Size: `CHECKPOINTER_VALUE_CACHE_BYTES` (default 32 MiB, 0 disables) when a saver makes its
cache; `saver.value_cache.resize(n)` afterwards. An entry costs its stored plus its
decompressed bytes, twice the latter more when it holds the decoded value (about what the
objects take beyond their bytes); least recently used entries go first. Thread-safe.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any, Final

from checkpointer.errors import ConfigError, DeserializationError
from checkpointer.serde.fast_path import _NOT_PLAIN, _load_plain
from checkpointer.serde.frames import decompress_typed, is_compressed
from checkpointer.serde.fresh_copy import Copier, copier_for
from checkpointer.serde.value_types import TAG_MSGPACK

ENV_MAX_BYTES: Final = "CHECKPOINTER_VALUE_CACHE_BYTES"
DEFAULT_MAX_BYTES: Final = 32 * 1024 * 1024
_ENTRY_OVERHEAD: Final = 256
"""Bytes counted per entry on top of its data (key, tuple, dict slot)."""

_UNCOPYABLE: Final = object()
"""Kept in an entry's value slot when its value was decoded and has no cheap copy."""

_COMPOSED_WEIGHT: Final = 8
"""Bytes counted per stored byte of a composed value kept decoded (`load_composed`)."""

_DECODED_MIN_BYTES: Final = 4096
"""Smaller values are decoded again on each read: keeping them would cost about as much."""

Key = tuple[str, str, str, str]
Typed = tuple[str, bytes]
_Entry = tuple[str, bytes, Typed, int, Any, "Copier | None"]
"""(stored tag, stored bytes, decompressed pair, cost in bytes, decoded value kept (never
handed out) and its copier, or None, None)."""


def max_bytes_from_env() -> int:
    """`CHECKPOINTER_VALUE_CACHE_BYTES`, or the default when unset."""
    raw = os.environ.get(ENV_MAX_BYTES, "").strip()
    if not raw:
        return DEFAULT_MAX_BYTES
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise ConfigError(f"{ENV_MAX_BYTES} must be a whole number of bytes >= 0, got {raw!r}")
    return value


class ValueCache:
    """Decompressed forms of stored values, keyed by where they are stored (see module)."""

    def __init__(self, max_bytes: int | None = None) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[Key, _Entry] = OrderedDict()
        self._size = 0
        self._max = 0
        self.hits = 0
        self.misses = 0
        self.resize(max_bytes_from_env() if max_bytes is None else max_bytes)

    @property
    def max_bytes(self) -> int:
        return self._max

    @property
    def size(self) -> int:
        """Bytes held (stored plus decompressed, plus a fixed overhead per entry)."""
        return self._size

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"ValueCache({len(self)} values, {self._size} of {self._max} bytes)"

    def resize(self, max_bytes: int) -> None:
        """Bound the cache to `max_bytes` (0 disables it and drops every entry)."""
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ConfigError(f"value cache size must be an int >= 0, got {max_bytes!r}")
        with self._lock:
            self._max = max_bytes
            self._evict()

    def plain(
        self,
        data: tuple[str, bytes],
        thread_id: str,
        checkpoint_ns: str,
        channel: str,
        version: str,
    ) -> tuple[str, bytes]:
        """The stored pair `data` with its compression undone: from the cache when these
        very bytes were read at this location before, else decompressed (and kept).

        Pairs that are not compressed come back as they are. A frame that does not
        decompress also comes back as it is: the saver's usual read then raises the error
        that names the value."""
        tag, raw = data
        if not self._max or not is_compressed(tag):
            return data
        key = (thread_id, checkpoint_ns, channel, version)
        entry = self._lookup(key, tag, raw)
        if entry is not None:
            return entry[2]
        try:
            out = decompress_typed(data)
        except DeserializationError:
            return data
        self._store(key, (tag, raw, out, len(raw) + len(out[1]) + _ENTRY_OVERHEAD, None, None))
        return out

    def load(
        self,
        data: Typed,
        thread_id: str,
        checkpoint_ns: str,
        channel: str,
        version: str,
        fast: Callable[[Typed], Any],
        keep: bool = True,
    ) -> Any:
        """The stored pair `data` decoded: a fresh copy of its decoded value when these very
        bytes were decoded at this location before and kept (module doc), else
        `fast(pair)` with compression undone through the cache as `plain` does.

        `keep=False` (a page of `list`, whose values are mostly read once) serves from the
        cache but adds nothing to it: a listing would push out the values read again and
        again, such as a thread's head.

        `fast` is a `MsgpackSerializer.fast_loader()`: what it returns for plain data is
        what `_load_plain` returns, which is how a value is decided to be kept. Errors are
        `fast`'s: the caller reads a value that fails again its usual way."""
        tag, raw = data
        if not self._max or (len(raw) < _DECODED_MIN_BYTES and not is_compressed(tag)):
            # Nothing to undo and too small to keep decoded: never an entry to look up
            # (a wide state's dozens of small values per checkpoint).
            return fast(data)
        key = (thread_id, checkpoint_ns, channel, version)
        entry = self._lookup(key, tag, raw)
        if entry is not None:
            if entry[5] is not None:
                return entry[5](entry[4])
            plain = entry[2]
        elif is_compressed(tag):
            try:
                plain = decompress_typed(data)
            except DeserializationError:
                return fast(data)
        else:
            plain = data
        stored = plain[1]
        if not keep:
            return fast(plain)
        if (
            plain[0] != TAG_MSGPACK
            or type(stored) is not bytes
            or len(stored) < _DECODED_MIN_BYTES
            or (entry is not None and entry[4] is _UNCOPYABLE)
        ):
            if entry is None and plain is not data:
                cost = len(raw) + len(stored) + _ENTRY_OVERHEAD
                self._store(key, (tag, raw, plain, cost, None, None))
            return fast(plain)
        value = _load_plain(stored)
        copier = None if value is _NOT_PLAIN else copier_for(value)
        extra = len(stored) if plain is data else len(raw) + len(stored)
        if copier is None:  # kept as a pair only, and never tried again
            self._store(key, (tag, raw, plain, extra + _ENTRY_OVERHEAD, _UNCOPYABLE, None))
            return fast(plain) if value is _NOT_PLAIN else value
        kept = copier(value)  # the caller's value is theirs alone
        self._store(key, (tag, raw, plain, extra + 2 * len(stored) + _ENTRY_OVERHEAD, kept, copier))
        return value

    def load_composed(self, key: Key, data: Typed, base: Typed, make: Callable[[], Any]) -> Any:
        """A value made of two stored pairs, `data` at `key` and `base` (a tail row and its
        base, `savers/sql/tails.py`): a fresh copy when it was made from these very pairs
        before and kept, else `make()`, kept when it has an exact cheap copy (plain data,
        which reads alike under every serializer policy, as `load` keeps)."""
        if not self._max:
            return make()
        tag, raw = data
        entry = self._lookup(key, tag, raw)
        if entry is not None and entry[5] is not None and entry[2] == base:
            return entry[5](entry[4])
        value = make()
        copier = copier_for(value)
        if copier is not None:
            # Decoded objects weigh several times their compressed bytes (estimate).
            cost = _COMPOSED_WEIGHT * (len(base[1]) + len(raw)) + _ENTRY_OVERHEAD
            self._store(key, (tag, raw, base, cost, copier(value), copier))
        return value

    def _lookup(self, key: Key, tag: str, raw: bytes) -> _Entry | None:
        """The entry at `key` if it was made from these very stored bytes."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0] == tag and entry[1] == raw:
                self._entries.move_to_end(key)
                self.hits += 1
                return entry
            self.misses += 1
            return None

    def _store(self, key: Key, entry: _Entry) -> None:
        if entry[3] > self._max // 2:
            return  # one value would push most others out: not kept
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._size -= old[3]
            self._entries[key] = entry
            self._size += entry[3]
            self._evict()

    def drop_threads(self, thread_ids: Iterable[str]) -> None:
        """Forget the values of these threads (deleted, pruned, overwritten)."""
        doomed = set(thread_ids)
        if not doomed:
            return
        with self._lock:
            for key in [k for k in self._entries if k[0] in doomed]:
                self._size -= self._entries.pop(key)[3]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._size = 0

    def _evict(self) -> None:
        """Drop least recently used entries until within bounds (caller holds the lock)."""
        entries = self._entries
        while entries and self._size > self._max:
            self._size -= entries.popitem(last=False)[1][3]
