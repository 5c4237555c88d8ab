"""One behaviour suite for every saver: in-memory, SQLite (sync, async), PostgreSQL (sync,
async). Sync savers are driven through their sync methods, async ones through their async
methods (see `Harness` in conftest). The in-memory saver is the reference for delta history.
"""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpointer.errors import CheckpointerError, ConfigError
from checkpointer.ids import new_checkpoint_id, next_channel_version, task_id_for
from checkpointer.savers.memory import InMemorySaver
from checkpointer.types import (
    ERROR,
    INTERRUPT,
    RESUME,
    SCHEDULED,
    Checkpoint,
    CheckpointTuple,
    RunnableConfig,
    empty_checkpoint,
    make_config,
)
from tests.conftest import Harness

pytestmark = pytest.mark.asyncio

CHANNELS = ["a", "b", "c"]


def checkpoint(
    versions: dict[str, str],
    values: dict[str, Any] | None = None,
    checkpoint_id: str | None = None,
    **extra: Any,
) -> Checkpoint:
    cp = empty_checkpoint()
    if checkpoint_id is not None:
        cp["id"] = checkpoint_id
    cp["channel_versions"] = dict(versions)
    cp["channel_values"] = dict(values or {})
    cp.update(extra)  # type: ignore[typeddict-item]
    return cp


def tid(step: int, name: str = "task") -> str:
    return task_id_for(step, name)


def thread() -> str:
    return f"thread-{uuid.uuid4().hex[:10]}"


def ids_of(tuples: list[CheckpointTuple]) -> list[str]:
    return [t.config["configurable"]["checkpoint_id"] for t in tuples]


class Chain:
    """Builds a thread step by step the way a runtime does: the writes that produce the next
    checkpoint are pending on the current one; only changed channels get new versions."""

    def __init__(self, h: Harness, thread_id: str, ns: str = "") -> None:
        self.h = h
        self.thread_id = thread_id
        self.ns = ns
        self.head: RunnableConfig = make_config(thread_id, ns)
        self.versions: dict[str, dict[str, str]] = {}
        self.configs: list[RunnableConfig] = []
        self.step_no = -1

    def versions_at(self, config: RunnableConfig) -> dict[str, str]:
        cid = config["configurable"].get("checkpoint_id")
        return dict(self.versions.get(cid, {})) if cid else {}

    async def step(
        self,
        *,
        stored: dict[str, Any] | None = None,
        writes: list[tuple[str, str, list[tuple[str, Any]]]] | None = None,
        checkpoint_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        parent: RunnableConfig | None = None,
    ) -> RunnableConfig:
        """`writes`: (task name, task path, [(channel, value)]) pending on the parent;
        `stored`: channel values stored in the new checkpoint (their versions move)."""
        parent = parent if parent is not None else self.head
        self.step_no += 1
        versions = self.versions_at(parent)
        changed: set[str] = set()
        if parent["configurable"].get("checkpoint_id"):
            for name, path, batch in writes or []:
                await self.h.put_writes(parent, batch, tid(self.step_no, name), path)
                changed.update(ch for ch, _ in batch)
        changed.update(stored or {})
        new_versions = {}
        for ch in sorted(changed):
            versions[ch] = next_channel_version(versions.get(ch))
            new_versions[ch] = versions[ch]
        cp = checkpoint(versions, stored, checkpoint_id)
        meta = {"source": "loop", "step": self.step_no, **(metadata or {})}
        # As runtimes do: every channel rebuilt from writes has non-zero delta counters.
        counters = {ch: (1, 1) for ch in versions if ch not in (stored or {})}
        if counters:
            meta.setdefault("counters_since_delta_snapshot", counters)
        config = await self.h.put(parent, cp, meta, new_versions)  # type: ignore[arg-type]
        self.versions[cp["id"]] = versions
        self.configs.append(config)
        self.head = config
        return config


# ------------------------------------------------------------------ basic round trips
async def test_empty_thread(harness: Harness) -> None:
    assert await harness.get_tuple(make_config(thread())) is None
    assert await harness.list(make_config(thread())) == []
    assert await harness.delta(make_config(thread()), ["a"]) == {"a": {"writes": []}}


