"""Delta histories of ancestors, answered from a descendant's history just read.

A timeline (LangGraph's `get_state_history`, the web viewer) lists a thread newest first
and asks the delta history of every checkpoint it shows: one walk per checkpoint, each
reading again most of what the previous one read. But the history of a checkpoint C holds
its ancestors' too. For an ancestor A of C newer than C's seed (the nearest stored value
above C), A's seed is that same seed, and A's writes are C's writes minus those pending on
the checkpoints from C's parent down to A itself: the newest ones, so a prefix of C's list
(oldest first). With no seed (a channel that never snapshots), that holds for every
ancestor.

So after a history is read, its rows are kept as they came, undecoded (`remember`:
nothing is sorted or copied for a history no one follows), and a request for a checkpoint
that the parent pointers of a listing just read (`links`) place between C and its seed is
answered from them (`answer`): the first answer sorts the rows by channel and decodes them
once, and keeps the objects (handed to no one), and each answer hands out fresh copies of
the part it needs (`fresh_copy`, five times cheaper than decoding; a value without an
exact cheap copy is decoded again from the rows for each answer instead). Anything else
reads as before.

What is kept is what was read: a history changes only if writes are added to a checkpoint
that already has children, or ancestors are deleted or compacted. This saver forgets a
thread's entries whenever it writes or deletes anything there; what other processes do
shows up once an entry ages out (`TTL_SECONDS`), as if the read had happened that much
earlier. Entries are few (`MAX_ENTRIES`) and answer only requests that follow them closely.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from checkpointer.savers.kept_history import KeptHistory, copy_history, keep_history
from checkpointer.savers.sql.plan import Row
from checkpointer.types import DeltaChannelHistory

TTL_SECONDS: Final = 2.0
"""How long a history read answers its ancestors' requests."""

MAX_ENTRIES: Final = 8
"""Histories kept at once (a few timelines read side by side)."""

MAX_LINKS: Final = 100_000
"""Parent pointers kept from listings, in all."""


@dataclass(slots=True)
class _Channel:
    seed_at: str | None
    """The checkpoint holding the seed; None: the walk found none (start empty)."""
    seeds: list[Row]
    writes: list[Row]
    """The write rows, oldest first; each row's `ref` is the checkpoint it is pending on."""


@dataclass(slots=True)
class _Entry:
    thread_id: str
    ns: str
    names: frozenset[str]
    rows: Sequence[Row]
    """The rows as read; sorted out by channel (`channels`) only when an ancestor asks."""
    decode: Callable[[list[Row], Sequence[str]], dict[str, DeltaChannelHistory]]
    made: float
    at: str
    """The checkpoint last answered (first: the one read), and its writes' cut."""
    channels: dict[str, _Channel] | None = None
    """Seeds and writes by channel (`_sorted`); empty when the rows cannot be reused."""
    cut: dict[str, int] = field(default_factory=dict)
    decoded: dict[str, KeptHistory] | None = None
    """The whole history decoded, at the first answer, when every value has an exact
    cheap copy (`fresh_copy`): later answers copy instead of decoding again."""
    copyable: bool = True


def _sorted(entry: _Entry) -> bool:
    """Sort the entry's rows out by channel, once (lock held); False when they cannot
    answer anything (they carry check rows: sealed records were verified on the way)."""
    if entry.channels is None:
        kept = {ch: _Channel(None, [], []) for ch in entry.names}
        for row in entry.rows:
            channel = kept.get(row[2])
            if channel is None:
                continue
            if row[0] == 0:
                channel.seed_at, channel.seeds = str(row[3]), [row]
            elif row[0] == 1:
                channel.writes.append(row)
            else:
                kept = {}
                break
        entry.channels = kept
        entry.cut = {ch: len(c.writes) for ch, c in kept.items()}
        entry.rows = ()
    return bool(entry.channels)


