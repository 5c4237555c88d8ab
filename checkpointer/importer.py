"""Move threads written by LangGraph's own savers into ours.

Reads a database written by `langgraph-checkpoint-sqlite` or `langgraph-checkpoint-postgres`
read-only through `checkpointer.inspect_langgraph.LangGraphReader` (LangGraph's serializer
decodes the values; each write keeps its task path and slot), and saves everything through
the target saver, with that saver's own serializer: checkpoints oldest first, each channel
value once per version, pending writes in their original slots and order. The CLI's
`import-langgraph` and `import_from_url` are this one path.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from checkpointer.errors import CheckpointerError
from checkpointer.savers.base import BaseCheckpointSaver
from checkpointer.types import WRITES_IDX_MAP, make_config


@dataclass
class ImportReport:
    """What an import did, per thread: `threads` copied by this run; `present` already in
    the target checkpoint for checkpoint (a re-run of a finished import: nothing to do);
    `skipped` where the target holds a thread of that id with other checkpoints (never
    merged; the reason is in `reasons`). Counts are of what this run wrote."""

    threads: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)
    checkpoints: int = 0
    writes: int = 0
    blobs: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "threads": len(self.threads),
            "checkpoints": self.checkpoints,
            "blobs": self.blobs,
            "writes": self.writes,
            "thread_ids": list(self.threads),
            "already_present": list(self.present),
            "skipped": [{"thread_id": t, "reason": self.reasons.get(t, "")} for t in self.skipped],
        }


@dataclass(frozen=True, slots=True)
class _RawWrite:
    task_id: str
    task_path: str
    idx: int
    channel: str
    value: Any


class ImportSourceError(CheckpointerError):
    """The import source is not a database of LangGraph's savers (or names no such thread)."""


def _batches_in_slots(writes: list[_RawWrite]) -> list[list[tuple[str, Any]]]:
    """Rebuild `put_writes` batches that store each write in its original slot.

    A regular write's slot is its position in the batch; special channels have fixed
    negative slots, so they fill the positions between regular writes (as they did when the
    batch was first written) and any left over go in a batch of their own.
    """
    regular = {w.idx: w for w in writes if w.idx >= 0}
    special = [w for w in writes if w.idx < 0]
    batch: list[tuple[str, Any]] = []
    size = max(regular) + 1 if regular else 0
    for position in range(size):
        if position in regular:
            batch.append((regular[position].channel, regular[position].value))
        elif special:
            filler = special.pop(0)
            batch.append((filler.channel, filler.value))
        else:
            raise CheckpointerError(
                f"task {writes[0].task_id}: write slot {position} is missing in the source; "
                "it cannot be imported losslessly"
            )
    batches = [batch] if batch else []
    if special:
        batches.append([(w.channel, w.value) for w in special])
    for w in special:
        if WRITES_IDX_MAP.get(w.channel) != w.idx:
            raise CheckpointerError(
                f"task {w.task_id}: channel {w.channel!r} stored at slot {w.idx}, which this "
                "version does not know how to reproduce"
            )
    return batches


def _existing(target: BaseCheckpointSaver, thread_id: str) -> set[tuple[str, str]]:
    """(namespace, checkpoint id) of every checkpoint the target holds for the thread."""
    found: set[tuple[str, str]] = set()
    for tup in target.list({"configurable": {"thread_id": thread_id}}):
        conf = tup.config["configurable"]
        found.add((conf.get("checkpoint_ns", ""), conf["checkpoint_id"]))
    return found


