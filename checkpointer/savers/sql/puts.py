"""The put path: `put_op` (a checkpoint, its changed values, inline carry) and
`put_writes_op` (a task's pending writes), with the size checks that run before any
statement."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from checkpointer.errors import (
    CheckpointerError,
    ValueTooLarge,
)
from checkpointer.savers.base import (
    new_blob_channels,
    parent_id_for_put,
    resolve_now,
)
from checkpointer.savers.sql.dialect import Dialect
from checkpointer.savers.sql.inline import (
    Inline,
    Parent,
    from_sql,
    inlinable,
    inline_probe,
    read_inline,
    serde_inlines,
)
from checkpointer.savers.sql.plan import Op, Row, Stmt, repeatable
from checkpointer.savers.sql.record_seal import make_seal
from checkpointer.savers.sql.records import (
    Where,
    encode_metadata,
    encode_record,
    json_object,
    version_text,
)
from checkpointer.savers.sql.tails import (
    ListTails,
    TailRow,
    can_be_tail,
    hints_of,
    list_codec,
)
from checkpointer.serde import Serializer
from checkpointer.serde.located import ValueLocation, dumps_at, is_located
from checkpointer.types import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    RunnableConfig,
    config_address,
    is_special_batch,
    make_config,
)

MAX_STORED_VALUE_BYTES = 1_000_000_000
"""The most one stored value may hold, as serialized (after compression): SQLite's
default length limit, and under PostgreSQL's 1 GiB per field. Checked before any
statement, so a put over it raises ValueTooLarge with nothing written, instead of a
driver error from the middle of its transaction."""


def check_stored_sizes(rows: Iterable[tuple[str, str, bytes]], where: str) -> None:
    """ValueTooLarge for the first (channel, type, bytes) row over the limit."""
    limit = MAX_STORED_VALUE_BYTES
    for channel, _type, data in rows:
        if len(data) > limit:
            raise ValueTooLarge(len(data), limit, f"the value of channel {channel!r} {where}")


def put_op(
    d: Dialect,
    serde: Serializer,
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    new_versions: ChannelVersions,
    carried: Inline | None = None,
    restore: Mapping[str, tuple[Any, Any]] | None = None,
    *,
    inlines: bool | None = None,
    located: bool | None = None,
    tails: ListTails | None = None,
    carried_hints: Mapping[str, str] | None = None,
) -> tuple[Op[None], RunnableConfig, Inline, dict[str, str]]:
    """Serialize only the channels in `new_versions` that have a value; the checkpoint row
    records every version, so unchanged channels keep pointing at their older values.

    With a serializer that allows it, changed small scalars go into the record instead of
    value rows, with `carried` (the parent's inline values of unchanged channels, see
    `inline.py`); the record's inline values are returned with the op. `restore`:
    (version, value) of unchanged channels whose value may not be stored yet, written as
    value rows if absent (`unstored.py`). `inlines` / `located`: `serde_inlines(serde)` and
    `is_located(serde)`, when the caller knows them. `tails`: the saver's memory of the
    lists it wrote, to write a grown list as what it gained (`tails.py`); `carried_hints`:
    the parent's tail hints of the unchanged channels. Returns the op, the new config, the
    record's inline values and its tail hints."""
    if inlines is None:
        inlines = serde_inlines(serde)
    if located is None:
        located = is_located(serde)
    thread_id, ns, parent_id = config_address(config)
    checkpoint_id = checkpoint["id"]
    if parent_id is not None and parent_id == checkpoint_id:
        parent_id_for_put(config, checkpoint)  # raises: its own parent
    changed = new_blob_channels(checkpoint, new_versions)
    inline: Inline = {}
    if inlines:
        inline = dict(carried or {})
        for channel, (_, value) in changed.items():
            if inlinable(value):
                inline[channel] = value
        if inline:
            changed = {ch: pair for ch, pair in changed.items() if ch not in inline}
    # Lists through `tails` (a tail row, or their stored form made on the way).
    tail_rows: list[TailRow] = []
    encoded: dict[str, tuple[str, bytes]] = {}
    codec = None if tails is None or located else list_codec(serde)
    if codec is not None and tails is not None:
        where = f"in checkpoint {checkpoint_id!r}"
        for channel, (version, value) in changed.items():
            if can_be_tail(value):
                out = tails.encode(codec, thread_id, ns, channel, version_text(version), value)
                if type(out) is TailRow:
                    tail_rows.append(replace(out, whole=partial(_checked_whole, out, where)))
                else:
                    encoded[channel] = out  # type: ignore[assignment]
        if tail_rows:
            tailed = {t.channel for t in tail_rows}
            changed = {ch: pair for ch, pair in changed.items() if ch not in tailed}
    if restore:  # value rows only, written if absent (see `unstored.py`)
        changed = {**restore, **changed}
    if located:
        blobs = [
            (
                channel,
                (v := version_text(version)),
                *dumps_at(serde, value, ValueLocation.blob(thread_id, ns, channel, v)),
            )
            for channel, (version, value) in changed.items()
        ]
    else:
        dumps = serde.dumps_typed
        blobs = [
            (
                channel,
                version_text(version),
                *(encoded[channel] if channel in encoded else dumps(value)),
            )
            for channel, (version, value) in changed.items()
        ]
    meta_text = d.check_metadata(encode_metadata(metadata))
    run_id = metadata.get("run_id")
    hints = dict(carried_hints or {})
    hints.update((t.channel, t.base_version) for t in tail_rows)
    record = encode_record(
        checkpoint,
        inline,
        partial(make_seal, serde, thread_id, ns, checkpoint_id, parent_id=parent_id)
        if located
        else None,
        hints,
    )
    where = f"in checkpoint {checkpoint_id!r}"
    check_stored_sizes(((ch, t, data) for ch, _, t, data in blobs), where)
    check_stored_sizes(((t.channel, t.type, t.blob) for t in tail_rows), where)
    for name, text in (("(checkpoint record)", record), ("(metadata)", meta_text)):
        if len(text) > MAX_STORED_VALUE_BYTES // 4:  # UTF-8 takes at most 4 bytes a char
            check_stored_sizes([(name, "json", text.encode())], where)
    # Repeatable: blobs insert-if-absent, the checkpoint row is upserted by its id, and the
    # summary adds only what changed against the prior row (nothing, on a repeat).
    op = repeatable(
        lambda: d.put_plan(
            thread_id,
            ns,
            checkpoint_id,
            parent_id,
            None if run_id is None else str(run_id),
            record,
            meta_text,
            blobs,
            resolve_now(None),
            tail_rows,
        )
    )
    return op, make_config(thread_id, ns, checkpoint_id), inline, hints


