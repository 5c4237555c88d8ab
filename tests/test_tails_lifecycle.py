"""Tail rows (`savers/sql/tails.py`) through everything else that stores, copies, deletes
or reads value rows: retention, prune, delete_for_runs, copy_thread, fork (by SQL and
re-sealing), export and import, re-encryption, and the inspection tools.

Each test writes threads whose chat history grows by a few items a step, large enough
that the saver writes most versions as tails (checked: tail rows exist before anything
else happens), then asserts every checkpoint still there reads back exactly what was put,
and that no tail row is left without its base. SQLite and PostgreSQL (sync savers).
"""

from __future__ import annotations

import io
import json
import random
import uuid
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from checkpointer.channels.markers import DeltaSnapshot
from checkpointer.errors import CheckpointerError
from checkpointer.export import (
    PLAIN_VERSION,
    TAILS_VERSION,
    ExportFormatError,
    export_threads,
    import_threads,
)
from checkpointer.inspect import Database
from checkpointer.lifecycle import KeepLast
from checkpointer.savers.sql.plan import Op, Stmt, single
from checkpointer.savers.sql.tails import (
    MIN_BASE_BYTES,
    TAIL_PREFIX,
    ListTails,
    TailRow,
    join_whole,
    list_codec,
    orphan_tails_stmt,
)
from checkpointer.savers.sql.transfer import fork_to_thread_plan
from checkpointer.serde.compression import CompressingSerializer, decompress_typed
from checkpointer.serde.encryption import TAG_ENCRYPTED, EncryptedSerializer, reencrypt
from checkpointer.serde.msgpack_serde import MsgpackSerializer
from checkpointer.types import RunnableConfig, empty_checkpoint, make_config
from checkpointer.ui.data import ReaderSource
from tests.test_cli_support import Db, empty_db, run, run_json

BACKENDS = ["sqlite", "postgres"]
KEY = bytes(range(32))

Saved = list[tuple[RunnableConfig, dict[str, Any]]]


@pytest.fixture(params=BACKENDS)
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    with empty_db(request.param, tmp_path) as made:
        yield made


@contextmanager
def opened(db: Db, serde: Any = None) -> Iterator[Any]:
    """A saver on `db` (its own serializer when `serde` is given)."""
    if serde is None:
        with db.saver() as saver:
            yield saver
        return
    if db.kind == "sqlite":
        from checkpointer.savers.sqlite import SqliteSaver

        with SqliteSaver.from_conn_string(db.url, serde=serde) as sqlite:
            yield sqlite
    else:
        from checkpointer.savers.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(
            db.url, schema=db.schema or "public", pool=False, serde=serde
        ) as pg:
            yield pg


def message(rng: random.Random, n: int) -> dict[str, Any]:
    """A chat message of about 100 bytes that does not compress away."""
    return {"role": "ai" if n % 2 else "user", "n": n, "content": rng.randbytes(40).hex()}


def write_thread(
    saver: Any,
    thread_id: str,
    steps: int,
    *,
    per_run: int = 3,
    seed: int = 0,
    grow: int = 2,
    after: tuple[RunnableConfig, dict[str, Any]] | None = None,
) -> Saved:
    """`steps` checkpoints in a chain; `chat` grows by `grow` items a step from 60 (over
    `MIN_BASE_BYTES` of msgpack: the first version is a base), `step` counts. Checkpoints
    are tagged with runs of `per_run` steps. Returns each config and the values put.
    `after`: a checkpoint (config, values) to go on from instead of starting afresh."""
    rng = random.Random(seed)
    chat = [message(rng, n) for n in range(60)]
    config = make_config(thread_id)
    version: Any = None
    saved: Saved = []
    first = 0
    if after is not None:
        config, values = after
        chat, first = list(values["chat"]), values["step"] + 1
        tup = saver.get_tuple(config)
        assert tup is not None
        version = tup.checkpoint["channel_versions"]["chat"]
    for i in range(first, first + steps):
        chat = [*chat, *(message(rng, len(chat) + k) for k in range(grow))]
        version = saver.get_next_version(version, None)
        checkpoint = {
            **empty_checkpoint(),
            "channel_versions": {"chat": version, "step": version},
            "channel_values": {"chat": list(chat), "step": i},
        }
        metadata = {"step": i, "run_id": f"{thread_id}-run{i // per_run}"}
        config = saver.put(config, checkpoint, metadata, {"chat": version, "step": version})
        saved.append((config, {"chat": list(chat), "step": i}))
    return saved