ROUND_TRIP_VALUES: dict[str, Any] = {
    "int": 42,
    "big": 2**80,
    "neg": -7,
    "float": 1.5,
    "str": "héllo \x00 wörld \x00",
    "bytes": b"\x00\x01\xff",
    "none": None,
    "bool": False,
    "list": [1, "two", None, [3]],
    "dict": {"k": {"nested": [1, 2]}, "nul\x00": "v\x00"},
    "tuple": (1, 2),
    "empty": "",
    "dt": dt.datetime(2024, 5, 1, 12, 30, tzinfo=dt.UTC),
    "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "decimal": decimal.Decimal("1.10"),
}


async def test_round_trip(harness: Harness) -> None:
    t = thread()
    versions = {ch: next_channel_version(None) for ch in ROUND_TRIP_VALUES}
    cp = checkpoint(
        versions,
        ROUND_TRIP_VALUES,
        versions_seen={"node": {"a": versions["int"]}},
        updated_channels=["int", "str"],
    )
    metadata = {
        "source": "input",
        "step": -1,
        "parents": {},
        "run_id": "run-1",
        "user": "ünïcode",
        "n": 3,
        "flag": True,
        "nested": {"x": [1, 2]},
        "counters_since_delta_snapshot": {"a": (1, 2)},
    }
    config = await harness.put(make_config(t), cp, metadata, versions)  # type: ignore[arg-type]
    assert config == make_config(t, "", cp["id"])
    await harness.put_writes(config, [("w", "x\x00y"), ("w", None), ("w", b"\x00")], tid(0))
    got = await harness.get_tuple(config)
    assert got is not None
    assert got.config == make_config(t, "", cp["id"])
    assert got.checkpoint == cp
    assert got.metadata == metadata
    assert got.parent_config is None
    assert got.pending_writes == [
        (tid(0), "w", "x\x00y"),
        (tid(0), "w", None),
        (tid(0), "w", b"\x00"),
    ]
    latest = await harness.get_tuple(make_config(t))
    assert latest == got
    listed = await harness.list(make_config(t))
    assert listed == [got]


@pytest.mark.parametrize("count", [1, 32, 33, 80])
async def test_wide_steps_round_trip(harness: Harness, count: int) -> None:
    """A step that changes many channels and writes many values (Postgres binds a few
    rows one way and many another: both must store the same)."""
    t = thread()
    values = {f"ch{i}": [i, "x" * (i % 7), b"\x00" * (i % 3)] for i in range(count)}
    versions = {ch: next_channel_version(None) for ch in values}
    config = await harness.put(make_config(t), checkpoint(versions, values), {}, versions)
    writes = [(f"w{i % 5}", {"i": i, "blob": bytes([i % 256]) * i}) for i in range(count)]
    await harness.put_writes(config, writes, tid(0))
    got = await harness.get_tuple(config)
    assert got is not None
    assert got.checkpoint["channel_values"] == values
    assert got.pending_writes == [(tid(0), ch, value) for ch, value in writes]
    # A re-sent batch adds nothing (insert-if-absent, by slot).
    await harness.put_writes(config, writes, tid(0))
    again = await harness.get_tuple(config)
    assert again is not None and again.pending_writes == got.pending_writes


async def test_put_returns_child_config_and_links_parent(harness: Harness) -> None:
    chain = Chain(harness, thread())
    first = await chain.step(stored={"a": 1})
    second = await chain.step(stored={"b": 2})
    got = await harness.get_tuple(second)
    assert got is not None
    assert got.parent_config == first
    assert got.checkpoint["channel_values"] == {"a": 1, "b": 2}


async def test_unchanged_channels_are_not_reserialized(harness: Harness) -> None:
    t = thread()
    v1 = next_channel_version(None)
    first = await harness.put(make_config(t), checkpoint({"a": v1}, {"a": "old"}), {}, {"a": v1})
    v2 = next_channel_version(None)
    # "a" did not move: its (unserializable) in-memory value must not be touched, and
    # reading returns the blob stored at its version.
    cp = checkpoint({"a": v1, "b": v2}, {"a": lambda: None, "b": "new"})
    second = await harness.put(first, cp, {}, {"b": v2})
    got = await harness.get_tuple(second)
    assert got is not None
    assert got.checkpoint["channel_values"] == {"a": "old", "b": "new"}