def _checked_whole(tail: TailRow, where: str) -> tuple[str, bytes]:
    """`tail`'s value whole, for when its base is not stored, within the size limit."""
    data = tail.whole()
    check_stored_sizes([(tail.channel, data[0], data[1])], where)
    return data


def unchanged_channels(checkpoint: Checkpoint, new_versions: ChannelVersions) -> set[str]:
    """The channels a put keeps at their version: their values are stored already."""
    return {ch for ch in checkpoint["channel_versions"] if ch not in new_versions}


def record_versions_and_inline(rows: Sequence[Row], where: Where) -> Parent | None:
    """A `record_stmt` result: the checkpoint's versions, inline values and tail hints
    (None if there is no such checkpoint)."""
    if not rows:
        return None
    fields = json_object(rows[0][0], "checkpoint record", where)
    versions = fields.get("channel_versions")
    return (
        (versions if type(versions) is dict else {}),
        read_inline(fields, where) or {},
        hints_of(fields),
    )


def record_stmt(d: Dialect, thread_id: str, ns: str, checkpoint_id: str) -> Stmt:
    """One checkpoint's record."""
    return Stmt(
        f"SELECT checkpoint FROM {d.checkpoints} WHERE thread_id = {d.p('thread_id')} "
        f"AND checkpoint_ns = {d.p('checkpoint_ns')} AND checkpoint_id = {d.p('checkpoint_id')}",
        {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id},
        fetch=True,
    )


