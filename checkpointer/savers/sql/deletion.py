"""Deleting checkpoints without breaking delta channels: the skeleton of a thread (parent
pointers, versions, which values exist), the ancestors a checkpoint replays from, and
the delete plans built on them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from checkpointer.savers.base import history_loop, runs_still_needed
from checkpointer.savers.retention import delta_channels_of
from checkpointer.savers.sql.dialect import Dialect
from checkpointer.savers.sql.plan import Plan, Stmt
from checkpointer.savers.sql.records import json_value, version_text
from checkpointer.savers.sql.summaries import refresh_summaries_plan


@dataclass(slots=True)
class _Node:
    parent_id: str | None
    run_id: str | None
    versions: dict[str, str]
    delta_channels: frozenset[str]


Namespaces = dict[tuple[str, str], dict[str, _Node]]
BlobKey = tuple[str, str, str, str]


def _skeleton_plan(
    d: Dialect, thread_ids: Sequence[str]
) -> Plan[tuple[Namespaces, set[BlobKey], dict[BlobKey, str]]]:
    """The shape of some threads, without any value: parent pointers, run ids, channel
    versions, which (channel, version) blobs exist, and the base version of each tail row
    among them (`tails.py`). Lifecycle decisions need no more."""
    rows = yield Stmt(
        "SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id, "
        f"{d.versions_column('checkpoint')}, {d.counters_column('metadata')}, "
        f"{d.inline_keys_column('checkpoint')} "
        f"FROM {d.checkpoints} WHERE {d.in_list('thread_id', 'threads')}",
        {"threads": d.list_param(list(thread_ids))},
        fetch=True,
    )
    namespaces: Namespaces = {}
    stored: set[BlobKey] = set()
    for thread_id, ns, checkpoint_id, parent_id, run_id, versions, counters, inline in rows:
        node = _Node(
            parent_id,
            run_id,
            {k: version_text(v) for k, v in (json_value(versions) or {}).items()},
            delta_channels_of(json_value(counters)),
        )
        namespaces.setdefault((thread_id, ns), {})[checkpoint_id] = node
        # A value kept inline is stored at its version as much as a value row is.
        stored.update(inline_keys(thread_id, ns, node.versions, inline))
    blob_rows = yield Stmt(
        f"SELECT thread_id, checkpoint_ns, channel, version, base_version FROM {d.blobs} "
        f"WHERE {d.in_list('thread_id', 'threads')}",
        {"threads": d.list_param(list(thread_ids))},
        fetch=True,
    )
    bases: dict[BlobKey, str] = {}
    for t, ns, ch, v, base in blob_rows:
        key = (str(t), str(ns), str(ch), str(v))
        stored.add(key)
        if base is not None:
            bases[key] = str(base)
    return namespaces, stored, bases


def inline_keys(thread_id: str, ns: str, versions: Mapping[str, str], inline: Any) -> list[BlobKey]:
    """The (thread, ns, channel, version) keys of the values a record keeps inline, from
    `Dialect.inline_keys_column` (JSON of the names, or None)."""
    names = json_value(inline) if inline is not None else None
    if not isinstance(names, list):
        return []
    return [(thread_id, ns, ch, versions[ch]) for ch in names if ch in versions]


def history_ancestors(
    thread_id: str, ns: str, namespace: Mapping[str, _Node], checkpoint_id: str, blobs: set[BlobKey]
) -> list[str]:
    """Ancestors whose writes or values the delta channels of `checkpoint_id` replay: back to
    the nearest stored value of every channel that has a version but no value here."""
    node = namespace[checkpoint_id]
    remaining = {
        ch
        for ch, v in node.versions.items()
        if ch in node.delta_channels and (thread_id, ns, ch, v) not in blobs
    }
    chain: list[str] = []
    cursor = node.parent_id
    seen = {checkpoint_id}
    while remaining and cursor is not None and cursor in namespace:
        if cursor in seen:
            raise history_loop(thread_id, ns, cursor)
        seen.add(cursor)
        chain.append(cursor)
        ancestor = namespace[cursor]
        remaining = {
            ch
            for ch in remaining
            if ch not in ancestor.versions
            or (thread_id, ns, ch, ancestor.versions[ch]) not in blobs
        }
        cursor = ancestor.parent_id
    return chain


def _delete_plan(
    d: Dialect,
    namespaces: Namespaces,
    blobs: set[BlobKey],
    doomed: dict[tuple[str, str], set[str]],
    bases: Mapping[BlobKey, str],
) -> Plan[None]:
    """Delete checkpoints (and the writes pending on them), then blobs no remaining
    checkpoint of their namespace references, directly or as the base of a tail row it
    references (`tails.py`). Writes of checkpoints not saved yet stay."""
    keys = [(t, ns, cid) for (t, ns), ids in doomed.items() for cid in sorted(ids)]
    if not keys:
        return
    columns = ("thread_id", "checkpoint_ns", "checkpoint_id")
    yield d.delete_keys(d.writes, columns, keys)
    yield d.delete_keys(d.checkpoints, columns, keys)
    referenced = {
        (t, ns, ch, v)
        for (t, ns), namespace in namespaces.items()
        for cid, node in namespace.items()
        if cid not in doomed.get((t, ns), ())
        for ch, v in node.versions.items()
    }
    referenced.update(
        (key[0], key[1], key[2], bases[key]) for key in list(referenced) if key in bases
    )
    touched = set(doomed)
    garbage = sorted(k for k in blobs if (k[0], k[1]) in touched and k not in referenced)
    if garbage:
        yield d.delete_keys(d.blobs, ("thread_id", "checkpoint_ns", "channel", "version"), garbage)


def delete_for_runs_plan(
    d: Dialect, run_ids: Sequence[str], thread_ids: Sequence[str] | None = None
) -> Plan[None]:
    """Checkpoints created by the runs, their writes, and blobs nothing else uses (only in
    `thread_ids` when given).

    Refuses (CheckpointerError) when a checkpoint of another run rebuilds a delta channel
    from a doomed one: deleting would silently change that checkpoint's state.
    """
    runs = [str(r) for r in run_ids]
    rows = yield Stmt(
        f"SELECT DISTINCT thread_id FROM {d.checkpoints} WHERE {d.in_list('run_id', 'runs')}",
        {"runs": d.list_param(runs)},
        fetch=True,
    )
    if thread_ids is not None:
        rows = [r for r in rows if r[0] in set(thread_ids)]
    if not rows:
        return
    threads = sorted({str(r[0]) for r in rows})
    # As retention does: writers of these threads queue behind the decision (PostgreSQL;
    # SQLite's write transaction already excludes them), in one order against deadlocks.
    for thread_id in threads:
        if (lock := d.lock_thread(thread_id)) is not None:
            yield lock
    namespaces, blobs, bases = yield from _skeleton_plan(d, threads)
    wanted = set(runs)
    doomed: dict[tuple[str, str], set[str]] = {}
    for (thread_id, ns), namespace in namespaces.items():
        ids = {cid for cid, node in namespace.items() if node.run_id in wanted}
        if not ids:
            continue
        for cid in namespace:
            if cid in ids:
                continue
            needed = ids.intersection(history_ancestors(thread_id, ns, namespace, cid, blobs))
            if needed:
                raise runs_still_needed(thread_id, cid, needed)
        doomed[(thread_id, ns)] = ids
    yield from _delete_plan(d, namespaces, blobs, doomed, bases)
    yield from refresh_summaries_plan(d, sorted({t for t, _ in doomed}))
