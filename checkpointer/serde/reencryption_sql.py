"""The re-encryption programs of the SQL savers, as sans-I/O plans their drivers run.

Value rows (blobs, pending writes) are paged through by primary key, each page rewritten
in one transaction with a compare-and-swap on the old bytes; checkpoint records have their
inline values moved into sealed rows and, when binding, a seal of their own. Entry points:
`reencryption.reencrypt` / `areencrypt`.
"""

from __future__ import annotations

import base64
from collections.abc import Generator, Sequence
from typing import Any

from checkpointer.serde.encrypted_serializer import EncryptedSerializer
from checkpointer.serde.encryption_format import TAG_ENCRYPTED, parse_sealed
from checkpointer.serde.located import ValueLocation
from checkpointer.serde.reencryption_report import ReencryptReport, tally

_TABLES: dict[str, tuple[tuple[str, ...], str]] = {
    # table -> (primary key columns in order, extra columns read)
    "blobs": (("thread_id", "checkpoint_ns", "channel", "version"), "base_version"),
    "writes": (("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx"), "channel"),
}


def sql_program(
    d: Any,
    table: str,
    enc: EncryptedSerializer,
    bind: bool,
    threads: list[str] | None,
    batch_size: int,
    report: ReencryptReport,
    dry_run: bool,
) -> Generator[Any, Any, None]:
    """Page through one table by primary key; rewrite each page in one transaction."""
    from checkpointer.savers.sql.plan import Op, Stmt, single

    name = d.blobs if table == "blobs" else d.writes
    pk, extra = _TABLES[table]
    pg = d.name == "postgresql"

    def col(c: str) -> str:
        # The key as stored (a named task's derived uuid on PostgreSQL); the id the saver
        # was given is read beside it, for the value's location.
        return f"CAST({c} AS text)" if (pg and c == "task_id") else c

    def param(c: str, p: str) -> str:
        return f"CAST({d.p(p)} AS uuid)" if (pg and c == "task_id") else d.p(p)

    given = [d.task_id_text("task_id")] if table == "writes" else []
    select_cols = ", ".join(
        [*(col(c) for c in pk), *([extra] if extra else []), *given, "type", "blob"]
    )
    after_cond = f"({', '.join(pk)}) > ({', '.join(param(c, f'a{i}') for i, c in enumerate(pk))})"
    where_key = " AND ".join(f"{c} = {param(c, f'k{i}')}" for i, c in enumerate(pk))
    # A tail row (`savers/sql/tails.py`) is sealed whole: it stops being a tail.
    whole = ", base_version = NULL" if table == "blobs" else ""
    update = (
        f"UPDATE {name} SET type = {d.p('nt')}, blob = {d.p('nb')}{whole} "
        f"WHERE {where_key} AND type = {d.p('ot')} AND blob = {d.p('ob')}"
    )
    after: tuple[Any, ...] | None = None
    while True:
        conds: list[str] = []
        params: dict[str, Any] = {"limit": batch_size}
        if threads is not None:
            conds.append(d.in_list("thread_id", "threads"))
            params["threads"] = d.list_param(threads)
        if after is not None:
            conds.append(after_cond)
            params.update({f"a{i}": v for i, v in enumerate(after)})
        sql = (
            f"SELECT {select_cols} FROM {name}"
            + (" WHERE " + " AND ".join(conds) if conds else "")
            + f" ORDER BY {', '.join(pk)} LIMIT {d.p('limit')}"
        )
        rows = yield Op(single(Stmt(sql, params, fetch=True)))
        if not rows:
            return
        bases = (yield Op(_tail_bases_plan(d, rows))) if table == "blobs" else {}
        updates: list[dict[str, Any]] = []
        for row in rows:
            key = tuple(row[: len(pk)])
            data = (row[-2], bytes(row[-1]))
            tally(report, enc, data)
            if enc.is_current(data, bind=bind):
                continue
            sealing = data
            if table == "blobs":
                location = ValueLocation.blob(key[0], key[1], key[2], key[3])
                if row[4] is not None:
                    sealing = _whole_tail(enc, key, data, bases)
            else:
                # The task id and slot as the saver was given them (PostgreSQL stores some
                # LangGraph task ids shifted into idx): the location it reads them at.
                task_id, idx = d.decode_write_key(row[6], key[4])
                location = ValueLocation.write(key[0], key[1], key[2], task_id, idx, row[5])
            new_tag, new_blob = enc.reseal(sealing, location, bind=bind)
            report.rewritten += 1
            updates.append(
                {
                    **{f"k{i}": v for i, v in enumerate(key)},
                    "nt": new_tag,
                    "nb": new_blob,
                    "ot": data[0],
                    "ob": data[1],
                }
            )
        if updates and not dry_run:
            changed = yield Op(_cas_plan(Stmt, update, updates), txn=True)
            report.skipped_changed += len(updates) - changed
            report.rewritten -= len(updates) - changed
        if len(rows) < batch_size:
            return
        after = tuple(rows[-1][: len(pk)])


def _tail_bases_plan(d: Any, rows: Sequence[Any]) -> Any:
    """The bases of the tail rows among a page of blob rows (key, base_version, ...)."""
    from checkpointer.savers.sql.tails import bases_plan

    keys = [(r[0], r[1], r[2], r[3]) for r in rows if r[4] is not None]
    if not keys:
        return {}
    return (yield from bases_plan(d, keys))


