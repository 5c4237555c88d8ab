"""Where encrypted values are stored, read without a key.

Every stored value with its location (for audits and tests), and statements that tell
whether a thread holds values bound to their location, for tools that must not copy such
values as bytes.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any

from checkpointer.serde.encryption_format import FLAG_BOUND, TAG_ENCRYPTED
from checkpointer.serde.located import ValueLocation
from checkpointer.serde.reencryption import is_memory_saver


def iter_stored_values(saver: Any) -> Iterator[tuple[ValueLocation, tuple[str, bytes]]]:
    """Every stored value with its location, as the storage holds it (for audits and tests):
    blobs and pending writes of the sync SQL savers; also records of the in-memory saver.
    Metadata is JSON text in every saver (filterable, so never encrypted)."""
    if is_memory_saver(saver):
        with saver._lock:
            items: list[tuple[ValueLocation, tuple[str, bytes]]] = [
                (ValueLocation.blob(*key), data) for key, data in saver._blobs.items()
            ]
            for thread_id, namespaces in saver._threads.items():
                for ns, namespace in namespaces.items():
                    for checkpoint_id, stored in namespace.items():
                        items.append(
                            (ValueLocation.checkpoint(thread_id, ns, checkpoint_id), stored.record)
                        )
                        for w in stored.writes.values():
                            items.append(
                                (
                                    ValueLocation.write(
                                        thread_id, ns, checkpoint_id, w.task_id, w.idx, w.channel
                                    ),
                                    w.value,
                                )
                            )
        yield from items
        return
    from checkpointer.savers.sql.plan import Op, Stmt, single

    d = saver._dialect
    rows = saver._drive(
        _one_op(
            Op(
                single(
                    Stmt(
                        f"SELECT thread_id, checkpoint_ns, channel, version, type, blob "
                        f"FROM {d.blobs}",
                        (),
                        fetch=True,
                    )
                )
            )
        )
    )
    for t, ns, ch, v, tag, blob in rows:
        yield ValueLocation.blob(t, ns, ch, v), (tag, bytes(blob))
    rows = saver._drive(
        _one_op(
            Op(
                single(
                    Stmt(
                        f"SELECT thread_id, checkpoint_ns, checkpoint_id, "
                        f"{d.task_id_text('task_id')}, idx, channel, type, blob FROM {d.writes}",
                        (),
                        fetch=True,
                    )
                )
            )
        )
    )
    for t, ns, cid, task_id, idx, ch, tag, blob in rows:
        task, slot = d.decode_write_key(task_id, idx)
        yield ValueLocation.write(t, ns, cid, task, slot, ch), (tag, bytes(blob))
    from checkpointer.savers.sql.inline import inline_at_versions, stored_form
    from checkpointer.savers.sql.inspect import json_doc

    rows = saver._drive(
        _one_op(
            Op(
                single(
                    Stmt(
                        f"SELECT thread_id, checkpoint_ns, checkpoint_id, checkpoint "
                        f"FROM {d.checkpoints} WHERE {d.record_has_inline('checkpoint')}",
                        (),
                        fetch=True,
                    )
                )
            )
        )
    )
    for t, ns, cid, record in rows:
        where = {"thread_id": t, "checkpoint_ns": ns, "checkpoint_id": cid}
        for channel, version, value in inline_at_versions(json_doc(record), where):
            yield ValueLocation.blob(t, ns, channel, version), stored_form(value)


def _one_op(op: Any) -> Generator[Any, Any, Any]:
    result = yield op
    return result


def bound_values_stmts(d: Any, thread_id: str) -> list[Any]:
    """Statements (blobs, writes) that return a row when the thread holds a value encrypted
    and bound to its location: its header's flags byte (the second) is exactly the bound
    flag. Read in SQL, without a key, by tools that must not copy such values as bytes."""
    from checkpointer.savers.sql.plan import Stmt

    params = {"t": thread_id, "tag": TAG_ENCRYPTED, "flag": bytes((FLAG_BOUND,))}
    return [
        Stmt(
            f"SELECT 1 FROM {table} WHERE thread_id = {d.p('t')} AND type = {d.p('tag')} "
            f"AND substr(blob, 2, 1) = {d.p('flag')} LIMIT 1",
            params,
            fetch=True,
        )
        for table in (d.blobs, d.writes)
    ]