def drive(saver: Any, op: Op[Any]) -> Any:
    """Run one op through the saver's own executor."""

    def program() -> Generator[Op[Any], Any, Any]:
        result = yield op
        return result

    return saver._drive(program())


def rows(saver: Any, thread_id: str) -> list[tuple[str, str, str | None]]:
    """(version, type, base_version) of the thread's `chat` value rows."""
    d = saver._dialect
    found = drive(
        saver,
        Op(
            single(
                Stmt(
                    f"SELECT version, type, base_version FROM {d.blobs} WHERE thread_id = "
                    f"{d.p('t')} AND channel = {d.p('c')} ORDER BY version",
                    {"t": thread_id, "c": "chat"},
                    fetch=True,
                )
            )
        ),
    )
    return [(str(v), str(t), None if b is None else str(b)) for v, t, b in found]


def assert_has_tails(saver: Any, thread_id: str) -> None:
    found = rows(saver, thread_id)
    tails = [r for r in found if r[2] is not None]
    assert tails, found
    assert all(t.startswith(TAIL_PREFIX) for _, t, _ in tails)
    assert all(not t.startswith(TAIL_PREFIX) for _, t, b in found if b is None)


def assert_no_orphans(saver: Any, *thread_ids: str) -> None:
    orphans = drive(saver, Op(single(orphan_tails_stmt(saver._dialect, list(thread_ids)))))
    assert orphans == []


def at(config: RunnableConfig, thread_id: str) -> RunnableConfig:
    """The same checkpoint in another thread."""
    c = dict(config["configurable"])
    return {"configurable": {**c, "thread_id": thread_id}}


def assert_reads(saver: Any, saved: Saved, thread_id: str | None = None) -> int:
    """Every checkpoint of `saved` still stored (in `thread_id`, if given) reads back what
    was put, by get_tuple and by list; returns how many are stored."""
    target = thread_id or saved[0][0]["configurable"]["thread_id"]
    listed = {
        t.config["configurable"]["checkpoint_id"]: t.checkpoint["channel_values"]
        for t in saver.list(make_config(target))
    }
    found = 0
    for config, values in saved:
        cid = config["configurable"]["checkpoint_id"]
        if cid not in listed:
            continue
        found += 1
        assert listed[cid] == values
        tup = saver.get_tuple(at(config, target))
        assert tup is not None and tup.checkpoint["channel_values"] == values
    assert found == len(listed)
    return found


def ids(saved: Saved) -> list[str]:
    return [c["configurable"]["checkpoint_id"] for c, _ in saved]


# --------------------------------------------------------------------------- deletion
@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.integers(4, 16), keep=st.integers(1, 6), grow=st.integers(1, 4))
def test_retention_keeps_the_bases_of_the_tails_it_keeps(
    db: Db, steps: int, keep: int, grow: int
) -> None:
    thread_id = f"r-{uuid.uuid4().hex[:8]}"
    with db.saver() as saver:
        saved = write_thread(saver, thread_id, steps, grow=grow)
        assert_has_tails(saver, thread_id)
        report = saver.apply_retention(KeepLast(keep), thread_ids=[thread_id])
        assert report.checkpoints_deleted == max(0, steps - keep)
        assert assert_reads(saver, saved) == min(steps, keep)
        assert_no_orphans(saver, thread_id)
        # Only rows something still reads stay: the kept versions and their bases.
        kept_versions = {
            saver.get_tuple(c).checkpoint["channel_versions"]["chat"]  # type: ignore[union-attr]
            for c, _ in saved[-keep:]
        }
        stored = rows(saver, thread_id)
        needed = kept_versions | {b for v, _, b in stored if v in kept_versions and b}
        assert {v for v, _, _ in stored} == needed
        # The saver goes on from the head (tails of the base it remembers), and reads back.
        more = write_thread(saver, thread_id, 5, grow=grow, after=saved[-1])
        assert assert_reads(saver, saved + more) == min(steps, keep) + 5
        assert_no_orphans(saver, thread_id)