def import_threads(
    source: Any,
    target: BaseCheckpointSaver,
    *,
    thread_ids: list[str] | None = None,
    on_thread: Callable[[str, int], None] | None = None,
) -> ImportReport:
    """Copy threads from `source` (a `LangGraphReader`) into `target` (all threads by
    default). A thread the target already holds is left alone: `present` when it holds
    exactly the source's checkpoints, else `skipped`."""
    from checkpointer.langgraph import LangGraphSaver

    wanted = list(dict.fromkeys(thread_ids)) if thread_ids else source.all_thread_ids()
    if thread_ids:
        source.require_threads(wanted)
    writer = LangGraphSaver(target)
    report = ImportReport()
    for thread_id in wanted:
        tuples = list(source.checkpoints_oldest_first(thread_id))
        keys = {(t.checkpoint_ns, t.checkpoint_id) for t in tuples}
        existing = _existing(target, thread_id)
        if existing:
            if existing == keys:
                report.present.append(thread_id)
            else:
                report.skipped.append(thread_id)
                report.reasons[thread_id] = (
                    f"the target already has a thread {thread_id!r} with other checkpoints "
                    f"({len(existing)} there, {len(keys)} in the source); delete it there "
                    "first to import it"
                )
            if on_thread is not None:
                on_thread(thread_id, 0)
            continue
        stored_versions: dict[tuple[str, str], set[str]] = defaultdict(set)
        for raw in tuples:
            ns, checkpoint_id = raw.checkpoint_ns, raw.checkpoint_id
            checkpoint = dict(raw.record)
            checkpoint["channel_values"] = {
                ch: source.load_native(value) for ch, value in raw.blobs.items()
            }
            checkpoint.setdefault("id", checkpoint_id)
            versions = checkpoint.get("channel_versions") or {}
            new_versions = {}
            for channel in checkpoint["channel_values"]:
                if channel not in versions:
                    continue
                version = str(versions[channel])
                if version not in stored_versions[(ns, channel)]:
                    stored_versions[(ns, channel)].add(version)
                    new_versions[channel] = versions[channel]
            writer.put(
                make_config(thread_id, ns, raw.parent_id),
                checkpoint,  # type: ignore[arg-type]
                dict(raw.metadata),  # type: ignore[arg-type]
                new_versions,
            )
            report.checkpoints += 1
            report.blobs += len(new_versions)
            by_task: dict[tuple[str, str], list[_RawWrite]] = defaultdict(list)
            for w in raw.writes:
                by_task[(w.task_path, w.task_id)].append(
                    _RawWrite(w.task_id, w.task_path, w.idx, w.channel, source.load_native(w.raw))
                )
            target_config = make_config(thread_id, ns, checkpoint_id)
            for (task_path, task_id), writes in by_task.items():
                for batch in _batches_in_slots(writes):
                    writer.put_writes(target_config, batch, task_id, task_path)
                report.writes += len(writes)
        report.threads.append(thread_id)
        if on_thread is not None:
            on_thread(thread_id, len(tuples))
    return report


@contextmanager
def open_source(url: str, *, schema: str | None = None) -> Iterator[Any]:
    """The LangGraph database at `url`, read-only; a clear error naming the source when it
    cannot be read or holds no LangGraph tables."""
    from checkpointer.inspect import Database
    from checkpointer.inspect_langgraph import LangGraphReader, has_langgraph_tables

    try:
        with Database.open(url, schema=schema, readonly=True) as db:
            try:
                found = has_langgraph_tables(db)
            except CheckpointerError:
                raise
            except Exception as exc:
                raise ImportSourceError(
                    f"cannot read the import source {db.where}: {' '.join(str(exc).split())}"
                ) from exc
            if not found:
                what = (
                    "it is a checkpointer database (use `checkpointer export` and `import`)"
                    if db.revision() is not None
                    else "it holds no LangGraph checkpoint tables"
                )
                raise ImportSourceError(f"the import source {db.where} is not LangGraph's: {what}")
            yield LangGraphReader.over(db)
    except ImportSourceError:
        raise
    except CheckpointerError as exc:
        raise ImportSourceError(f"import source: {exc}") from exc


def import_from_url(
    url: str,
    target: BaseCheckpointSaver,
    *,
    thread_ids: list[str] | None = None,
    on_thread: Callable[[str, int], None] | None = None,
    schema: str | None = None,
) -> ImportReport:
    """Open the LangGraph database at `url` (read-only) and import its threads into
    `target`; the CLI's `import-langgraph` runs this too."""
    with open_source(url, schema=schema) as source:
        return import_threads(source, target, thread_ids=thread_ids, on_thread=on_thread)