async def test_channel_versioned_without_value_gets_no_value(harness: Harness) -> None:
    t = thread()
    v = next_channel_version(None)
    config = await harness.put(
        make_config(t), checkpoint({"d": v, "e": v}, {"e": None}), {}, {"d": v, "e": v}
    )
    got = await harness.get_tuple(config)
    assert got is not None
    assert got.checkpoint["channel_values"] == {"e": None}
    assert got.checkpoint["channel_versions"] == {"d": v, "e": v}


async def test_put_same_checkpoint_twice_updates_metadata(harness: Harness) -> None:
    t = thread()
    cp = checkpoint({})
    await harness.put(make_config(t), cp, {"step": 1}, {})
    await harness.put(make_config(t), cp, {"step": 2}, {})
    listed = await harness.list(make_config(t))
    assert [x.metadata["step"] for x in listed] == [2]


async def test_put_rejects_self_parent(harness: Harness) -> None:
    t = thread()
    cp = checkpoint({})
    with pytest.raises(ConfigError):
        await harness.put(make_config(t, "", cp["id"]), cp, {}, {})


# ------------------------------------------------------------------ namespaces and forks
async def test_namespaces_are_separate(harness: Harness) -> None:
    t = thread()
    root = Chain(harness, t)
    sub = Chain(harness, t, "child:1")
    r1 = await root.step(stored={"a": "root"})
    s1 = await sub.step(stored={"a": "sub"})
    s2 = await sub.step(stored={"a": "sub2"})
    latest_root = await harness.get_tuple(make_config(t))
    assert latest_root is not None and latest_root.config == r1
    latest_sub = await harness.get_tuple(make_config(t, "child:1"))
    assert latest_sub is not None and latest_sub.config == s2
    assert latest_sub.checkpoint["channel_values"] == {"a": "sub2"}
    assert ids_of(await harness.list(make_config(t, "child:1"))) == [
        s2["configurable"]["checkpoint_id"],
        s1["configurable"]["checkpoint_id"],
    ]
    everything = await harness.list({"configurable": {"thread_id": t}})
    assert sorted(ids_of(everything)) == sorted(
        c["configurable"]["checkpoint_id"] for c in (r1, s1, s2)
    )
    only_root = await harness.list(make_config(t, ""))
    assert ids_of(only_root) == [r1["configurable"]["checkpoint_id"]]


async def test_forks(harness: Harness) -> None:
    chain = Chain(harness, thread())
    base = await chain.step(stored={"a": 0})
    left = await chain.step(stored={"a": "left"}, parent=base)
    right = await chain.step(stored={"a": "right"}, parent=base)
    for config, value in ((left, "left"), (right, "right")):
        got = await harness.get_tuple(config)
        assert got is not None
        assert got.parent_config == base
        assert got.checkpoint["channel_values"] == {"a": value}
    listed = await harness.list(make_config(chain.thread_id))
    assert len(listed) == 3


# ------------------------------------------------------------------ list
async def test_list_order_before_limit(harness: Harness) -> None:
    chain = Chain(harness, thread())
    configs = [await chain.step(stored={"a": i}) for i in range(7)]
    ids = [c["configurable"]["checkpoint_id"] for c in configs]
    listed = await harness.list(make_config(chain.thread_id))
    assert ids_of(listed) == ids[::-1]
    assert ids_of(await harness.list(make_config(chain.thread_id), limit=3)) == ids[::-1][:3]
    assert await harness.list(make_config(chain.thread_id), limit=0) == []
    before = await harness.list(make_config(chain.thread_id), before=configs[4])
    assert ids_of(before) == ids[:4][::-1]
    before_limited = await harness.list(make_config(chain.thread_id), before=configs[4], limit=2)
    assert ids_of(before_limited) == [ids[3], ids[2]]
    exact = await harness.list(configs[2])
    assert ids_of(exact) == [ids[2]]
    # Each listed tuple carries its values and pending writes like get_tuple.
    for tup in listed:
        assert tup == await harness.get_tuple(tup.config)