def test_prune_keeps_the_head_and_its_base(db: Db) -> None:
    with db.saver() as saver:
        saved = write_thread(saver, "p", 9)
        assert_has_tails(saver, "p")
        head = rows(saver, "p")[-1]
        assert head[2] is not None  # the head's value is a tail of an older version
        saver.prune(["p"])
        assert assert_reads(saver, saved) == 1
        assert {v for v, _, _ in rows(saver, "p")} == {head[0], head[2]}
        assert_no_orphans(saver, "p")


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.integers(4, 14), per_run=st.integers(1, 4), data=st.data())
def test_delete_for_runs_keeps_bases_other_runs_continue(
    db: Db, steps: int, per_run: int, data: st.DataObject
) -> None:
    thread_id = f"d-{uuid.uuid4().hex[:8]}"
    with db.saver() as saver:
        saved = write_thread(saver, thread_id, steps, per_run=per_run)
        assert_has_tails(saver, thread_id)
        runs = sorted({f"{thread_id}-run{i // per_run}" for i in range(steps)})
        doomed = data.draw(st.lists(st.sampled_from(runs), unique=True, max_size=len(runs)))
        saver.delete_for_runs(doomed)
        kept = [
            (c, v)
            for i, (c, v) in enumerate(saved)
            if f"{thread_id}-run{i // per_run}" not in doomed
        ]
        assert assert_reads(saver, saved) == len(kept)
        assert_no_orphans(saver, thread_id)


# --------------------------------------------------------------------------- copies
def test_copy_thread_copies_tails_with_their_bases(db: Db) -> None:
    with db.saver() as saver:
        saved = write_thread(saver, "a", 10)
        assert_has_tails(saver, "a")
        saver.copy_thread("a", "b")
        assert rows(saver, "b") == rows(saver, "a")
        assert assert_reads(saver, saved, "b") == 10
        assert_no_orphans(saver, "b")
        # The copy stands alone: deleting the source leaves it readable.
        saver.delete_thread("a")
        assert assert_reads(saver, saved, "b") == 10


def test_fork_of_a_retained_thread_brings_the_bases_no_checkpoint_names(db: Db) -> None:
    with db.saver() as saver:
        saved = write_thread(saver, "src", 9)
        saver.apply_retention(KeepLast(2), thread_ids=["src"])
        _, _, base = rows(saver, "src")[-1]
        assert (
            base is not None
            and base
            not in {
                saver.get_tuple(c).checkpoint["channel_versions"]["chat"]  # type: ignore[union-attr]
                for c, _ in saved[-2:]
            }
        )
    with Database.open(db.url, schema=db.schema) as tools:
        head = ids(saved)[-1]
        tools.run(fork_to_thread_plan(tools.dialect, "src", "fork", "", head), txn=True)
    with db.saver() as saver:
        assert assert_reads(saver, saved[-2:], "fork") == 2
        assert_no_orphans(saver, "fork")
        assert base in {v for v, _, _ in rows(saver, "fork")}


def test_fork_from_the_cli_reads_back(db: Db) -> None:
    with db.saver() as saver:
        saved = write_thread(saver, "cli-src", 7)
        saver.prune(["cli-src"])
    head = ids(saved)[-1]
    out = run_json("fork", "cli-src", head, "--to", "cli-fork", *db.args)
    assert out["thread_id"] == "cli-fork"
    with db.saver() as saver:
        assert assert_reads(saver, saved, "cli-fork") == 1
        assert_no_orphans(saver, "cli-fork")