def _whole_tail(
    enc: EncryptedSerializer, key: tuple[Any, ...], data: tuple[str, bytes], bases: Any
) -> tuple[str, bytes]:
    """A plaintext tail row (`savers/sql/tails.py`) as its whole value's plaintext pair,
    joined from bytes with its base (opened first if already sealed, as an earlier page of
    this run does to it). Encrypted rows are always whole: only the plain msgpack
    serializer writes tails, and this keeps it so."""
    from checkpointer.savers.sql.tails import join_whole, missing_base

    thread_id, ns, channel, version = (str(k) for k in key[:4])
    where = {"thread_id": thread_id, "checkpoint_ns": ns, "channel": channel, "version": version}
    found = bases.get((thread_id, ns, channel, version))
    if found is None:
        raise missing_base((thread_id, ns, channel, version), where)
    base_version, base = found
    if base[0] == TAG_ENCRYPTED:
        header = parse_sealed(bytes(base[1]))[0]
        at = ValueLocation.blob(thread_id, ns, channel, base_version)
        opened = enc._open(base, at if header.bound else None)
        assert opened is not None
        base = opened
    return join_whole(base, data, where)


def records_program(
    d: Any,
    enc: EncryptedSerializer,
    bind: bool,
    threads: list[str] | None,
    batch_size: int,
    report: ReencryptReport,
    dry_run: bool,
) -> Generator[Any, Any, None]:
    """Move the small values SQL savers keep inline in checkpoint records (plaintext, see
    `savers/sql/inline.py`) into sealed value rows, and, when binding, seal each record
    (`savers/sql/record_seal.py`) under the active key, page by page: a record that has a
    seal is checked first, one without is sealed as it stands. Each record is rewritten in
    the transaction that stores its moved values, compare-and-swap on its old text."""
    import json

    from checkpointer.savers.sql.inline import RECORD_KEY as INLINE_KEY
    from checkpointer.savers.sql.inline import inline_at_versions, stored_form
    from checkpointer.savers.sql.inspect import json_doc
    from checkpointer.savers.sql.plan import Op, Stmt, each, single
    from checkpointer.savers.sql.record_seal import SEAL_KEY, make_seal, verify_record

    key = "(thread_id, checkpoint_ns, checkpoint_id)"
    update = (
        f"UPDATE {d.checkpoints} SET checkpoint = {d.json_param('new')} "
        f"WHERE thread_id = {d.p('t')} AND checkpoint_ns = {d.p('ns')} "
        f"AND checkpoint_id = {d.p('cid')} AND checkpoint = {d.json_param('old')}"
    )
    after: tuple[Any, ...] | None = None
    while True:
        # Without binding only records holding inline values need a visit.
        conds = [] if bind else [d.record_has_inline("checkpoint")]
        params: dict[str, Any] = {"limit": batch_size}
        if threads is not None:
            conds.append(d.in_list("thread_id", "threads"))
            params["threads"] = d.list_param(threads)
        if after is not None:
            conds.append(f"{key} > ({d.p('a0')}, {d.p('a1')}, {d.p('a2')})")
            params.update(a0=after[0], a1=after[1], a2=after[2])
        rows = yield Op(
            single(
                Stmt(
                    f"SELECT thread_id, checkpoint_ns, checkpoint_id, checkpoint, "
                    f"parent_checkpoint_id FROM {d.checkpoints}"
                    + (f" WHERE {' AND '.join(conds)}" if conds else "")
                    + f" ORDER BY {key[1:-1]} LIMIT {d.p('limit')}",
                    params,
                    fetch=True,
                )
            )
        )
        if not rows:
            return
        for thread_id, ns, cid, record, parent_id in rows:
            fields = json_doc(record)
            where = {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}
            seal = fields.get(SEAL_KEY)
            if seal is not None:  # never re-seal an edited record: check it first
                verify_record(enc, thread_id, ns, cid, dict(fields), parent_id)
            moved = inline_at_versions(fields, where)
            reseal = bind and (
                bool(moved)
                or seal is None
                or enc.key_id_of((seal[0], base64.b64decode(seal[1]))) != enc.active_key_id
            )
            if not moved and not reseal:
                continue
            sealed = []
            for channel, version, value in moved:
                data = stored_form(value)
                tally(report, enc, data)
                location = ValueLocation.blob(thread_id, ns, channel, version)
                sealed.append((ns, channel, version, *enc.reseal(data, location, bind=bind)))
            report.rewritten += len(moved)
            report.records_sealed += reseal
            if dry_run:
                continue
            fields.pop(INLINE_KEY, None)
            fields.pop(SEAL_KEY, None)
            if reseal:
                fields[SEAL_KEY] = make_seal(enc, thread_id, ns, cid, fields, parent_id)
            old = record if isinstance(record, str) else json.dumps(record)
            new = json.dumps(fields, ensure_ascii=False, separators=(",", ":"))
            changed = yield Op(
                _move_inline_plan(
                    Stmt,
                    [d.insert_blobs(thread_id, sealed)] if sealed else [],
                    update,
                    {"new": new, "old": old, "t": thread_id, "ns": ns, "cid": cid},
                    each,
                ),
                txn=True,
            )
            if not changed:
                report.skipped_changed += len(moved) + reseal
                report.rewritten -= len(moved)
                report.records_sealed -= reseal
        if len(rows) < batch_size:
            return
        after = tuple(rows[-1][:3])


def _move_inline_plan(
    stmt: Any, inserts: list[Any], update: str, params: dict[str, Any], each: Any
) -> Any:
    """Store the sealed values, then rewrite the record if it is unchanged; a record a
    writer changed meanwhile keeps its values (the rows stored stay unused)."""
    yield from each(inserts)
    rows = yield stmt(update + " RETURNING 1", params, fetch=True)
    return len(rows)


def _cas_plan(stmt: Any, update: str, updates: list[dict[str, Any]]) -> Any:
    """Run the compare-and-swap updates one by one, counting the rows they changed."""
    changed = 0
    returning = update + " RETURNING 1"
    for params in updates:
        rows = yield stmt(returning, params, fetch=True)
        changed += len(rows)
    return changed
