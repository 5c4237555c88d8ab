"""A decoded delta history kept by a saver, handed out again as fresh copies.

A timeline asks the delta history of every checkpoint it shows, and most of those are a
prefix of one history already read (`sql/history_reuse.py`, `memory_history.py`). Once
that history is decoded, the saver keeps it (never handing the kept objects out) and
answers each later request with copies of the part it needs: for the shapes chat histories
take, a copy by a few C calls (`fresh_copy`) costs a fifth of decoding again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from checkpointer.serde.fresh_copy import Copier, copier_for
from checkpointer.types import DeltaChannelHistory


@dataclass(slots=True)
class KeptHistory:
    """One channel's decoded history, each value with the copier that makes it fresh."""

    seed: tuple[Any, Copier] | None
    writes: list[tuple[str, str, Any, Copier]]
    """(task id, channel, value, copier), oldest first."""


def keep_history(history: DeltaChannelHistory) -> KeptHistory | None:
    """`history` (fresh objects, handed to no one else) kept with the copier of each value,
    or None when some value has no cheap exact copy (it must be decoded again instead)."""
    seed = None
    if "seed" in history:
        copy = copier_for(history["seed"])
        if copy is None:
            return None
        seed = (history["seed"], copy)
    writes = []
    for task_id, channel, value in history["writes"]:
        copy = copier_for(value)
        if copy is None:
            return None
        writes.append((task_id, channel, value, copy))
    return KeptHistory(seed, writes)


def copy_history(kept: KeptHistory, cut: int) -> DeltaChannelHistory:
    """A fresh history made of the kept seed and the oldest `cut` writes."""
    out: DeltaChannelHistory = {
        "writes": [(task_id, ch, copy(value)) for task_id, ch, value, copy in kept.writes[:cut]]
    }
    if kept.seed is not None:
        out["seed"] = kept.seed[1](kept.seed[0])
    return out