def encrypted(**options: Any) -> EncryptedSerializer:
    return EncryptedSerializer(MsgpackSerializer(), keys={"k1": KEY}, active_key_id="k1", **options)


def test_relocating_copy_writes_tails_whole_for_the_new_thread(db: Db) -> None:
    """A database written plainly (tails), then opened by an encrypting saver that binds
    values to their place: its copies re-seal each value, tails resolved whole."""
    with db.saver() as saver:
        saved = write_thread(saver, "plain", 8)
        assert_has_tails(saver, "plain")
    with opened(db, encrypted(allow_plaintext=True)) as saver:
        saver.copy_thread("plain", "sealed")
        assert assert_reads(saver, saved, "sealed") == 8
        copied = rows(saver, "sealed")
        assert copied and all(b is None and t == TAG_ENCRYPTED for _, t, b in copied)
        # A fork of one checkpoint, re-sealed the same way.
        head = ids(saved)[-1]
        drive(
            saver,
            Op(
                fork_to_thread_plan(saver._dialect, "plain", "sealed-fork", "", head, saver.serde),
                txn=True,
            ),
        )
        assert assert_reads(saver, saved, "sealed-fork") == 8


# --------------------------------------------------------------------------- export
def _export(db: Db, thread_ids: list[str]) -> list[str]:
    out = io.StringIO()
    with Database.open(db.url, schema=db.schema) as tools:
        export_threads(tools, thread_ids, out)
    return out.getvalue().splitlines(keepends=True)


@pytest.mark.parametrize("target_kind", BACKENDS)
def test_export_then_import_carries_bases(db: Db, target_kind: str, tmp_path: Path) -> None:
    with db.saver() as saver:
        saved = write_thread(saver, "x", 10)
        saver.apply_retention(KeepLast(4), thread_ids=["x"])
        source_rows = rows(saver, "x")
    lines = _export(db, ["x"])
    header = json.loads(lines[0])
    assert header["version"] == TAILS_VERSION
    records = [json.loads(line) for line in lines[1:]]
    tails = [r for r in records if r.get("kind") == "blob" and "base" in r]
    assert tails and all(r["type"].startswith(TAIL_PREFIX) for r in tails)
    with empty_db(target_kind, tmp_path) as target:
        with Database.open(target.url, schema=target.schema) as tools:
            import_threads(tools, lines)
        with target.saver() as saver:
            assert rows(saver, "x") == source_rows
            assert assert_reads(saver, saved) == 4
            assert_no_orphans(saver, "x")
    # A file missing a base is refused whole, before anything lands.
    bases = {r["base"] for r in tails}
    broken = [
        line
        for line in lines
        if not (json.loads(line).get("kind") == "blob" and json.loads(line)["version"] in bases)
    ]
    end = json.loads(broken[-1])
    broken[-1] = json.dumps({**end, "blobs": end["blobs"] - len(bases)}) + "\n"
    with empty_db(target_kind, tmp_path) as target:
        with (
            Database.open(target.url, schema=target.schema) as tools,
            pytest.raises(ExportFormatError, match="continues a list"),
        ):
            import_threads(tools, broken)
        assert run_json("threads", *target.args)["total"] == 0
    # A tail record without its base field (as a version 2 writer could never make) too.
    stripped = [
        json.dumps({k: v for k, v in json.loads(line).items() if k != "base"}) + "\n"
        for line in lines
    ]
    with (
        empty_db(target_kind, tmp_path) as target,
        Database.open(target.url, schema=target.schema) as tools,
        pytest.raises(ExportFormatError, match="'base'"),
    ):
        import_threads(tools, stripped)


def test_small_lists_write_no_tails_and_export_as_version_2(db: Db) -> None:
    with db.saver() as saver:
        config = make_config("tiny")
        version: Any = None
        for i in range(5):
            version = saver.get_next_version(version, None)
            cp: Any = {
                **empty_checkpoint(),
                "channel_versions": {"chat": version},
                "channel_values": {"chat": list(range(i + 1))},
            }
            config = saver.put(config, cp, {"step": i}, {"chat": version})
        assert all(b is None for _, _, b in rows(saver, "tiny"))
    assert len(json.dumps(list(range(6)))) < MIN_BASE_BYTES
    assert json.loads(_export(db, ["tiny"])[0])["version"] == PLAIN_VERSION


