"""Data lifecycle vocabulary: retention policies, what an operation did, thread summaries.

Types only. Every saver implements the operations with one shared planner
(`checkpointer.savers.retention`):

- `saver.apply_retention(policy, thread_ids=..., channels=..., dry_run=...)` trims history
  with `KeepLast(n)`, `MaxAge(timedelta)` or `IdleThreadTTL(timedelta)`;
- `saver.compact(thread_id, channels=..., keep_recent=n)` folds a long delta history into a
  snapshot plus the recent writes;
- `saver.pin(config)` / `unpin(config)` protect checkpoints from every policy;
- `saver.list_threads(...)`, `set_thread_ttl(...)`, `sweep_expired()` read and act on the
  per-thread summary the SQL savers maintain on every write;
- `saver.reclaim_space()` gives freed pages back to the file system.

Every operation has an `a`-prefixed async twin.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from checkpointer.errors import ConfigError

ThreadSort = Literal["updated", "count", "bytes", "id"]
THREAD_SORTS: tuple[str, ...] = ("updated", "count", "bytes", "id")


def _positive_duration(value: object, what: str) -> None:
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise ConfigError(f"{what} must be a positive timedelta, got {value!r}")


@dataclass(frozen=True, slots=True)
class KeepLast:
    """Keep the newest `n` checkpoints of each namespace of a thread; older ones go."""

    n: int

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise ConfigError(f"KeepLast(n) needs an int n >= 1, got {self.n!r}")

    def describe(self) -> str:
        return f"keep the last {self.n} checkpoint(s) per namespace"


@dataclass(frozen=True, slots=True)
class MaxAge:
    """Drop checkpoints created (their `ts`) more than `max_age` ago.

    The newest checkpoint of each namespace always stays: trimming history never empties a
    thread (deleting whole idle threads is `IdleThreadTTL`'s job).
    """

    max_age: timedelta

    def __post_init__(self) -> None:
        _positive_duration(self.max_age, "MaxAge(max_age)")

    def describe(self) -> str:
        return f"drop checkpoints older than {self.max_age}"


@dataclass(frozen=True, slots=True)
class IdleThreadTTL:
    """Delete whole threads that saw no write (checkpoint or pending write) for `ttl`.

    Threads holding a pinned checkpoint are never deleted. A thread waiting on a human
    (an interrupt with no checkpoint after it) is deleted like any other idle thread unless
    `keep_interrupted=True`.
    """

    ttl: timedelta
    keep_interrupted: bool = False

    def __post_init__(self) -> None:
        _positive_duration(self.ttl, "IdleThreadTTL(ttl)")

    def describe(self) -> str:
        spare = ", sparing interrupted threads" if self.keep_interrupted else ""
        return f"delete threads idle for more than {self.ttl}{spare}"


RetentionPolicy = KeepLast | MaxAge | IdleThreadTTL


def validate_policy(policy: object) -> RetentionPolicy:
    if not isinstance(policy, KeepLast | MaxAge | IdleThreadTTL):
        raise ConfigError(
            f"unknown retention policy {policy!r}; use KeepLast(n), MaxAge(timedelta) or "
            "IdleThreadTTL(timedelta)"
        )
    return policy


@dataclass(frozen=True, slots=True)
class ThreadSummary:
    """One thread at a glance, read from the summary kept up to date on every write.

    `bytes` is the stored payload (checkpoint records and metadata, channel values, pending
    writes), not the space indexes and pages take on disk. `head_checkpoint_id` is the
    newest checkpoint of the root namespace.
    """

    thread_id: str
    head_checkpoint_id: str | None
    checkpoint_count: int
    bytes: int
    created_at: datetime
    updated_at: datetime
    ttl: timedelta | None = None
    expires_at: datetime | None = None
    pinned: int = 0


@dataclass(slots=True)
class ThreadOutcome:
    """What a lifecycle operation did (or, in a dry run, would do) to one thread."""

    thread_id: str
    checkpoints_before: int = 0
    deleted: list[tuple[str, str]] = field(default_factory=list)
    """(checkpoint_ns, checkpoint_id) of each checkpoint removed from a thread that stays
    (empty when the whole thread was deleted: see `thread_deleted`)."""
    kept_for_history: int = 0
    """Checkpoints the policy would drop, kept because a kept one replays delta writes
    from them (pass `channels=` to materialize a snapshot instead)."""
    materialized: list[tuple[str, str]] = field(default_factory=list)
    """Checkpoints that received a stored snapshot so their ancestors could go."""
    writes_deleted: int = 0
    blobs_deleted: int = 0
    bytes_freed: int = 0
    bytes_added: int = 0
    thread_deleted: bool = False
    skipped: str | None = None
    """Why the thread was left alone (pinned, waiting on an interrupt), if it was."""

    @property
    def checkpoints_deleted(self) -> int:
        return self.checkpoints_before if self.thread_deleted else len(self.deleted)

    @property
    def bytes_reclaimed(self) -> int:
        return self.bytes_freed - self.bytes_added


@dataclass(slots=True)
class RetentionReport:
    """The outcome of `apply_retention`, `compact` or `sweep_expired`, thread by thread."""

    policy: str
    dry_run: bool
    threads: list[ThreadOutcome] = field(default_factory=list)

    @property
    def threads_examined(self) -> int:
        return len(self.threads)

    @property
    def threads_deleted(self) -> list[str]:
        return [t.thread_id for t in self.threads if t.thread_deleted]

    @property
    def checkpoints_deleted(self) -> int:
        return sum(t.checkpoints_deleted for t in self.threads)

    @property
    def writes_deleted(self) -> int:
        return sum(t.writes_deleted for t in self.threads)

    @property
    def blobs_deleted(self) -> int:
        return sum(t.blobs_deleted for t in self.threads)

    @property
    def kept_for_history(self) -> int:
        return sum(t.kept_for_history for t in self.threads)

    @property
    def materialized(self) -> int:
        return sum(len(t.materialized) for t in self.threads)

    @property
    def bytes_freed(self) -> int:
        return sum(t.bytes_freed for t in self.threads)

    @property
    def bytes_added(self) -> int:
        return sum(t.bytes_added for t in self.threads)

    @property
    def bytes_reclaimed(self) -> int:
        """Payload bytes gone, net of the snapshots written to make that possible."""
        return self.bytes_freed - self.bytes_added

    def summary(self) -> str:
        """One line for logs and the CLI."""
        verb = "would delete" if self.dry_run else "deleted"
        parts = [
            f"{self.policy}: {verb} {self.checkpoints_deleted} checkpoint(s)",
            f"{len(self.threads_deleted)} thread(s)",
            f"{self.writes_deleted} write(s)",
            f"{self.blobs_deleted} value(s)",
            f"reclaiming {self.bytes_reclaimed} bytes",
        ]
        if self.materialized:
            parts.append(f"{self.materialized} snapshot(s) materialized")
        if self.kept_for_history:
            parts.append(f"{self.kept_for_history} kept for delta history")
        skipped = sum(1 for t in self.threads if t.skipped)
        if skipped:
            parts.append(f"{skipped} thread(s) skipped")
        return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class SpaceReport:
    """Storage size before and after `reclaim_space` (file bytes on SQLite, relation bytes
    on PostgreSQL; None where the saver has no such notion)."""

    before_bytes: int | None
    after_bytes: int | None
    actions: tuple[str, ...] = ()

    @property
    def reclaimed_bytes(self) -> int | None:
        if self.before_bytes is None or self.after_bytes is None:
            return None
        return self.before_bytes - self.after_bytes