class HistoryReuse:
    """Histories just read, answering their ancestors' (see module). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, str, str], _Entry] = OrderedDict()
        self._parents: OrderedDict[tuple[str, str, str], str | None] = OrderedDict()
        self.hits = 0

    def links(self, pairs: Iterable[tuple[str, str, str, str | None]]) -> None:
        """(thread, ns, checkpoint id, parent id) of checkpoints a listing read."""
        with self._lock:
            parents = self._parents
            for thread_id, ns, checkpoint_id, parent_id in pairs:
                parents[(thread_id, ns, checkpoint_id)] = parent_id
            while len(parents) > MAX_LINKS:
                parents.popitem(last=False)

    def remember(
        self,
        thread_id: str,
        ns: str,
        checkpoint_id: str,
        channels: Sequence[str],
        rows: Sequence[Row],
        decode: Callable[[list[Row], Sequence[str]], dict[str, DeltaChannelHistory]],
    ) -> None:
        """Keep the rows of a history just read as they are (nothing is sorted or copied
        unless an ancestor asks), and `decode(rows, channels)` to read them as the
        statement's."""
        made = _Entry(
            thread_id, ns, frozenset(channels), rows, decode, time.monotonic(), checkpoint_id
        )
        with self._lock:
            self._entries[(thread_id, ns, checkpoint_id)] = made
            while len(self._entries) > MAX_ENTRIES:
                self._entries.popitem(last=False)

    def answer(
        self, thread_id: str, ns: str, checkpoint_id: str, channels: Sequence[str]
    ) -> dict[str, DeltaChannelHistory] | None:
        """The histories of `channels` at `checkpoint_id` from a kept descendant's, or
        None when none can tell."""
        now = time.monotonic()
        with self._lock:
            for key, entry in reversed(self._entries.items()):
                if key[0] != thread_id or key[1] != ns or now - entry.made > TTL_SECONDS:
                    continue
                if not entry.names.issuperset(channels):
                    continue
                # The parent pointers first: sorting an entry's rows costs as much as
                # reading them, and most requests (the same head again, another branch)
                # are not a close ancestor of any entry.
                path = self._path(entry, checkpoint_id)
                if path is None or not _sorted(entry):
                    continue
                cuts = self._cuts(entry, path)
                if cuts is None:
                    continue
                entry.at, entry.cut = checkpoint_id, cuts
                self.hits += 1
                break
            else:
                return None
        kept = entry.channels
        assert kept is not None  # sorted out before the walk
        if entry.decoded is None and entry.copyable:
            # The first answer decodes everything once; it is kept, never handed out.
            every = list(kept)
            whole = entry.decode([r for c in kept.values() for r in (*c.seeds, *c.writes)], every)
            decoded = {ch: keep_history(whole[ch]) for ch in every}
            if all(d is not None for d in decoded.values()):
                entry.decoded = decoded  # type: ignore[assignment]
            else:
                entry.copyable = False
        if entry.decoded is not None:
            return {ch: copy_history(entry.decoded[ch], cuts[ch]) for ch in channels}
        rows = [row for ch in channels for row in (*kept[ch].seeds, *kept[ch].writes[: cuts[ch]])]
        return entry.decode(rows, channels)

    def _path(self, entry: _Entry, target: str) -> list[str] | None:
        """The checkpoints from the parent of the entry's last answered one down to
        `target`, when the links make `target` a close ancestor of it (lock held)."""
        path: list[str] = []
        current = entry.at
        for _ in range(64):  # requests follow one another closely: a few steps at most
            parent = self._parents.get((entry.thread_id, entry.ns, current), _UNKNOWN)
            if parent is _UNKNOWN or parent is None:
                return None
            path.append(parent)
            if parent == target:
                return path
            current = parent
        return None

    @staticmethod
    def _cuts(entry: _Entry, path: list[str]) -> dict[str, int] | None:
        """The writes' cut per channel after leaving the checkpoints of `path`; None if
        the path reaches a seed (that checkpoint needs its own walk)."""
        assert entry.channels is not None  # sorted out before
        cuts = dict(entry.cut)
        for current in path:
            for ch, channel in entry.channels.items():
                if channel.seed_at == current:
                    return None  # at or past the seed: its own walk
                cut = cuts[ch]
                while cut and channel.writes[cut - 1][8] == current:
                    cut -= 1
                cuts[ch] = cut
        return cuts

    def forget(self, thread_ids: Iterable[str] | None = None) -> None:
        """Drop the entries (of these threads): they wrote or deleted there."""
        with self._lock:
            if thread_ids is None:
                self._entries.clear()
                self._parents.clear()
                return
            doomed = set(thread_ids)
            for key in [k for k in self._entries if k[0] in doomed]:
                del self._entries[key]


_UNKNOWN: Final[Any] = object()