# --------------------------------------------------------------------------- encryption
def test_reencrypt_writes_tails_whole_and_everything_reads_back(db: Db) -> None:
    with db.saver() as saver:
        saved = write_thread(saver, "e", 10)
        assert_has_tails(saver, "e")
    # A small batch: bases and their tails land in different pages (and transactions).
    with opened(db, encrypted(allow_plaintext=True)) as saver:
        report = reencrypt(saver, batch_size=3)
        assert report.rewritten >= 10 and report.skipped_changed == 0
        stored = rows(saver, "e")
        assert all(t == TAG_ENCRYPTED and b is None for _, t, b in stored), stored
        assert assert_reads(saver, saved) == 10
        # Nothing references the old bases now: retention may drop them and reads stay.
        saver.apply_retention(KeepLast(3), thread_ids=["e"])
        assert assert_reads(saver, saved) == 3
    with opened(db, encrypted()) as saver:  # no plaintext accepted any more
        assert assert_reads(saver, saved) == 3


def test_encrypting_saver_without_plaintext_refuses_tails_loudly(db: Db) -> None:
    with db.saver() as saver:
        saved = write_thread(saver, "loud", 6)
    with opened(db, encrypted()) as saver, pytest.raises(CheckpointerError):
        saver.get_tuple(saved[-1][0])


# --------------------------------------------------------------------------- inspection
def test_cli_show_and_stats_resolve_tails(db: Db) -> None:
    with db.saver() as saver:
        saved = write_thread(saver, "show", 8)
        assert_has_tails(saver, "show")
        saver.apply_retention(KeepLast(3), thread_ids=["show"])
    kept = saved[-3:]
    for config, values in kept:
        cid = config["configurable"]["checkpoint_id"]
        data = run_json("show", "show", cid, *db.args)
        assert data["values"]["chat"] == values["chat"]
        assert data["channels"]["chat"]["kind"] == "value"
    first, head = ids(kept)[0], ids(kept)[-1]
    diff = {c["channel"]: c for c in run_json("diff", "show", first, head, *db.args)["channels"]}
    assert (diff["chat"]["a"], diff["chat"]["b"]) == (kept[0][1]["chat"], kept[-1][1]["chat"])
    # The web UI reads through the same reader.
    with Database.open(db.url, schema=db.schema, readonly=True) as tools:
        view = ReaderSource(tools).state("show", "", head)
        assert view.channels["chat"].value == kept[-1][1]["chat"]
    # Sizes are the stored rows' bytes: tails count as what they store.
    with db.saver() as saver:
        stored = rows(saver, "show")
    stats = run_json("stats", "show", *db.args)
    chat = {c["channel"]: c for c in stats["channels"]}["chat"]
    assert chat["kind"] == "value" and chat["blobs"] == len(stored) > 1
    assert any(b is not None for _, _, b in stored)


# --------------------------------------------------------------------------- join_whole
item_strategy = st.one_of(
    st.text(max_size=300),
    st.integers(),
    st.dictionaries(st.text(max_size=8), st.text(max_size=200), max_size=4),
    st.lists(st.integers(), max_size=20),
)


