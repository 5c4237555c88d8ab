"""The read path: `get_tuple` and `list` pages as one statement each (checkpoints, their
values and pending writes), and `decode_tuples`, which turns the rows into tuples."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from operator import itemgetter
from typing import Any

from checkpointer.savers.base import (
    validate_limit,
    validate_metadata_filter,
)
from checkpointer.savers.sql.dialect import Dialect
from checkpointer.savers.sql.inline import serde_inlines
from checkpointer.savers.sql.plan import Row, Stmt
from checkpointer.savers.sql.record_seal import record_verifier
from checkpointer.savers.sql.records import (
    decode_checkpoint,
    decode_metadata,
    inline_loader,
    metadata_escaped,
    write_value,
)
from checkpointer.savers.sql.tails import BaseKey, Bases, load_stored, load_tail
from checkpointer.serde import Serializer
from checkpointer.serde.compression import fast_loader_of
from checkpointer.serde.located import ValueLocation, is_located, load_at, plain_batch_loader
from checkpointer.serde.value_cache import ValueCache
from checkpointer.serde.value_types import TAG_MSGPACK
from checkpointer.types import (
    CheckpointTuple,
    PendingWrite,
    RunnableConfig,
    checkpoint_id_of,
    checkpoint_ns_of,
    config_address,
    thread_id_of,
)

_TUPLE_COLUMNS = (
    "thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata"
)


def _hinted_bases(d: Dialect, single: bool) -> str:
    """The (thread, namespace, channel, base version) the page's tail hints name, as `x`:
    each once. One record's hints name each channel once; across a page, checkpoints
    share bases, so a page reads them through DISTINCT (which a single record would pay
    for in a temporary table: a tenth of a cold `get_tuple` statement on SQLite)."""
    columns = "t.thread_id, t.checkpoint_ns, h.key AS channel, h.value AS base"
    hints = f"FROM t {d.hints_join('t.checkpoint', 'h')}"
    distinct = "" if single else "DISTINCT "
    return f"(SELECT {distinct}{columns} {hints}) x"


def _tuples_sql(d: Dialect, page_sql: str, single: bool = False) -> str:
    """Checkpoints selected by `page_sql` (which also selects `page_limit`, and `row_key`
    where the dialect has one), their blobs and their pending writes, in one statement: a
    UNION ALL of three row kinds, see `decode_tuples`. Each checkpoint gets a number, `k`;
    its blob and write rows carry only that, not its three key strings. Unordered: sorting
    would push every value through a temporary B-tree (a whole chat history per
    checkpoint); `decode_tuples` groups the rows instead.

    `k` is the page position where text order must stay the database's (PostgreSQL
    collations): a window function, 1 for a `single` checkpoint (`get_tuple`). Where the
    dialect has a `row_key` (SQLite's rowid), `k` is that and `decode_tuples` puts the
    checkpoints in page order itself: the window sorted every checkpoint row with its
    record through a temporary B-tree, 1.8 of 12 ms for a 1,000-checkpoint page."""
    if single:
        number = "1"
    elif d.row_key is not None:
        number = "q.row_key"
    else:
        number = (
            "row_number() OVER (ORDER BY q.checkpoint_id DESC, q.thread_id DESC, "
            "q.checkpoint_ns DESC)"
        )
    return (
        f"WITH t AS MATERIALIZED (SELECT q.*, {number} AS k FROM ({page_sql}) q) "
        "SELECT t.k, 0 AS kind, t.thread_id AS a, t.checkpoint_ns AS b, t.checkpoint_id AS c, "
        f"t.parent_checkpoint_id AS d, {d.typed('t.page_limit', 'bigint')} AS n, "
        f"{d.null('bytes')} AS data, {d.typed('t.checkpoint', 'text')} AS rec, "
        f"{d.typed('t.metadata', 'text')} AS meta FROM t "
        "UNION ALL "
        f"SELECT t.k, 1, bl.channel, {d.versions_value('v')}, bl.base_version, bl.type, NULL, "
        f"bl.blob, NULL, NULL FROM t {d.versions_join('t.checkpoint', 'v')} "
        + d.lookup(
            d.blobs,
            "bl",
            "bl.channel, bl.type, bl.blob, bl.base_version",
            "bl.thread_id = t.thread_id AND bl.checkpoint_ns = t.checkpoint_ns "
            f"AND bl.channel = v.key AND bl.version = {d.versions_value('v')}",
        )
        + " "
        # The bases of the values stored as tails (`tails.py`), each once, as the
        # records' hints name them (a tail without one: `missing_bases`).
        "UNION ALL "
        f"SELECT {d.null('int')}, 3, b.channel, b.version, b.thread_id, b.type, NULL, "
        f"b.blob, b.checkpoint_ns, NULL FROM {_hinted_bases(d, single)} "
        + d.lookup(
            d.blobs,
            "b",
            "b.channel, b.version, b.thread_id, b.type, b.blob, b.checkpoint_ns",
            "b.thread_id = x.thread_id AND b.checkpoint_ns = x.checkpoint_ns "
            "AND b.channel = x.channel AND b.version = x.base AND b.base_version IS NULL",
        )
        + " "
        "UNION ALL "
        f"SELECT t.k, 2, w.task_path, {d.task_id_text('w.task_id')}, w.channel, w.type, "
        "w.idx, w.blob, NULL, NULL FROM t "
        + d.lookup(
            d.writes,
            "w",
            "w.task_path, w.task_id, w.task_name, w.channel, w.type, w.idx, w.blob",
            "w.thread_id = t.thread_id AND w.checkpoint_ns = t.checkpoint_ns "
            "AND w.checkpoint_id = t.checkpoint_id",
        )
    )


def get_tuple_stmt(d: Dialect, config: RunnableConfig) -> Stmt:
    thread_id, ns, checkpoint_id = config_address(config)
    params: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        params["checkpoint_id"] = checkpoint_id

    def build() -> str:
        page = (
            f"SELECT {_TUPLE_COLUMNS}, 1 AS page_limit FROM {d.checkpoints} "
            f"WHERE thread_id = {d.p('thread_id')} AND checkpoint_ns = {d.p('checkpoint_ns')} "
        )
        if checkpoint_id is None:
            page += "ORDER BY checkpoint_id DESC LIMIT 1"
        else:
            page += f"AND checkpoint_id = {d.p('checkpoint_id')}"
        return _tuples_sql(d, page, single=True)

    return Stmt(d.sql(("get_tuple", checkpoint_id is None), build), params, fetch=True)


@dataclass(slots=True)
class ListQuery:
    """`list()` arguments, validated once and turned into WHERE clauses per page."""

    thread_id: str | None = None
    checkpoint_ns: str | None = None
    checkpoint_id: str | None = None
    before_id: str | None = None
    filter: dict[str, Any] = field(default_factory=dict)
    limit: int | None = None

    @classmethod
    def from_args(
        cls,
        config: RunnableConfig | None,
        filter: Mapping[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> ListQuery:
        query = cls(filter=validate_metadata_filter(filter))
        if config is not None:
            query.thread_id = thread_id_of(config)
            if "checkpoint_ns" in config["configurable"]:
                query.checkpoint_ns = checkpoint_ns_of(config)
            query.checkpoint_id = checkpoint_id_of(config)
        if before is not None:
            query.before_id = checkpoint_id_of(before)
        query.limit = validate_limit(limit)
        return query


LIST_PAGE_BYTES = 64 * 1024 * 1024
"""About the most one `list()` page holds in values: pages are bounded by bytes as well
as by `page_size`. A thread that fits is listed in one statement, whatever its checkpoint
count (a long thread of small checkpoints costs one round trip, not one per `page_size`);
a bigger one in pages of as many checkpoints as fit. What a checkpoint weighs comes from
the thread summary (stored bytes per checkpoint) and from the values the thread's head
references (a large value shared by every checkpoint is in every one of them); across
threads, from all summaries."""


def list_page_stmt(
    d: Dialect,
    query: ListQuery,
    after: tuple[str, str, str] | None,
    page_size: int,
    remaining: int | None = None,
) -> Stmt:
    """One page of `list()`, newest first; `after` is the last (id, thread, ns) seen.

    The page holds at most `page_size` checkpoints and about `LIST_PAGE_BYTES` of values
    (at least one checkpoint), or a whole thread that fits in that many bytes (per its
    summary row) up to `remaining`. Each checkpoint row carries the limit the page used
    (`page_limit_of`), so the caller knows when it is the last page."""
    where: list[str] = []
    params: dict[str, Any] = {"limit": page_size}
    if query.thread_id is not None:
        where.append(f"thread_id = {d.p('thread_id')}")
        params["thread_id"] = query.thread_id
    if query.checkpoint_ns is not None:
        where.append(f"checkpoint_ns = {d.p('checkpoint_ns')}")
        params["checkpoint_ns"] = query.checkpoint_ns
    if query.checkpoint_id is not None:
        where.append(f"checkpoint_id = {d.p('checkpoint_id')}")
        params["checkpoint_id"] = query.checkpoint_id
    if query.before_id is not None:
        where.append(f"checkpoint_id < {d.p('before_id')}")
        params["before_id"] = query.before_id
    if after is not None:
        where.append(
            "(checkpoint_id, thread_id, checkpoint_ns) < "
            f"({d.p('after_id')}, {d.p('after_thread')}, {d.p('after_ns')})"
        )
        params["after_id"], params["after_thread"], params["after_ns"] = after
    for i, (key, value) in enumerate(query.filter.items()):
        key_param, value_param = d.metadata_filter_params(key, value)
        params[f"fk{i}"], params[f"fv{i}"] = key_param, value_param
        where.append(d.metadata_filter("metadata", f"fk{i}", f"fv{i}", value))

    whole_thread = query.thread_id is not None
    params["page_bytes"] = LIST_PAGE_BYTES
    if whole_thread:
        params["cap"] = remaining if remaining is not None else 2**62

    def build() -> str:
        limit = d.typed(d.p("limit"), "bigint")
        page_bytes = d.typed(d.p("page_bytes"), "bigint")
        if whole_thread:
            # What one checkpoint weighs: the thread's average, or what its head's values
            # weigh if more (a value every checkpoint shares counts in every one).
            # The head's values by primary key, one per channel: as a plain join, SQLite
            # chose to scan the namespace's value rows instead.
            value = d.lookup(
                d.blobs,
                "hb",
                "hb.blob",
                "hb.thread_id = h.thread_id AND hb.checkpoint_ns = h.checkpoint_ns AND "
                f"hb.channel = hv.key AND hb.version = {d.versions_value('hv')}",
            )
            head = (
                f"(SELECT coalesce(sum({d.size('hb.blob')}), 0) FROM {d.checkpoints} h "
                f"{d.versions_join('h.checkpoint', 'hv')} {value} WHERE "
                f"h.thread_id = {d.p('thread_id')} AND h.checkpoint_ns = '' AND "
                "h.checkpoint_id = s.head_checkpoint_id)"
            )
            weight = d.greatest(f"s.bytes / {d.greatest('s.checkpoint_count', '1')}", head, "1")
            # One more than the summary's count: a whole thread then comes back short of the
            # limit and ends the listing; a stale count only costs another page.
            cap = d.typed(d.p("cap"), "bigint")
            limit = (
                "coalesce((SELECT CASE WHEN z.fit >= z.n THEN (CASE WHEN z.n > "
                f"{limit} THEN {d.least('z.n', cap)} ELSE {limit} END) "
                f"ELSE {d.greatest('1', d.least('z.fit', limit))} END FROM (SELECT "
                f"s.checkpoint_count + 1 AS n, {page_bytes} / {weight} AS fit "
                f"FROM {d.threads} s WHERE s.thread_id = {d.p('thread_id')}) z), {limit})"
            )
        else:
            count = d.greatest("coalesce(sum(a.checkpoint_count), 0)", "1")
            everyone = f"(SELECT coalesce(sum(a.bytes), 0) / {count} FROM {d.threads} a)"
            limit = d.greatest("1", d.least(f"({page_bytes} / {d.greatest(everyone, '1')})", limit))
        order = (
            (" WHERE " + " AND ".join(where) if where else "")
            + " ORDER BY checkpoint_id DESC, thread_id DESC, checkpoint_ns DESC "
            + f"LIMIT {limit}"
        )
        if d.row_key is None:
            page = f"SELECT {_TUPLE_COLUMNS}, {limit} AS page_limit FROM {d.checkpoints}{order}"
        else:
            # The page's keys sorted alone (from the primary key's index), then its rows
            # fetched by key: sorting whole rows (a listing across namespaces cannot read
            # them in index order) carried every record through the sorter, a tenth of a
            # 1,000-checkpoint page's statement. `decode_tuples` orders the rows.
            page = (
                f"SELECT {_TUPLE_COLUMNS}, {d.row_key} AS row_key, {limit} AS page_limit "
                f"FROM {d.checkpoints} WHERE {d.row_key} IN (SELECT {d.row_key} FROM "
                f"{d.checkpoints}{order})"
            )
        return _tuples_sql(d, page)

    # The WHERE clauses are fixed text per shape; every value in them is a parameter.
    return Stmt(d.sql(("list", whole_thread, *where), build), params, fetch=True)


def page_limit_of(rows: Sequence[Row]) -> int | None:
    """The checkpoint limit a page of `list_page_stmt` used (None: the page is empty)."""
    for row in rows:
        if row[1] == 0:
            return int(row[6])
    return None


@dataclass(frozen=True, slots=True)
class ReadContext:
    """What `decode_tuples` asks of the serializer and the dialect, asked once per
    serializer (a wrapper answers through `__getattr__`, three lookups a call) instead of
    on every read. Made by `read_context`; valid while the saver keeps that serializer."""

    serde: Serializer
    located: bool
    takes_inline: bool
    escaped: bool
    plain_keys: bool
    """The dialect stores write keys as they are (`Dialect.decode_write_key` is the
    identity on a str id and an int idx): no call per write row."""


def read_context(serde: Serializer, d: Dialect) -> ReadContext:
    return ReadContext(
        serde,
        is_located(serde),
        serde_inlines(serde),
        metadata_escaped(d),
        type(d).decode_write_key is Dialect.decode_write_key,
    )


def missing_bases(rows: Sequence[Row]) -> list[BaseKey]:
    """The tail rows among `_tuples_sql` rows whose base the statement did not bring
    (their record has no hint: written before hints, or carried past a parent unknown):
    `tails.bases_plan` reads them, `base_rows` adds them."""
    tails = [r for r in rows if r[1] == 1 and r[4] is not None]
    if not tails:
        return []
    have = {(r[4], r[8], r[2], r[3]) for r in rows if r[1] == 3}
    at = {r[0]: (r[2], r[3]) for r in rows if r[1] == 0}
    out = []
    for r in tails:
        thread_id, ns = at[r[0]]
        if (thread_id, ns, r[2], r[4]) not in have:
            out.append((thread_id, ns, r[2], r[3]))
    return out


def base_rows(bases: Bases) -> list[Row]:
    """`bases` as the rows `_tuples_sql` gives bases in (kind 3)."""
    rows: dict[tuple[str, str, str, str], Row] = {}
    for (thread_id, ns, channel, _), (version, (tag, blob)) in bases.items():
        rows[(thread_id, ns, channel, version)] = (
            None,
            3,
            channel,
            version,
            thread_id,
            tag,
            None,
            blob,
            ns,
            None,
        )
    return list(rows.values())


def decode_tuples(
    rows: Iterable[Row],
    serde: Serializer,
    d: Dialect,
    cache: ValueCache | None = None,
    context: ReadContext | None = None,
) -> Iterator[CheckpointTuple]:
    """Rows of `_tuples_sql` to tuples, newest first, one at a time: a checkpoint that
    cannot be read raises only when it is reached, so `list()` still yields every newer one
    first. `context`: `read_context(serde, d)`, if the caller keeps one.

    Row: (k, kind, a, b, c, d, n, data, rec, meta): `k` numbers the checkpoint in the page;
    kind 0 is the checkpoint (a, b, c = thread, ns, id; d = parent id; n = page limit), 1 a
    blob (a = channel, b = version, c = base version of a tail row, d = type), 2 a pending
    write (a = task_path, b = task_id, c = channel, d = type, n = idx), 3 the base of tail
    rows (`tails.py`; a = channel, b = version, c = thread, d = type, rec = namespace). The
    rows come in any order: they are grouped per checkpoint here, writes in the order they
    were applied.

    Records and metadata come as JSON text on every dialect (PostgreSQL's jsonb as text:
    parsed here by `records.loads_json`, not by the driver's json.loads, and metadata
    unescaped only when its text holds the escape character, see `decode_metadata`).
    """
    heads: list[Row] = []
    blobs_of: dict[int, list[Row]] = {}
    writes_of: dict[int, list[Row]] = {}
    whole: dict[BaseKey, tuple[str, bytes]] | None = None
    for row in rows:
        kind = row[1]
        if kind == 0:
            heads.append(row)
            continue
        if kind == 3:
            if whole is None:
                whole = {}
            raw = row[7]
            whole[(row[4], row[8], row[2], row[3])] = (
                row[5],
                raw if type(raw) is bytes else bytes(raw),
            )
            continue
        groups = blobs_of if kind == 1 else writes_of
        group = groups.get(row[0])
        if group is None:
            groups[row[0]] = [row]
        else:
            group.append(row)
    if not heads:
        return
    if len(heads) > 1:
        _page_sort(heads, d)
    if context is None or context.serde is not serde:
        context = read_context(serde, d)
    located = context.located
    # Values decode through the batch loader when there is one; a value it cannot read
    # goes through `read`, which names where the value is.
    # (None too when the page holds no value row: a delta thread's head often does not.)
    fast = None if located or not (blobs_of or writes_of) else fast_loader_of(serde)
    read = partial(load_at, serde)
    none: list[Row] = []
    takes_inline = context.takes_inline
    decode_key = None if context.plain_keys else d.decode_write_key
    escaped = context.escaped
    # Write values a chunk of checkpoints at a time in one call where the serializer can
    # (`plain_batch_loader`, as the delta history): a few small values per checkpoint, each
    # a msgpack-python call with Python hooks otherwise. By chunks, not the whole page: a
    # caller that stops early leaves most of a page undecoded.
    plain = None if fast is None or len(heads) < 2 else plain_batch_loader(serde)
    keep = len(heads) < 2  # a listing reads through the value cache, adding nothing
    batched: dict[int, list[Any]] = {}
    batched_to = 0

    for at, head in enumerate(heads):
        if plain is not None and at >= batched_to:
            batched_to = at + _WRITES_CHUNK
            found = _batch_writes(heads[at:batched_to], writes_of, plain)
            if found is None:  # values the batch cannot take: likely the whole page's
                plain, found = None, {}
            batched = found
        k, _, thread_id, ns, checkpoint_id, parent_id = head[:6]
        where = {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}
        values: dict[str, Any] = {}
        blob_rows = blobs_of.get(k, none)
        if blob_rows:
            if len(blob_rows) > 1:
                blob_rows.sort(key=_by_channel)
            for row in blob_rows:
                channel, version = row[2], row[3]
                data = (row[5], row[7] if type(row[7]) is bytes else bytes(row[7]))
                if row[4] is not None:  # a tail row
                    base = None if whole is None else whole.get((thread_id, ns, channel, row[4]))
                    values[channel] = load_tail(
                        (thread_id, ns, channel, version),
                        data,
                        None if base is None else (row[4], base),
                        partial(load_stored, fast, cache, read, located, thread_id, ns, channel),
                        {**where, "channel": channel, "version": version},
                        cache if keep and fast is not None else None,
                    )
                    continue
                if fast is not None:
                    # Through the cache (`value_cache`): compression undone, and large plain
                    # values decoded, once per stored value; each read gets a fresh object.
                    try:
                        values[channel] = (
                            fast(data)
                            if cache is None
                            else cache.load(data, thread_id, ns, channel, version, fast, keep)
                        )
                        continue
                    except Exception:
                        pass
                elif cache is not None:
                    data = cache.plain(data, thread_id, ns, channel, version)
                values[channel] = read(
                    data,
                    ValueLocation.blob(thread_id, ns, channel, version) if located else None,
                    **where,
                    channel=channel,
                    version=version,
                )
        writes: list[PendingWrite] = []
        write_rows = writes_of.get(k)
        if write_rows:
            done = batched.get(k)  # its rows are sorted then
            if done is None and len(write_rows) > 1:
                write_rows.sort(key=_applied_order)
            for j, row in enumerate(write_rows):
                task_id, idx = row[3], row[6]
                if decode_key is not None or type(task_id) is not str or type(idx) is not int:
                    task_id, idx = (decode_key or d.decode_write_key)(task_id, idx)
                if done is not None and done[j] is not _UNBATCHED:
                    writes.append((task_id, row[4], done[j]))
                    continue
                raw = row[7]
                data = (row[5], raw if type(raw) is bytes else bytes(raw))
                if fast is not None:  # the common case inline: four writes a checkpoint
                    try:
                        writes.append((task_id, row[4], fast(data)))
                        continue
                    except Exception:
                        pass
                value = write_value(
                    None, read, located, data, thread_id, ns, checkpoint_id, task_id, idx, row[4]
                )
                writes.append((task_id, row[4], value))
        # Configs as `make_config` builds them, without a call each.
        yield CheckpointTuple(
            {
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": checkpoint_id,
                }
            },
            decode_checkpoint(
                head[8],
                checkpoint_id,
                values,
                where,
                None if takes_inline else inline_loader(serde, thread_id, ns, where),
                record_verifier(serde, thread_id, ns, checkpoint_id, parent_id)
                if located
                else None,
            ),
            decode_metadata(head[9], where, escaped),
            {
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": parent_id,
                }
            }
            if parent_id is not None
            else None,
            writes,
        )


_WRITES_CHUNK = 64
"""Checkpoints whose write values are decoded in one call (see `decode_tuples`)."""
_UNBATCHED: Any = object()


def _batch_writes(
    heads: Sequence[Row],
    writes_of: Mapping[int, list[Row]],
    plain: Callable[[Sequence[bytes]], list[Any] | None],
) -> dict[int, list[Any]] | None:
    """The write values of `heads` (checkpoint rows), each checkpoint's in applied order
    (its rows sorted so here), `_UNBATCHED` for a value not tagged msgpack; None when the
    batch cannot be read in one call: each value is then read alone, which names a value
    that cannot be read at all."""
    raws: list[bytes] = []
    for head in heads:
        rows = writes_of.get(head[0])
        if rows:
            if len(rows) > 1:
                rows.sort(key=_applied_order)
            raws.extend(row[7] for row in rows if row[5] == TAG_MSGPACK and type(row[7]) is bytes)
    if not raws:
        return {}
    values = plain(raws)
    if values is None:
        return None
    out: dict[int, list[Any]] = {}
    taken = iter(values)
    for head in heads:
        rows = writes_of.get(head[0])
        if rows:
            out[head[0]] = [
                next(taken) if row[5] == TAG_MSGPACK and type(row[7]) is bytes else _UNBATCHED
                for row in rows
            ]
    return out


_PAGE_KEY = itemgetter(4, 2, 3)
"""(checkpoint_id, thread_id, checkpoint_ns) of a checkpoint row: the page order, newest
first, where the dialect numbers rows by `row_key`."""


def _page_sort(heads: list[Row], d: Dialect) -> None:
    """Checkpoint rows in page order: by `k` where that is the page position, else by their
    keys as SQLite orders them (BINARY: UTF-8 bytes, which order as Python's str; by storage
    class first, should a writer around the saver have stored a BLOB in a key column).
    Rows usually arrive in page order, which costs the sort one comparison per row."""
    if d.row_key is None:
        heads.sort(key=_page_order)
        return
    try:
        heads.sort(key=_PAGE_KEY, reverse=True)
    except TypeError:
        heads.sort(key=_sqlite_page_key, reverse=True)


_STORAGE_CLASS_RANK = {type(None): 0, int: 1, float: 1, str: 2, bytes: 3}
"""SQLite's order of storage classes: NULL, numbers, text, BLOB."""


def _sqlite_page_key(row: Row) -> tuple[tuple[int, Any], ...]:
    return tuple((_STORAGE_CLASS_RANK.get(type(row[i]), 3), row[i]) for i in (4, 2, 3))


def _page_order(row: Row) -> int:
    return int(row[0])


def _by_channel(row: Row) -> str:
    return str(row[2])


_applied_order = itemgetter(2, 3, 6)
"""(task_path, stored task id, stored idx) of a write row: the order the runtime applied
them in."""