async def test_list_pages_past_page_size(harness: Harness) -> None:
    if hasattr(harness.saver, "page_size"):
        harness.saver.page_size = 3
    chain = Chain(harness, thread())
    configs = [await chain.step(stored={"a": i}, writes=[("t", "", [("w", i)])]) for i in range(10)]
    ids = [c["configurable"]["checkpoint_id"] for c in configs]
    assert ids_of(await harness.list(make_config(chain.thread_id))) == ids[::-1]
    assert ids_of(await harness.list(make_config(chain.thread_id), limit=7)) == ids[::-1][:7]
    assert ids_of(await harness.list(make_config(chain.thread_id), limit=6)) == ids[::-1][:6]


async def test_list_metadata_filter(harness: Harness) -> None:
    t = thread()
    chain = Chain(harness, t)
    await chain.step(metadata={"source": "input", "user": "ann", "n": 1, "tags": {"x": [1, 2]}})
    await chain.step(metadata={"user": "bob", "n": 2, "opt": None})
    await chain.step(metadata={"user": "ann", "n": 2, "tags": {"x": [1]}})
    cfg = make_config(t)

    async def steps(**flt: Any) -> list[int]:
        return [x.metadata["step"] for x in await harness.list(cfg, filter=flt)]

    assert await steps(user="ann") == [2, 0]
    assert await steps(user="ann", n=2) == [2]
    assert await steps(source="loop") == [2, 1]
    assert await steps(tags={"x": [1, 2]}) == [0]
    assert await steps(tags={"x": [1]}) == [2]
    assert await steps(opt=None) == [1]
    assert await steps(missing="x") == []
    assert await steps(user="' OR 1=1 --") == []
    assert await steps() == [2, 1, 0]
    # Across all threads.
    other = Chain(harness, thread())
    await other.step(metadata={"user": "ann", "n": 9})
    everywhere = await harness.list(None, filter={"user": "ann"})
    assert {x.metadata["n"] for x in everywhere} >= {1, 2, 9}


@pytest.mark.parametrize(
    "key",
    ["user') OR 1=1 --", "a..b", "$.x", 'x"y', "", "a.", "a b", 7],
)
async def test_list_filter_rejects_bad_keys(harness: Harness, key: Any) -> None:
    with pytest.raises(ConfigError):
        await harness.list(make_config(thread()), filter={key: 1})


# ------------------------------------------------------------------ pending writes
async def test_put_writes_is_idempotent(harness: Harness) -> None:
    chain = Chain(harness, thread())
    config = await chain.step()
    await harness.put_writes(config, [("x", 1), ("y", 2)], tid(0))
    await harness.put_writes(config, [("x", 10), ("y", 20)], tid(0))
    got = await harness.get_tuple(config)
    assert got is not None
    assert got.pending_writes == [(tid(0), "x", 1), (tid(0), "y", 2)]


async def test_special_channel_batches_replace(harness: Harness) -> None:
    chain = Chain(harness, thread())
    config = await chain.step()
    await harness.put_writes(config, [(ERROR, "first")], tid(0))
    await harness.put_writes(config, [(ERROR, "second")], tid(0))
    await harness.put_writes(config, [(INTERRUPT, "i1"), (RESUME, "r1")], tid(1))
    await harness.put_writes(config, [(INTERRUPT, "i2"), (RESUME, "r2")], tid(1))
    # A mixed batch is insert-if-absent, special channels included.
    await harness.put_writes(config, [("x", 1), (SCHEDULED, "s1")], tid(2))
    await harness.put_writes(config, [("x", 2), (SCHEDULED, "s2")], tid(2))
    got = await harness.get_tuple(config)
    assert got is not None
    writes = sorted(got.pending_writes or [])
    assert (tid(0), ERROR, "second") in writes
    assert (tid(0), ERROR, "first") not in writes
    assert (tid(1), INTERRUPT, "i2") in writes and (tid(1), RESUME, "r2") in writes
    assert (tid(2), "x", 1) in writes and (tid(2), SCHEDULED, "s1") in writes
    assert len(writes) == 5