@settings(max_examples=60, deadline=None)
@given(
    head=st.lists(item_strategy, min_size=1, max_size=40),
    extra=st.lists(item_strategy, min_size=1, max_size=4),
    compressed=st.booleans(),
    snapshot=st.booleans(),
)
def test_join_whole_gives_the_bytes_of_the_whole_list(
    head: list[Any], extra: list[Any], compressed: bool, snapshot: bool
) -> None:
    """A tail joined with its base is the serializer's own encoding of the whole list,
    byte for byte (compressed or not, a delta snapshot of it or not), whatever the items."""
    inner = MsgpackSerializer()
    serde: Any = CompressingSerializer(inner) if compressed else inner
    codec = list_codec(serde)
    assert codec is not None
    padding = ["p" * 100] * (MIN_BASE_BYTES // 100 + 1)  # the base must be large enough
    base_value: Any = [*padding, *head]
    whole_value: Any = [*base_value, *extra]
    if snapshot:
        base_value, whole_value = DeltaSnapshot(base_value), DeltaSnapshot(whole_value)
    memory = ListTails()
    base = memory.encode(codec, "t", "", "chat", "1", base_value)
    assert isinstance(base, tuple)
    out = memory.encode(codec, "t", "", "chat", "2", whole_value)
    event("tail" if isinstance(out, TailRow) else "whole")
    if not isinstance(out, TailRow):  # grown past the tail share: written whole
        assert serde.loads_typed(out) == whole_value
        return
    joined = join_whole(base, (out.type, out.blob), {})
    assert decompress_typed(joined) == inner.dumps_typed(whole_value)
    assert serde.loads_typed(joined) == whole_value
    assert compressed or joined[0] == "msgpack"


def test_cli_export_import_and_an_older_importer(
    db: Db, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`checkpointer export` / `import` carry tails; an importer that reads only version 2
    (or 3, tails of plain lists) refuses the file up front instead of storing tails without
    their bases (or joining a snapshot's tail into a wrong value)."""
    with db.saver() as saver:
        saved = write_thread(saver, "cli", 8)
        saver.prune(["cli"])
    result = run("export", "--all", *db.args)
    assert result.exit_code == 0, result.stderr
    path = tmp_path / "tails.jsonl"
    path.write_text(result.stdout)
    assert json.loads(result.stdout.splitlines()[0])["version"] == TAILS_VERSION
    with empty_db(db.kind, tmp_path) as target:
        assert run_json("import", str(path), *target.args)["checkpoints"] == 1
        with target.saver() as saver:
            assert assert_reads(saver, saved) == 1
            assert any(b is not None for _, _, b in rows(saver, "cli"))
    import checkpointer.export as export_module

    # Code reading version 2 (no tails) or 3 (tails of plain lists only) refuses it.
    for older in (PLAIN_VERSION, TAILS_VERSION - 1):
        monkeypatch.setattr(export_module, "VERSION", older)
        with pytest.raises(ExportFormatError, match="not supported"):
            export_module.read_header(result.stdout.splitlines()[0])


# --------------------------------------------------------------------------- concurrency
def test_postgres_put_racing_delete_for_runs_keeps_its_value_readable(tmp_path: Path) -> None:
    """delete_for_runs deletes a run whose base the next put (another run, going on from
    the head) writes a tail of: the deletion's transaction is open when the put starts,
    and commits while the put waits for the thread. The put's value must read back."""
    import threading
    import time

    import psycopg
    from psycopg.rows import tuple_row

    from checkpointer.savers.sql.deletion import delete_for_runs_plan

    with empty_db("postgres", tmp_path) as db, db.saver() as saver:
        saved = write_thread(saver, "race", 2, per_run=2)  # run race-run0: a base, a tail
        assert_has_tails(saver, "race")
        plan = delete_for_runs_plan(saver._dialect, ["race-run0"])
        with psycopg.connect(db.url) as conn:
            with conn.cursor(binary=True, row_factory=tuple_row) as cur:
                try:
                    stmt = next(plan)
                    while True:
                        if stmt.many:
                            cur.executemany(stmt.sql, stmt.params)
                            out: list[Any] = []
                        else:
                            cur.execute(stmt.sql, stmt.params or None)
                            out = cur.fetchall() if stmt.fetch else []
                        stmt = plan.send(out)
                except StopIteration:
                    pass
            more: Saved = []
            put = threading.Thread(
                target=lambda: more.extend(
                    write_thread(saver, "race", 1, per_run=2, after=saved[-1])
                )
            )
            put.start()
            time.sleep(0.5)
            assert put.is_alive()  # waiting for the deletion's lock on the thread
            conn.commit()
            put.join()
        assert assert_reads(saver, more) == 1
