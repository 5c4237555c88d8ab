"""The value cache: decompressed stored values kept per saver, keyed by location, serving a
read only for the very bytes they came from; reads through it equal reads without it."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from checkpointer.channels import DeltaSnapshot
from checkpointer.errors import ConfigError, CorruptValueError
from checkpointer.savers.sqlite import SqliteSaver
from checkpointer.serde.compression import CompressingSerializer, load_typed
from checkpointer.serde.value_cache import ENV_MAX_BYTES, ValueCache, max_bytes_from_env
from checkpointer.types import empty_checkpoint, make_config
from tests.test_fuzz import example_settings
from tests.test_serde import values

SERDE = CompressingSerializer(threshold=64)


def _messages(n: int, tag: str = "m") -> list[dict[str, Any]]:
    return [
        {"speaker": "tool", "content": f"{tag} {i} " * 40, "id": f"{tag}-{i}"} for i in range(n)
    ]


def _stored(value: Any) -> tuple[str, bytes]:
    data = SERDE.dumps_typed(value)
    assert data[0].endswith("+zstd")
    return data


# ------------------------------------------------------------------------ the cache alone


def test_a_location_read_again_is_served_from_the_cache() -> None:
    cache = ValueCache(1 << 20)
    data = _stored(_messages(20))
    first = cache.plain(data, "t", "", "messages", "v1")
    assert first[0] == "msgpack" and load_typed(SERDE, first) == _messages(20)
    assert (cache.hits, cache.misses, len(cache)) == (0, 1, 1)
    # The bytes of a fresh read (another object, equal content) hit.
    assert cache.plain((data[0], bytes(bytearray(data[1]))), "t", "", "messages", "v1") is first
    assert cache.hits == 1


def test_other_bytes_at_the_same_location_are_never_served_stale() -> None:
    cache = ValueCache(1 << 20)
    old, new = _stored(_messages(20, "old")), _stored(_messages(20, "new"))
    cache.plain(old, "t", "", "messages", "v1")
    got = cache.plain(new, "t", "", "messages", "v1")  # rewritten by another process
    assert load_typed(SERDE, got) == _messages(20, "new")
    assert cache.hits == 0 and len(cache) == 1
    assert load_typed(SERDE, cache.plain(new, "t", "", "messages", "v1")) == _messages(20, "new")
    assert cache.hits == 1


def test_uncompressed_and_undecodable_pairs_pass_through() -> None:
    cache = ValueCache(1 << 20)
    plain = ("msgpack", b"\x91\x01")
    assert cache.plain(plain, "t", "", "c", "1") is plain
    broken = ("msgpack+zstd", b"not a frame")
    assert cache.plain(broken, "t", "", "c", "1") is broken  # the saver raises, located
    assert len(cache) == 0


def test_bounded_by_bytes_least_recently_used_first() -> None:
    one = _stored(_messages(30))
    cost = len(ValueCache(1 << 20).plain(one, "t", "", "c", "0")[1]) + len(one[1]) + 256
    cache = ValueCache(cost * 3)
    for n in range(3):
        cache.plain(one, "t", "", "c", str(n))
    cache.plain(one, "t", "", "c", "0")  # the oldest, used again
    cache.plain(one, "t", "", "c", "3")  # pushes out the least recently used: "1"
    assert len(cache) == 3 and cache.size <= cache.max_bytes
    hits = cache.hits
    cache.plain(one, "t", "", "c", "0")
    cache.plain(one, "t", "", "c", "1")
    assert cache.hits == hits + 1
    cache.resize(0)
    assert len(cache) == 0 and cache.size == 0
    cache.plain(one, "t", "", "c", "0")
    assert len(cache) == 0  # disabled


def test_a_value_larger_than_half_the_cache_is_not_kept() -> None:
    data = _stored(_messages(200))
    cache = ValueCache(len(data[1]) * 2)
    assert load_typed(SERDE, cache.plain(data, "t", "", "c", "1")) == _messages(200)
    assert len(cache) == 0


def test_drop_threads_and_clear() -> None:
    cache = ValueCache(1 << 22)
    data = _stored(_messages(10))
    for thread in ("a", "b", "c"):
        cache.plain(data, thread, "", "m", "1")
        cache.plain(data, thread, "sub", "m", "1")
    cache.drop_threads(["a", "c"])
    assert {k[0] for k in cache._entries} == {"b"} and len(cache) == 2
    assert cache.size == sum(e[3] for e in cache._entries.values())
    cache.clear()
    assert len(cache) == 0 and cache.size == 0


def test_size_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_MAX_BYTES, raising=False)
    assert max_bytes_from_env() == 32 * 1024 * 1024
    monkeypatch.setenv(ENV_MAX_BYTES, "0")
    assert ValueCache().max_bytes == 0
    for bad in ("-1", "lots", "1.5"):
        monkeypatch.setenv(ENV_MAX_BYTES, bad)
        with pytest.raises(ConfigError, match=ENV_MAX_BYTES):
            ValueCache()
    with pytest.raises(ConfigError):
        ValueCache(-5)
    with pytest.raises(ConfigError):
        ValueCache(1).resize(True)


def test_threads_share_one_cache_safely() -> None:
    payloads = [_stored(_messages(5 + n, f"t{n}")) for n in range(8)]
    cache = ValueCache(sum(len(p[1]) for p in payloads) * 3)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            for i in range(300):
                n = (seed + i) % len(payloads)
                got = cache.plain(payloads[n], "t", "", "c", str(n))
                assert load_typed(SERDE, got) == _messages(5 + n, f"t{n}")
                if i % 50 == 0:
                    cache.drop_threads(["t"])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert cache.size == sum(e[3] for e in cache._entries.values()) <= cache.max_bytes


@example_settings(150)
@given(values | st.builds(DeltaSnapshot, values))
def test_reading_through_the_cache_equals_reading_without(value: Any) -> None:
    data = CompressingSerializer(threshold=0).dumps_typed(value)
    cache = ValueCache(1 << 20)
    expected = load_typed(SERDE, data)
    for _ in range(2):
        got = load_typed(SERDE, cache.plain(data, "t", "", "c", "1"))
        assert type(got) is type(expected) and repr(got) == repr(expected)


# ------------------------------------------------------------------- through a saver


@pytest.fixture
def saver(tmp_path: Path) -> Iterator[SqliteSaver]:
    with SqliteSaver(tmp_path / "db.sqlite") as s:
        s.setup()
        yield s


def _put(saver: SqliteSaver, thread_id: str, values: dict[str, Any], version: int) -> Any:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = values
    checkpoint["channel_versions"] = dict.fromkeys(values, version)
    return saver.put(make_config(thread_id), checkpoint, {}, {k: version for k in values})


def test_saver_reads_hand_out_fresh_objects(saver: SqliteSaver) -> None:
    config = _put(saver, "t", {"messages": _messages(40)}, 1)
    first = saver.get_tuple(config)
    assert first is not None and saver.value_cache.misses == 1
    first.checkpoint["channel_values"]["messages"].append("mutated by the caller")
    second = saver.get_tuple(config)
    assert second is not None and saver.value_cache.hits == 1
    assert second.checkpoint["channel_values"]["messages"] == _messages(40)
    listed = next(iter(saver.list(config)))
    assert listed.checkpoint["channel_values"]["messages"] == _messages(40)
    assert saver.value_cache.hits == 2


def test_saver_cache_invalidation(saver: SqliteSaver, tmp_path: Path) -> None:
    for thread in ("a", "b"):
        saver.get_tuple(_put(saver, thread, {"messages": _messages(30, thread)}, 1))
    assert {k[0] for k in saver.value_cache._entries} == {"a", "b"}
    saver.delete_thread("a")
    assert {k[0] for k in saver.value_cache._entries} == {"b"}
    saver.copy_thread("b", "c", replace=True)
    saver.get_tuple(make_config("c"))
    saver.prune(["c"], strategy="delete")
    assert {k[0] for k in saver.value_cache._entries} == {"b"}
    saver.delete_for_runs(["no-such-run"])
    assert len(saver.value_cache) == 0
    # Thread "a" written again by another saver (process) at the same versions: read anew.
    with SqliteSaver(tmp_path / "db.sqlite") as other:
        _put(other, "a", {"messages": _messages(30, "again")}, 1)
    tup = saver.get_tuple(make_config("a"))
    assert tup is not None
    assert tup.checkpoint["channel_values"]["messages"] == _messages(30, "again")


def test_bytes_changed_under_the_cache_are_read_as_they_are(
    saver: SqliteSaver, tmp_path: Path
) -> None:
    """A row rewritten behind the saver's back (damage, a copy from another row) is read
    from its bytes, never from what the cache held for that location."""
    config = _put(saver, "t", {"messages": _messages(30)}, 1)
    _put(saver, "u", {"messages": _messages(30, "other")}, 1)
    assert saver.get_tuple(config) is not None
    conn = sqlite3.connect(tmp_path / "db.sqlite", isolation_level=None)
    try:
        conn.execute(
            "UPDATE checkpointer_blobs SET blob = (SELECT blob FROM checkpointer_blobs "
            "WHERE thread_id = 'u') WHERE thread_id = 't'"
        )
        tup = saver.get_tuple(config)
        assert tup is not None
        assert tup.checkpoint["channel_values"]["messages"] == _messages(30, "other")
        conn.execute("UPDATE checkpointer_blobs SET blob = x'28b52ffd00' WHERE thread_id = 't'")
        with pytest.raises(CorruptValueError) as caught:
            saver.get_tuple(config)
        assert caught.value.thread_id == "t" and caught.value.channel == "messages"
    finally:
        conn.close()


def test_saver_with_the_cache_off(saver: SqliteSaver) -> None:
    saver.value_cache.resize(0)
    config = _put(saver, "t", {"messages": _messages(30)}, 1)
    for _ in range(2):
        tup = saver.get_tuple(config)
        assert tup is not None and tup.checkpoint["channel_values"]["messages"] == _messages(30)
    assert len(saver.value_cache) == 0 and saver.value_cache.hits == 0


def test_delta_history_seeds_are_served_from_the_cache(saver: SqliteSaver) -> None:
    seed = DeltaSnapshot(_messages(40))
    parent = _put(saver, "t", {"messages": seed}, 1)
    checkpoint = empty_checkpoint()
    checkpoint["channel_versions"] = {"messages": 1}
    child = saver.put(parent, checkpoint, {}, {})
    histories = [
        saver.get_delta_channel_history(config=child, channels=["messages"]) for _ in range(2)
    ]
    for history in histories:
        assert history["messages"]["seed"] == seed
    assert histories[0]["messages"]["seed"].value is not histories[1]["messages"]["seed"].value
    assert saver.value_cache.hits >= 1


# ------------------------------------------------------------ decoded values (`load`)

PLAIN = CompressingSerializer(threshold=1 << 30)  # never compresses: plain msgpack pairs


def _fast(serde: Any) -> Any:
    return serde.fast_loader()


def test_decoded_values_are_handed_out_as_fresh_copies() -> None:
    cache = ValueCache(1 << 22)
    for serde in (SERDE, PLAIN):
        data = serde.dumps_typed(_messages(40))
        fast = _fast(serde)
        first = cache.load(data, "t", "", str(id(serde)), "v1", fast)
        assert first == _messages(40)
        first[0]["content"] = "mutated by the caller"
        first.append({"extra": 1})
        second = cache.load(data, "t", "", str(id(serde)), "v1", fast)
        assert second == _messages(40)
        assert second is not first and second[0] is not first[0]
        third = cache.load(data, "t", "", str(id(serde)), "v1", fast)
        assert third == second and third is not second and third[1] is not second[1]
    assert cache.hits == 4


def test_decoded_values_are_kept_only_when_plain_and_copyable() -> None:
    """Nested containers, tuples, class instances: decoded on every read (a shallow copy
    would share what is inside); small values too."""
    cache = ValueCache(1 << 22)
    fast = _fast(SERDE)
    nested = [{"id": i, "parts": [i, i + 1], "text": "x" * 80} for i in range(60)]
    tupled = [("a" * 50, i) for i in range(80)]
    small = [{"id": 1}]
    for n, value in enumerate((nested, tupled, small)):
        data = SERDE.dumps_typed(value)
        a = cache.load(data, "t", "", f"c{n}", "1", fast)
        b = cache.load(data, "t", "", f"c{n}", "1", fast)
        assert a == b == value and a is not b
        if n == 0:
            assert a[0]["parts"] is not b[0]["parts"]
    assert all(entry[5] is None for entry in cache._entries.values())


def test_listings_read_through_the_cache_without_adding() -> None:
    """`keep=False` (a page of `list`) is served by what is kept but keeps nothing new, so
    a listing cannot push out the values read again and again."""
    cache = ValueCache(1 << 22)
    fast = _fast(SERDE)
    data = SERDE.dumps_typed(_messages(40))
    assert cache.load(data, "t", "", "m", "1", fast, keep=False) == _messages(40)
    assert len(cache) == 0
    first = cache.load(data, "t", "", "m", "1", fast)
    assert len(cache) == 1 and cache._entries["t", "", "m", "1"][5] is not None
    listed = cache.load(data, "t", "", "m", "1", fast, keep=False)
    assert listed == first and listed is not first and cache.hits == 1


def test_small_uncompressed_values_skip_the_cache() -> None:
    """A small value stored uncompressed has nothing to undo and is too small to keep
    decoded: it is decoded directly, without a lookup, and nothing is kept for it."""
    cache = ValueCache(1 << 22)
    fast = _fast(SERDE)
    small = SERDE.dumps_typed({"plan": ["a", "b"], "score": 3})
    assert not small[0].endswith("+zstd")
    for keep in (True, False, True):
        got = cache.load(small, "t", "", "k", "1", fast, keep)
        assert got == {"plan": ["a", "b"], "score": 3}
    assert (cache.hits, cache.misses, len(cache)) == (0, 0, 0)
    large = SERDE.dumps_typed(_messages(40))  # compressed: looked up and kept
    cache.load(large, "t", "", "m", "1", fast)
    assert (cache.misses, len(cache)) == (1, 1)


def test_decoded_value_never_served_for_other_bytes() -> None:
    cache = ValueCache(1 << 22)
    fast = _fast(SERDE)
    old, new = SERDE.dumps_typed(_messages(30, "old")), SERDE.dumps_typed(_messages(30, "new"))
    assert cache.load(old, "t", "", "m", "1", fast) == _messages(30, "old")
    assert cache.load(new, "t", "", "m", "1", fast) == _messages(30, "new")
    assert cache.load(old, "t", "", "m", "1", fast) == _messages(30, "old")
    assert cache.hits == 0


def test_decoded_values_count_against_the_bound() -> None:
    cache = ValueCache(1 << 16)
    fast = _fast(PLAIN)
    for i in range(20):
        cache.load(PLAIN.dumps_typed(_messages(30, f"m{i}")), "t", "", f"c{i}", "1", fast)
        assert cache.size <= cache.max_bytes
    assert 0 < len(cache) < 20


@example_settings(150)
@given(
    st.lists(
        st.dictionaries(
            st.text(max_size=8),
            st.none() | st.booleans() | st.integers() | st.floats() | st.text() | st.binary(),
            max_size=5,
        ),
        min_size=1,
        max_size=60,
    )
    | values
    | st.builds(DeltaSnapshot, values)
)
def test_loading_through_the_cache_equals_loading_without(value: Any) -> None:
    """Whatever the value, every read through `load` equals a plain read (type and repr),
    and no two reads share a mutable object."""
    serde = CompressingSerializer(threshold=0)
    data = serde.dumps_typed(value)
    padded = serde.dumps_typed([value, "p" * 5000])  # large enough to be kept when plain
    cache = ValueCache(1 << 22)
    fast = _fast(serde)
    for stored in (data, padded):
        expected = load_typed(serde, stored)
        reads = [cache.load(stored, "t", "", "c", str(len(stored[1])), fast) for _ in range(3)]
        for got in reads:
            assert type(got) is type(expected) and repr(got) == repr(expected)
        if isinstance(reads[0], list | dict):
            assert reads[0] is not reads[1] is not reads[2]


# ------------------------------------------------------------------- composed values
def test_a_composed_value_is_kept_for_its_very_two_pairs() -> None:
    """A tail and its base (`savers/sql/tails.py`): made once, then fresh copies; made
    again when either stored pair differs; a value without a cheap copy is never kept."""
    cache = ValueCache(8 * 1024 * 1024)
    key = ("t", "", "messages", "2")
    tail, base = ("tail+msgpack", b"tail bytes"), ("msgpack+zstd", b"base bytes")
    made: list[int] = []

    def make(value: Any = None) -> Any:
        made.append(1)
        return _messages(30) if value is None else value

    first = cache.load_composed(key, tail, base, make)
    again = cache.load_composed(key, tail, base, make)
    assert again == first and again is not first and again[0] is not first[0]
    assert len(made) == 1
    first[0]["content"] = "changed by the caller"  # never reaches the kept copy
    assert cache.load_composed(key, tail, base, make)[0]["content"] != "changed by the caller"
    cache.load_composed(key, tail, ("msgpack+zstd", b"other base"), make)
    cache.load_composed(key, ("tail+msgpack", b"other tail"), base, make)
    assert len(made) == 3
    shared = [(1, 2)]  # tuples: no exact cheap copy
    assert cache.load_composed(("t", "", "x", "1"), tail, base, lambda: make(shared)) is shared
    assert cache.load_composed(("t", "", "x", "1"), tail, base, lambda: make(shared)) is shared
    assert len(made) == 5