async def test_pending_writes_order(harness: Harness) -> None:
    chain = Chain(harness, thread())
    config = await chain.step()
    # Sent in a scrambled order; returned in (task_path, task_id, idx) order.
    await harness.put_writes(config, [("c", "b2-0"), ("c", "b2-1")], tid(5, "b"), "~1")
    await harness.put_writes(config, [("c", "a-0"), (ERROR, "a-err")], tid(5, "a"), "~0")
    await harness.put_writes(config, [("c", "none-0")], tid(5, "z"), "")
    await harness.put_writes(config, [("c", "b1-0")], tid(5, "c"), "~1")
    got = await harness.get_tuple(config)
    assert got is not None
    expected_keys = sorted(
        [
            ("~1", tid(5, "b"), 0, "b2-0"),
            ("~1", tid(5, "b"), 1, "b2-1"),
            ("~0", tid(5, "a"), 0, "a-0"),
            ("~0", tid(5, "a"), -1, "a-err"),
            ("", tid(5, "z"), 0, "none-0"),
            ("~1", tid(5, "c"), 0, "b1-0"),
        ]
    )
    assert [w[2] for w in got.pending_writes or []] == [k[3] for k in expected_keys]
    assert (got.pending_writes or [])[0][2] == "none-0"


async def test_writes_may_arrive_before_their_checkpoint(harness: Harness) -> None:
    t = thread()
    cp = checkpoint({})
    early = make_config(t, "", cp["id"])
    await harness.put_writes(early, [("x", "early")], tid(0))
    await harness.put(make_config(t), cp, {}, {})
    got = await harness.get_tuple(early)
    assert got is not None
    assert got.pending_writes == [(tid(0), "x", "early")]


async def test_put_writes_needs_checkpoint_id(harness: Harness) -> None:
    with pytest.raises(CheckpointerError):
        await harness.put_writes(make_config(thread()), [("x", 1)], tid(0))


# ------------------------------------------------------------------ lifecycle
async def _snapshot(h: Harness, thread_id: str) -> list[CheckpointTuple]:
    return await h.list({"configurable": {"thread_id": thread_id}})


async def test_delete_thread(harness: Harness) -> None:
    keep, drop = Chain(harness, thread()), Chain(harness, thread())
    for chain in (keep, drop):
        await chain.step(stored={"a": 1}, writes=[("t", "", [("x", 1)])])
        await chain.step(stored={"a": 2}, writes=[("t", "", [("x", 2)])])
    await harness.put_writes(drop.head, [("x", "pending")], tid(9))
    before = await _snapshot(harness, keep.thread_id)
    await harness.delete_thread(drop.thread_id)
    assert await _snapshot(harness, drop.thread_id) == []
    assert await harness.get_tuple(drop.head) is None
    assert await _snapshot(harness, keep.thread_id) == before


async def test_delete_for_runs(harness: Harness) -> None:
    chain = Chain(harness, thread())
    r1 = [await chain.step(stored={"a": i}, metadata={"run_id": "r1"}) for i in range(3)]
    r2 = [
        await chain.step(
            stored={"a": 10 + i}, writes=[("t", "", [("x", i)])], metadata={"run_id": "r2"}
        )
        for i in range(2)
    ]
    await harness.put_writes(r2[-1], [("x", "pending")], tid(99))
    other = Chain(harness, thread())
    await other.step(stored={"a": 1}, metadata={"run_id": "r2"})
    await harness.delete_for_runs(["r2", "nope"])
    remaining = await _snapshot(harness, chain.thread_id)
    assert ids_of(remaining) == [c["configurable"]["checkpoint_id"] for c in r1][::-1]
    assert await harness.get_tuple(r2[-1]) is None
    assert await _snapshot(harness, other.thread_id) == []
    latest = await harness.get_tuple(make_config(chain.thread_id))
    assert latest is not None and latest.checkpoint["channel_values"] == {"a": 2}
    await harness.delete_for_runs([])