def inline_sources_stmt(
    d: Dialect, thread_id: str, ns: str, wanted: Sequence[tuple[str, str]]
) -> Stmt:
    """For each (channel, version) in `wanted`, the value a record of the thread keeps
    inline at that version, if any does: rows (position in `wanted`, JSON type, text), see
    `inline.from_sql`. A put asks it for the unchanged channels whose version its parent's
    record does not hold (a `__copy__` fork written beside its original, a re-put of an
    existing checkpoint): their values then live in its own record too."""
    p = d.p
    params: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
    for i, (channel, version) in enumerate(wanted):
        params[f"ch{i}"], params[f"v{i}"] = channel, version
        params[f"ik{i}"] = inline_probe(channel)

    def build() -> str:
        parts = []
        for i in range(len(wanted)):
            kind, text = d.inline_value("c.checkpoint", p(f"ch{i}"))
            parts.append(
                f"SELECT * FROM (SELECT {d.bigint(str(i))} AS i, {kind} AS kind, {text} AS text "
                f"FROM {d.checkpoints} c WHERE c.thread_id = {p('thread_id')} "
                f"AND c.checkpoint_ns = {p('checkpoint_ns')} "
                f"AND {d.inline_has('c.checkpoint', p(f'ch{i}'), p(f'ik{i}'))} "
                f"AND {d.version_of('c.checkpoint', p(f'ch{i}'))} = {d.text(p(f'v{i}'))} "
                f"ORDER BY c.checkpoint_id DESC LIMIT 1) s{i}"
            )
        return " UNION ALL ".join(parts)

    return Stmt(d.sql(("inline_sources", len(wanted)), build), params, fetch=True)


def decode_inline_sources(
    rows: Sequence[Row], wanted: Sequence[tuple[str, str]], where: Where
) -> Inline:
    """The `inline_sources_stmt` result as {channel: value}."""
    return {wanted[int(i)][0]: from_sql(kind, text, where) for i, kind, text in rows}


def put_writes_op(
    d: Dialect,
    serde: Serializer,
    config: RunnableConfig,
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str,
    *,
    located: bool | None = None,
) -> Op[None] | None:
    """A batch of only special channels replaces stored rows; any other batch inserts what
    is absent (a re-sent batch changes nothing). Duplicate slots in one batch keep the
    first write (insert) or the last (replace), as the in-memory saver does."""
    thread_id, ns, checkpoint_id = config_address(config)
    if checkpoint_id is None:
        raise CheckpointerError("put_writes needs a config that names a checkpoint_id")
    if not writes:
        return None
    special = WRITES_IDX_MAP  # `write_idx`, per write
    channels = [channel for channel, _ in writes]
    given = [special.get(channel, position) for position, channel in enumerate(channels)]
    stored_task_id, idxs = d.encode_write_keys(task_id, given)
    task_name = d.task_name(task_id)
    replace = is_special_batch(channels)
    dumps = serde.dumps_typed
    if located is None:
        located = is_located(serde)
    rows: dict[int, tuple[int, str, str, bytes]] = {}
    for idx, given_idx, (channel, value) in zip(idxs, given, writes, strict=True):
        if idx in rows and not replace:
            continue
        if located:
            where = ValueLocation.write(thread_id, ns, checkpoint_id, task_id, given_idx, channel)
            rows[idx] = (idx, channel, *dumps_at(serde, value, where))
        else:
            rows[idx] = (idx, channel, *dumps(value))
    check_stored_sizes((r[1:] for r in rows.values()), f"written by task {task_id!r}")
    # Repeatable: rows are keyed by (checkpoint, task, idx); a repeat inserts nothing new or
    # replaces a row by the same value, and the summary adds only the difference.
    return repeatable(
        lambda: d.put_writes_plan(
            thread_id,
            ns,
            checkpoint_id,
            stored_task_id,
            task_path,
            list(rows.values()),
            replace,
            resolve_now(None),
            task_name,
        )
    )
