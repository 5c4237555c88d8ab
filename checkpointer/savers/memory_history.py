"""Delta histories of the in-memory saver, answered from a walk just made.

LangGraph's `get_state_history` lists a thread newest first and asks the delta history of
every checkpoint it lists: each request walks the ancestors again, so a thread of N steps
that never snapshots costs N walks of up to N ancestors (seconds at N = 1,000). The SQL
savers answer those requests from the history just read (`sql/history_reuse.py`); this is
the same idea for the in-memory saver, simpler because the saver sees every change.

A walk from checkpoint C passes its ancestors at positions 0 (the parent), 1, 2... and each
channel finds its seed at some position s (or none: the walk reached the root). For C
itself (position -1) or an ancestor A at position k < s for every asked channel, A's
history is the same seed and the writes pending on positions k+1 to s: C's writes without
the newest ones, a prefix of C's list (oldest first).

So the saver hands each walk here (`remember`) as it made it: the positions and the
visits, undecoded. The first request it can answer decodes the whole walk once and keeps
it (`kept_history`); every answer hands out fresh copies of its prefix. A walk holding a
value without a cheap exact copy, or too large to keep, is decoded again for each answer
instead (still without walking). Everything here is forgotten for a thread the saver
writes to, and entirely whenever it deletes anything, so no answer is ever stale. The
caller holds the saver's lock for every method.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from checkpointer.savers.kept_history import KeptHistory, copy_history, keep_history
from checkpointer.savers.memory_store import StoredWrite, Typed
from checkpointer.types import DeltaChannelHistory

MAX_WALKS: Final = 4
"""Walks kept at once (a few timelines read side by side)."""

Visit = tuple[str, list[tuple[str, str, Typed]], list[StoredWrite]]
"""One ancestor a walk passed with something for it: (checkpoint id, the stored values
found there as (channel, version, pair), its writes to channels still without a seed)."""

Decode = Callable[[list[str], list[Visit]], dict[str, DeltaChannelHistory]]
"""Visits (newest first) decoded into one history per channel of the list given."""


@dataclass(slots=True)
class _Walk:
    channels: list[str]
    names: frozenset[str]
    positions: dict[str, int]
    """Every checkpoint the walk passed by id: -1 the one it started from, then 0, 1..."""
    visits: list[Visit]
    decode: Decode
    cost: int
    seed_at: dict[str, int] | None = None
    """Where each channel found its seed (absent: nowhere); made at the first answer."""
    write_depths: dict[str, list[int]] | None = None
    """Per channel, minus the position of each write's checkpoint, oldest write first
    (ascending): the writes older than position k are the first `bisect_left(.., -k)`."""
    kept: dict[str, KeptHistory] | None = None
    copyable: bool = True


class HistoryMemo:
    """Walks just made, answering their ancestors' histories (see the module doc)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        """Stored bytes of the values of walks kept decoded, in all (0: nothing is kept)."""
        self._walks: OrderedDict[tuple[str, str, str], _Walk] = OrderedDict()
        self._size = 0
        self.hits = 0

    def remember(
        self,
        thread_id: str,
        ns: str,
        channels: list[str],
        positions: dict[str, int],
        visits: list[Visit],
        decode: Decode,
    ) -> None:
        """Keep a walk as it was made (nothing is decoded unless a request follows it)."""
        if not self.max_bytes or not positions:
            return
        cost = sum(len(data[1]) for _, found, _ in visits for _, _, data in found)
        cost += sum(len(w.value[1]) for _, _, writes in visits for w in writes)
        start = next(iter(positions))  # the checkpoint the walk started from
        walk = _Walk(channels, frozenset(channels), positions, visits, decode, cost)
        key = (thread_id, ns, start)
        self._drop(key)
        self._walks[key] = walk
        while len(self._walks) > MAX_WALKS:
            self._drop(next(iter(self._walks)))

    def answer(
        self, thread_id: str, ns: str, checkpoint_id: str, channels: Sequence[str]
    ) -> dict[str, DeltaChannelHistory] | None:
        """The histories of `channels` at `checkpoint_id` from a kept walk that passed it,
        or None when no kept walk can tell."""
        for key in reversed(self._walks):
            if key[0] != thread_id or key[1] != ns:
                continue
            walk = self._walks[key]
            position = walk.positions.get(checkpoint_id)
            if position is None or not walk.names.issuperset(channels):
                continue
            seed_at, depths = self._sorted(walk)
            if any(seed_at.get(ch, position + 1) <= position for ch in channels):
                continue  # at or past a seed: that checkpoint needs a walk of its own
            self.hits += 1
            self._walks.move_to_end(key)
            if walk.kept is None and walk.copyable:
                self._keep(walk)
            if walk.kept is not None:
                return {
                    ch: copy_history(walk.kept[ch], bisect_left(depths[ch], -position))
                    for ch in channels
                }
            older = [visit for visit in walk.visits if walk.positions[visit[0]] > position]
            whole = walk.decode(walk.channels, older)
            return {ch: whole[ch] for ch in channels}
        return None

    def forget(self, thread_id: str | None = None) -> None:
        """Drop the walks (of one thread): the saver wrote or deleted there."""
        if not self._walks:
            return
        if thread_id is None:
            self._walks.clear()
            self._size = 0
            return
        for key in [k for k in self._walks if k[0] == thread_id]:
            self._drop(key)

    @staticmethod
    def _sorted(walk: _Walk) -> tuple[dict[str, int], dict[str, list[int]]]:
        """Where each channel's seed and writes are along the walk (made once)."""
        if walk.seed_at is None or walk.write_depths is None:
            positions = walk.positions
            seed_at: dict[str, int] = {}
            depths: dict[str, list[int]] = {ch: [] for ch in walk.channels}
            for checkpoint_id, found, writes in reversed(walk.visits):  # oldest first
                position = positions[checkpoint_id]
                for channel, _, _ in found:
                    seed_at[channel] = position
                for write in writes:
                    depths[write.channel].append(-position)
            walk.seed_at, walk.write_depths = seed_at, depths
        return walk.seed_at, walk.write_depths

    def _keep(self, walk: _Walk) -> None:
        """Decode the whole walk once and keep it, when every value has a cheap exact copy
        and it fits (the oldest kept walks make room)."""
        walk.copyable = False  # decided once, whatever the outcome
        if walk.cost > self.max_bytes // 2:
            return
        whole = walk.decode(walk.channels, walk.visits)
        kept: dict[str, KeptHistory] = {}
        for channel in walk.channels:
            history = keep_history(whole[channel])
            if history is None:
                return
            kept[channel] = history
        walk.kept = kept
        self._size += walk.cost
        while self._size > self.max_bytes:
            oldest = next(key for key, w in self._walks.items() if w.kept is not None)
            self._drop(oldest)

    def _drop(self, key: tuple[str, str, str]) -> None:
        walk = self._walks.pop(key, None)
        if walk is not None and walk.kept is not None:
            self._size -= walk.cost