async def test_delete_for_runs_refuses_to_break_delta_history(harness: Harness) -> None:
    chain = Chain(harness, thread())
    await chain.step(stored={"d": ["seed"]}, metadata={"run_id": "r1"})
    await chain.step(writes=[("t", "", [("d", 1)])], metadata={"run_id": "r1"})
    await chain.step(writes=[("t", "", [("d", 2)])], metadata={"run_id": "r2"})
    with pytest.raises(CheckpointerError):
        await harness.delete_for_runs(["r1"])
    assert len(await _snapshot(harness, chain.thread_id)) == 3
    await harness.delete_for_runs(["r2"])
    assert len(await _snapshot(harness, chain.thread_id)) == 2
    await harness.delete_for_runs(["r1"])
    assert await _snapshot(harness, chain.thread_id) == []


async def test_copy_thread(harness: Harness) -> None:
    src = Chain(harness, thread())
    await src.step(stored={"d": ["seed"], "a": 1})
    await src.step(writes=[("t", "~0", [("d", 1), ("a", 2)])], stored={"a": 2})
    await src.step(writes=[("t", "~0", [("d", 2)])])
    await harness.put_writes(src.head, [("d", "pending")], tid(50))
    sub = Chain(harness, src.thread_id, "sub:1")
    await sub.step(stored={"a": "sub"})
    dst = thread()
    await harness.copy_thread(src.thread_id, dst)

    def rethread(tup: CheckpointTuple) -> CheckpointTuple:
        def swap(cfg: RunnableConfig | None) -> RunnableConfig | None:
            if cfg is None:
                return None
            return {"configurable": {**cfg["configurable"], "thread_id": dst}}

        return tup._replace(config=swap(tup.config), parent_config=swap(tup.parent_config))

    source_items = await _snapshot(harness, src.thread_id)
    copied = await _snapshot(harness, dst)

    def key(t: CheckpointTuple) -> tuple[str, str]:
        return (
            t.config["configurable"]["checkpoint_ns"],
            t.config["configurable"]["checkpoint_id"],
        )

    assert sorted(copied, key=key) == sorted(map(rethread, source_items), key=key)
    head = make_config(dst, "", src.head["configurable"]["checkpoint_id"])
    assert await harness.delta(head, ["d"]) == await harness.delta(src.head, ["d"])
    assert len(await _snapshot(harness, src.thread_id)) == 4


async def test_prune_delete(harness: Harness) -> None:
    a, b = Chain(harness, thread()), Chain(harness, thread())
    for chain in (a, b):
        await chain.step(stored={"x": 1})
        await chain.step(stored={"x": 2})
    await harness.prune([a.thread_id], strategy="delete")
    assert await _snapshot(harness, a.thread_id) == []
    assert len(await _snapshot(harness, b.thread_id)) == 2


async def test_prune_rejects_unknown_strategy(harness: Harness) -> None:
    with pytest.raises(ValueError):
        await harness.prune([thread()], strategy="keep_everything")


async def test_prune_keep_latest_plain_thread(harness: Harness) -> None:
    chain = Chain(harness, thread())
    for i in range(5):
        await chain.step(stored={"x": i, "y": -i}, writes=[("t", "", [("x", i), ("y", -i)])])
    await harness.put_writes(chain.head, [("x", "pending")], tid(77))
    head_before = await harness.get_tuple(chain.head)
    await harness.prune([chain.thread_id])
    remaining = await _snapshot(harness, chain.thread_id)
    assert remaining == [head_before]


