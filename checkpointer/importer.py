"""Move threads written by LangGraph's reference savers into ours.

Reads a database written by `langgraph-checkpoint-sqlite` or `langgraph-checkpoint-postgres`
through the reference saver itself (so its serializer decodes the values), reads each write's
task path and slot from the reference tables (the reference API does not return them), and
saves everything through our saver: checkpoints oldest first, each channel value once per
version, pending writes in their original slots and order.
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
    """What an import copied."""

    threads: list[str] = field(default_factory=list)
    checkpoints: int = 0
    writes: int = 0
    blobs: int = 0


@dataclass(frozen=True, slots=True)
class _RawWrite:
    task_id: str
    task_path: str
    idx: int
    channel: str
    value: Any


class _ReferenceSource:
    """A reference database, opened through the reference saver."""

    def __init__(self, saver: Any, query: Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]]):
        self.saver = saver
        self._query = query
        self.writes_table = "writes" if _is_sqlite_saver(saver) else "checkpoint_writes"

    def thread_ids(self) -> list[str]:
        rows = self._query("SELECT DISTINCT thread_id FROM checkpoints ORDER BY thread_id", ())
        return [str(r[0]) for r in rows]

    def writes_of(self, thread_id: str, ns: str, checkpoint_id: str) -> list[_RawWrite]:
        rows = self._query(
            f"SELECT task_id, task_path, idx, channel, type, "
            f"{'value' if self.writes_table == 'writes' else 'blob'} FROM {self.writes_table} "
            "WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s",
            (thread_id, ns, checkpoint_id),
        )
        serde = self.saver.serde
        out = [
            _RawWrite(
                task_id=str(task_id),
                task_path=task_path or "",
                idx=int(idx),
                channel=channel,
                value=serde.loads_typed((type_, bytes(blob) if blob is not None else b"")),
            )
            for task_id, task_path, idx, channel, type_, blob in rows
        ]
        out.sort(key=lambda w: (w.task_path, w.task_id, w.idx))
        return out


def _is_sqlite_saver(saver: Any) -> bool:
    return type(saver).__module__.startswith("langgraph.checkpoint.sqlite")


@contextmanager
def open_reference(url: str) -> Iterator[_ReferenceSource]:
    """Open a reference database: a Postgres URL, or a SQLite path / `sqlite:///` URL."""
    if url.startswith(("postgres://", "postgresql://")):
        try:
            from langgraph.checkpoint.postgres import PostgresSaver
        except ImportError as exc:
            raise CheckpointerError(
                "importing from Postgres needs langgraph-checkpoint-postgres: "
                "pip install 'checkpointer[bench]'"
            ) from exc
        with PostgresSaver.from_conn_string(url) as pg_saver:

            def pg_query(sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
                with pg_saver._cursor() as cur:
                    cur.execute(sql, params)
                    return [tuple(r.values()) if isinstance(r, dict) else r for r in cur.fetchall()]

            yield _ReferenceSource(pg_saver, pg_query)
        return
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver
    except ImportError as exc:
        raise CheckpointerError(
            "importing from SQLite needs langgraph-checkpoint-sqlite: "
            "pip install 'checkpointer[bench]'"
        ) from exc
    path = url.removeprefix("sqlite:///")
    with SqliteSaver.from_conn_string(path) as sqlite_saver:

        def sqlite_query(sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
            with sqlite_saver.cursor(transaction=False) as cur:
                cur.execute(sql.replace("%s", "?"), params)
                return list(cur.fetchall())

        yield _ReferenceSource(sqlite_saver, sqlite_query)


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


def import_threads(
    source: _ReferenceSource,
    target: BaseCheckpointSaver,
    *,
    thread_ids: list[str] | None = None,
    on_thread: Callable[[str, int], None] | None = None,
) -> ImportReport:
    """Copy threads from a reference database into `target` (all threads by default)."""
    from checkpointer.langgraph import LangGraphSaver

    writer = LangGraphSaver(target)
    report = ImportReport()
    for thread_id in thread_ids or source.thread_ids():
        tuples = list(source.saver.list({"configurable": {"thread_id": thread_id}}))
        tuples.reverse()  # oldest first: a parent is saved before its children
        stored_versions: dict[tuple[str, str], set[str]] = defaultdict(set)
        for tup in tuples:
            conf = tup.config["configurable"]
            ns, checkpoint_id = conf.get("checkpoint_ns", ""), conf["checkpoint_id"]
            parent = tup.parent_config
            parent_id = parent["configurable"]["checkpoint_id"] if parent else None
            checkpoint = dict(tup.checkpoint)
            new_versions = {}
            for channel in checkpoint["channel_values"]:
                version = str(checkpoint["channel_versions"].get(channel))
                if version not in stored_versions[(ns, channel)]:
                    stored_versions[(ns, channel)].add(version)
                    new_versions[channel] = checkpoint["channel_versions"][channel]
            writer.put(
                make_config(thread_id, ns, parent_id),
                checkpoint,  # type: ignore[arg-type]
                dict(tup.metadata),  # type: ignore[arg-type]
                new_versions,
            )
            report.checkpoints += 1
            report.blobs += len(new_versions)
            by_task: dict[tuple[str, str], list[_RawWrite]] = defaultdict(list)
            for write in source.writes_of(thread_id, ns, checkpoint_id):
                by_task[(write.task_path, write.task_id)].append(write)
            target_config = make_config(thread_id, ns, checkpoint_id)
            for (task_path, task_id), writes in by_task.items():
                for batch in _batches_in_slots(writes):
                    writer.put_writes(target_config, batch, task_id, task_path)
                report.writes += len(writes)
        report.threads.append(thread_id)
        if on_thread is not None:
            on_thread(thread_id, len(tuples))
    return report


def import_from_url(
    url: str,
    target: BaseCheckpointSaver,
    *,
    thread_ids: list[str] | None = None,
    on_thread: Callable[[str, int], None] | None = None,
) -> ImportReport:
    """Open the reference database at `url` and import its threads into `target`."""
    with open_reference(url) as source:
        return import_threads(source, target, thread_ids=thread_ids, on_thread=on_thread)