async def test_prune_keep_latest_keeps_delta_history(harness: Harness) -> None:
    chain = Chain(harness, thread())
    sub = Chain(harness, chain.thread_id, "sub:1")
    await chain.step(stored={"d": ["d0"], "e": ["e0"], "r": 0})  # 0: seeds both
    await chain.step(writes=[("t", "", [("d", 1), ("e", 1)])])  # 1
    await chain.step(writes=[("t", "", [("d", 2)])], stored={"e": ["e-snap"], "r": 1})  # 2
    await chain.step(writes=[("t", "~1", [("d", 3), ("e", 3)])], stored={"r": 2})  # 3
    await chain.step(writes=[("t", "", [("d", 4), ("e", 4)])])  # 4 (head)
    await harness.put_writes(chain.head, [("d", "pending")], tid(60))
    await sub.step(stored={"z": 1})
    await sub.step(stored={"z": 2})
    channels = ["d", "e", "r"]
    history_before = await harness.delta(chain.head, channels)
    head_before = await harness.get_tuple(chain.head)
    await harness.prune([chain.thread_id])
    after = await _snapshot(harness, chain.thread_id)
    kept_root = [t for t in after if t.config["configurable"]["checkpoint_ns"] == ""]
    # d needs everything back to checkpoint 0 (its only stored value); e back to 2.
    assert ids_of(kept_root) == [c["configurable"]["checkpoint_id"] for c in chain.configs][::-1]
    assert await harness.delta(chain.head, channels) == history_before
    assert await harness.get_tuple(chain.head) == head_before
    kept_sub = [t for t in after if t.config["configurable"]["checkpoint_ns"] == "sub:1"]
    assert ids_of(kept_sub) == [sub.head["configurable"]["checkpoint_id"]]

    # Snapshot d at a new head: the head replays e from 2, and what is kept must read back
    # too: 2, 3 and 4 replay d from 0, so nothing can go yet.
    await chain.step(writes=[("t", "", [("d", 5)])], stored={"d": ["d-snap"]})
    channels = ["e"]
    history_before = await harness.delta(chain.head, channels)
    await harness.prune([chain.thread_id])
    kept_root = [
        t
        for t in await _snapshot(harness, chain.thread_id)
        if t.config["configurable"]["checkpoint_ns"] == ""
    ]
    assert ids_of(kept_root) == [c["configurable"]["checkpoint_id"] for c in chain.configs][::-1]
    assert await harness.delta(chain.head, channels) == history_before

    # Snapshot e as well: now the head stands alone.
    await chain.step(writes=[("t", "", [("e", 6)])], stored={"e": ["e-snap-2"]})
    await harness.prune([chain.thread_id])
    kept_root = [
        t
        for t in await _snapshot(harness, chain.thread_id)
        if t.config["configurable"]["checkpoint_ns"] == ""
    ]
    assert ids_of(kept_root) == [chain.head["configurable"]["checkpoint_id"]]


# ------------------------------------------------------------------ delta history
async def test_delta_history_contract(harness: Harness) -> None:
    chain = Chain(harness, thread())
    c0 = await chain.step(stored={"a": None})  # a stored None is a seed
    await chain.step(writes=[("t1", "~1", [("a", 1)]), ("t0", "~0", [("a", 0), ("b", "b0")])])
    await chain.step(writes=[("t", "", [("a", 2), ("b", "b1")])])
    target = chain.head
    await harness.put_writes(target, [("a", "own")], tid(99))  # the target's own: excluded
    hist = await harness.delta(target, ["a", "b", "never"])
    assert hist["a"]["seed"] is None
    # c0's own writes (none here) would count; then step 1's writes in task-path order.
    assert [w[2] for w in hist["a"]["writes"]] == [0, 1, 2]
    assert "seed" not in hist["b"]
    assert [w[2] for w in hist["b"]["writes"]] == ["b0", "b1"]
    assert hist["never"] == {"writes": []}
    assert await harness.delta(make_config(chain.thread_id), ["a"]) == {"a": hist["a"]}
    # History of the root: nothing before it.
    assert await harness.delta(c0, ["a"]) == {"a": {"writes": []}}
    assert await harness.delta(target, []) == {}


async def test_delta_history_includes_seed_checkpoint_writes(harness: Harness) -> None:
    chain = Chain(harness, thread())
    await chain.step()
    await chain.step(writes=[("t", "", [("a", "before-seed")])], stored={"a": ["S"]})
    await chain.step(writes=[("t", "", [("a", "after-seed")])])
    hist = await harness.delta(chain.head, ["a"])
    assert hist == {"a": {"seed": ["S"], "writes": [(tid(2, "t"), "a", "after-seed")]}}


async def test_delta_history_children_sorting_below_parents(harness: Harness) -> None:
    chain = Chain(harness, thread())
    ids = [f"{9 - i:08d}-0000-0000-0000-000000000000" for i in range(6)]
    await chain.step(stored={"a": ["seed"]}, checkpoint_id=ids[0])
    for i in range(1, 6):
        await chain.step(writes=[("t", "", [("a", i)])], checkpoint_id=ids[i])
    hist = await harness.delta(chain.head, ["a"])
    assert hist["a"]["seed"] == ["seed"]
    # The writes pending on the head's parent made the head: they count.
    assert [w[2] for w in hist["a"]["writes"]] == [1, 2, 3, 4, 5]
    # "Latest" is by id: the first checkpoint has the largest id.
    latest = await harness.get_tuple(make_config(chain.thread_id))
    assert latest is not None and latest.config["configurable"]["checkpoint_id"] == ids[0]


async def test_delta_history_long_thread(harness: Harness) -> None:
    chain = Chain(harness, thread())
    n = 1030
    await chain.step(stored={"a": ["seed"], "b": 0})
    for i in range(1, n):
        await chain.step(writes=[("t", "", [("a", i)])], stored={"b": i} if i == 900 else None)
    hist = await harness.delta(chain.head, ["a", "b"])
    assert hist["a"]["seed"] == ["seed"]
    assert [w[2] for w in hist["a"]["writes"]] == list(range(1, n))
    assert hist["b"] == {"seed": 900, "writes": []}


ID_ORDERS = ("increasing", "decreasing", "random")

step_strategy = st.fixed_dictionaries(
    {
        "fork": st.one_of(st.none(), st.integers(min_value=0, max_value=50)),
        "tasks": st.lists(
            st.tuples(
                st.sampled_from(["", "~0", "~1", "~0~2"]),
                st.lists(
                    st.tuples(st.sampled_from(CHANNELS), st.integers(-5, 5)),
                    min_size=1,
                    max_size=3,
                ),
            ),
            max_size=3,
        ),
        "snapshot": st.dictionaries(
            st.sampled_from(CHANNELS), st.one_of(st.none(), st.integers()), max_size=2
        ),
    }
)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    steps=st.lists(step_strategy, min_size=1, max_size=10),
    id_order=st.sampled_from(ID_ORDERS),
    rnd=st.randoms(use_true_random=False),
    ns=st.sampled_from(["", "child:1"]),
)
async def test_delta_history_matches_in_memory(
    harness: Harness, steps: list[dict[str, Any]], id_order: str, rnd: Any, ns: str
) -> None:
    t = thread()
    oracle = Harness(InMemorySaver(), "memory")
    chains = [Chain(harness, t, ns), Chain(oracle, t, ns)]
    n = len(steps)
    used: set[str] = set()
    for i, step in enumerate(steps):
        if id_order == "increasing":
            cid = new_checkpoint_id()
        elif id_order == "decreasing":
            cid = f"{n - i:08d}-0000-4000-8000-000000000000"
        else:
            # Random order, each id new: a repeat would be a re-put (or its own parent).
            cid = str(uuid.UUID(int=rnd.getrandbits(128)))
            while cid in used:
                cid = str(uuid.UUID(int=(uuid.UUID(cid).int + 1) % 2**128))
        used.add(cid)
        writes = [(f"task{j}", path, batch) for j, (path, batch) in enumerate(step["tasks"])]
        for chain in chains:
            parent = None
            if step["fork"] is not None and chain.configs:
                parent = chain.configs[step["fork"] % len(chain.configs)]
            await chain.step(
                writes=writes, stored=step["snapshot"], checkpoint_id=cid, parent=parent
            )
    targets = [*chains[0].configs, make_config(t, ns)]
    for target in targets:
        assert await harness.delta(target, CHANNELS) == await oracle.delta(target, CHANNELS)
        got, want = await harness.get_tuple(target), await oracle.get_tuple(target)
        assert got is not None and want is not None
        assert got.checkpoint["channel_values"] == want.checkpoint["channel_values"]
        assert got.pending_writes == want.pending_writes
        assert got.parent_config == want.parent_config
