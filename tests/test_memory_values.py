"""The in-memory saver's kept decoded values (`savers/memory_values.py`): every read returns
what decoding the stored bytes returns (same values, same exact types), as fresh objects
that no other read shares, including lists read from a channel's base (a prefix or an
extension of it) and stored bytes changed behind the saver's back."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpointer.channels.markers import DeltaSnapshot
from checkpointer.errors import CheckpointerError
from checkpointer.savers.memory import InMemorySaver
from checkpointer.savers.memory_values import DecodedValues
from checkpointer.serde.fresh_copy import copier_for
from checkpointer.serde.msgpack_serde import MsgpackSerializer
from checkpointer.types import empty_checkpoint, make_config


def same(a: Any, b: Any) -> bool:
    """Equal, with the same exact type at every level (1 == 1.0 == True is not enough)."""
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return list(a) == list(b) and all(
            same(k1, k2) and same(a[k1], b[k2]) for k1, k2 in zip(a, b, strict=True)
        )
    if type(a) in (list, tuple, DeltaSnapshot):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is float and a != a:
        return b != b
    return bool(a == b)


def shares_mutable(a: Any, b: Any) -> bool:
    """Whether `a` and `b` hold the same mutable object anywhere."""
    seen: set[int] = set()

    def walk(x: Any, out: set[int]) -> None:
        if type(x) in (dict, list):
            out.add(id(x))
            for item in x.values() if type(x) is dict else x:
                walk(item, out)
        elif type(x) in (tuple, DeltaSnapshot):
            for item in x:
                walk(item, out)

    walk(a, seen)
    other: set[int] = set()
    walk(b, other)
    return bool(seen & other)


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.binary(max_size=4),
)
records = st.dictionaries(st.text(max_size=4), scalars, max_size=4)
values = st.one_of(
    scalars,
    records,
    st.lists(scalars, max_size=4),
    st.lists(records, max_size=6),
    st.lists(st.lists(scalars, max_size=2), max_size=3),  # nested: decoded every time
    st.tuples(scalars, scalars),
    st.builds(DeltaSnapshot, st.lists(records, max_size=4)),
)


@st.composite
def histories(draw: Any) -> list[Any]:
    """Successive values of one list channel: mostly grown by appending (a chat), at
    times cut back, changed in place or replaced, or set to another kind of value."""
    out: list[Any] = []
    current: list[Any] = draw(st.lists(records, max_size=3))
    for _ in range(draw(st.integers(1, 8))):
        move = draw(st.sampled_from(["append", "append", "append", "cut", "edit", "other"]))
        if move == "append":
            current = current + draw(st.lists(records, min_size=1, max_size=3))
        elif move == "cut" and current:
            current = current[: draw(st.integers(0, len(current) - 1))]
        elif move == "edit" and current:
            at = draw(st.integers(0, len(current) - 1))
            current = [*current[:at], draw(records), *current[at + 1 :]]
        elif move == "other":
            out.append(draw(values))
            continue
        out.append(current)
    return out


def _padded(history: list[Any]) -> list[Any]:
    """Records long enough that lists of them pass the size from which a base is kept."""
    pad = "x" * 400
    return [
        [{**r, "pad": pad} for r in value]
        if type(value) is list and value and all(type(r) is dict for r in value)
        else value
        for value in history
    ]


def _put_all(
    saver: InMemorySaver, history: list[Any], write_values: bool = True
) -> list[dict[str, Any]]:
    configs = []
    config = make_config("t")
    for i, value in enumerate(history):
        checkpoint = empty_checkpoint()
        checkpoint["id"], checkpoint["ts"] = f"cp-{i:04d}", "2026-01-01T00:00:00+00:00"
        checkpoint["channel_values"] = {"msgs": value, "n": i}
        checkpoint["channel_versions"] = {"msgs": str(i + 1), "n": str(i + 1)}
        config = saver.put(config, checkpoint, {"step": i}, {"msgs": str(i + 1), "n": str(i + 1)})
        saver.put_writes(config, [("msgs", value if write_values else None), ("n", i)], "task")
        configs.append(config)
    return configs


def _reads(saver: InMemorySaver, configs: list[dict[str, Any]], order: list[int]) -> list[Any]:
    out = []
    for i in order:
        tup = saver.get_tuple(configs[i])
        assert tup is not None
        out.append((tup.checkpoint["channel_values"], tup.pending_writes))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.booleans(), st.data())
def test_reads_equal_a_saver_that_keeps_nothing(history: list[Any], pad: bool, data: Any) -> None:
    """Any order of reads (each value read first as a prefix, an extension or on its own),
    twice over, gives what a saver decoding every read gives, with no mutable object
    shared between two reads."""
    if pad:
        history = _padded(history)
    kept, plain = InMemorySaver(), InMemorySaver()
    plain._decoded = DecodedValues(max_bytes=0)
    configs = _put_all(kept, history)
    plain_configs = _put_all(plain, history)
    order = data.draw(st.permutations(range(len(history))))
    order = order + data.draw(st.lists(st.sampled_from(range(len(history))), max_size=6))
    got = _reads(kept, configs, order)
    again = _reads(kept, configs, order)
    want = _reads(plain, plain_configs, order)
    for g, a, w in zip(got, again, want, strict=True):
        assert same(g, w)
        assert same(a, w)
        assert not shares_mutable(g, a)
    listed = [(t.checkpoint["channel_values"], t.pending_writes) for t in kept.list(None)]
    assert all(
        same(g, w)
        for g, w in zip(
            listed,
            [(t.checkpoint["channel_values"], t.pending_writes) for t in plain.list(None)],
            strict=True,
        )
    )


def _message(i: int) -> dict[str, Any]:
    return {"speaker": "tool", "content": f"message {i} " + "y" * 300, "id": f"m-{i}", "turn": i}


def _chat(saver: InMemorySaver, steps: int) -> list[dict[str, Any]]:
    return _put_all(saver, [[_message(i) for i in range(k + 1)] for k in range(steps)], False)


def _messages(saver: InMemorySaver, config: dict[str, Any]) -> Any:
    tup = saver.get_tuple(config)
    assert tup is not None
    return tup.checkpoint["channel_values"]["msgs"]


def test_a_changed_read_never_shows_in_the_next() -> None:
    saver = InMemorySaver()
    configs = _chat(saver, 12)
    first = _messages(saver, configs[-1])
    first[0]["content"] = "changed"
    first.append({"x": 1})
    older = _messages(saver, configs[5])  # from the head's base: a prefix
    older[1]["id"] = "changed"
    assert _messages(saver, configs[-1]) == [_message(i) for i in range(12)]
    assert _messages(saver, configs[5]) == [_message(i) for i in range(6)]
    assert len(saver._decoded) > 0


def test_a_chat_loop_decodes_only_the_new_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the head was read, the next head (its list plus one message) is read from
    the base: the serializer decodes nothing of the list again."""
    saver = InMemorySaver()
    configs = _chat(saver, 20)
    _messages(saver, configs[18])
    loads: list[int] = []
    real = MsgpackSerializer.fast_loader

    def counting(self: MsgpackSerializer) -> Any:
        load = real(self)

        def counted(data: Any) -> Any:
            loads.append(len(data[1]))
            return load(data)

        return counted

    monkeypatch.setattr(MsgpackSerializer, "fast_loader", counting)
    assert _messages(saver, configs[19]) == [_message(i) for i in range(20)]
    assert _messages(saver, configs[3]) == [_message(i) for i in range(4)]
    assert max(loads) < 1000  # the record and small values only


@pytest.mark.parametrize(
    "edit",
    [
        lambda raw: raw[:-1],  # cut inside the last item
        lambda raw: raw[:-1] + b"\xc1",  # a byte msgpack never writes
        lambda raw: raw + b"\x00",  # a byte after the list
        lambda raw: raw,  # unchanged (control)
        lambda raw: bytes([raw[0] + 1]) + raw[1:],  # one item more than it holds
        lambda raw: bytes([raw[0] - 1]) + raw[1:],  # one item less than it holds
        lambda raw: b"\xdc\x00\x0b" + raw[1:],  # a longer header than msgpack writes
    ],
)
def test_stored_bytes_changed_behind_the_saver_read_as_without_it(edit: Any) -> None:
    """A stored list replaced by other bytes (a prefix of the base's that ends inside an
    item, one with bytes after it, a count that does not match) reads as a saver that
    keeps nothing reads it: the same value or the same error."""
    kept, plain = InMemorySaver(), InMemorySaver()
    plain._decoded = DecodedValues(max_bytes=0)
    for saver in (kept, plain):
        configs = _chat(saver, 20)
        _messages(saver, configs[-1])  # the base
        key = ("t", "", "msgs", "11")
        tag, raw = saver._blobs[key]
        assert raw[0] == 0x9B  # 11 items
        saver._blobs[key] = (tag, edit(raw))
    outcomes = []
    for saver in (kept, plain):
        try:
            outcomes.append(_messages(saver, make_config("t", "", configs_id(saver, 10))))
        except CheckpointerError as exc:
            outcomes.append(type(exc))
    assert outcomes[0] == outcomes[1]


def configs_id(saver: InMemorySaver, index: int) -> str:
    return sorted(saver._threads["t"][""])[index]


def test_codec_values_are_decoded_on_every_read() -> None:
    """A codec may turn stored bytes into a plain dict, and may be registered again with
    another decode: such values are never kept."""

    class Point:
        def __init__(self, x: int) -> None:
            self.x = x

    serde = MsgpackSerializer()
    serde.register_codec("point", Point, lambda p: p.x, lambda x: {"x": x})
    saver = InMemorySaver(serde=serde)
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"p": Point(1)}
    checkpoint["channel_versions"] = {"p": "1"}
    config = saver.put(make_config("t"), checkpoint, {}, {"p": "1"})
    assert _value(saver, config) == {"x": 1}
    serde.register_codec("point", Point, lambda p: p.x, lambda x: {"y": x})
    assert _value(saver, config) == {"y": 1}


def _value(saver: InMemorySaver, config: dict[str, Any]) -> Any:
    tup = saver.get_tuple(config)
    assert tup is not None
    return tup.checkpoint["channel_values"]["p"]


def test_size_stays_within_its_bound() -> None:
    saver = InMemorySaver()
    saver._decoded = DecodedValues(max_bytes=20_000)
    configs = _chat(saver, 40)
    for config in reversed(configs):
        _messages(saver, config)
    for config in configs:
        _messages(saver, config)
    assert 0 < saver._decoded.size <= 20_000
    saver.delete_thread("t")
    assert saver._decoded.size == 0 and len(saver._decoded) == 0


def test_copier_shapes() -> None:
    assert copier_for("a") is not None and copier_for(None) is not None
    assert copier_for([{"a": 1}, {"b": [1]}]) is None  # nested: decoded every time
    assert copier_for((1, 2)) is None
    assert copier_for(bytearray(b"a")) is None
    snapshot = DeltaSnapshot([{"a": 1}])
    copier = copier_for(snapshot)
    assert copier is not None
    copy = copier(snapshot)
    assert same(copy, snapshot) and not shares_mutable(copy, snapshot)


def test_records_and_metadata_are_fresh_on_every_read() -> None:
    """A checkpoint record (read by ormsgpack once known plain) and metadata (kept
    decoded) changed by one caller never show in the next read, by id or by listing."""
    saver = InMemorySaver()
    configs = _chat(saver, 3)
    for _ in range(2):
        tup = saver.get_tuple(configs[-1])
        assert tup is not None
        assert tup.checkpoint["channel_versions"]["msgs"] == "3"
        assert tup.metadata == {"step": 2}
        tup.checkpoint["channel_versions"]["msgs"] = "changed"
        tup.metadata["step"] = -1
        listed = list(saver.list(None, filter={"step": 2}))
        assert [t.metadata for t in listed] == [{"step": 2}]
        listed[0].metadata["extra"] = 1
    counters = {"step": 1, "counters_since_delta_snapshot": {"m": (1, 2)}, "parents": {}}
    checkpoint = empty_checkpoint()
    config = saver.put(make_config("u"), checkpoint, counters, {})
    for _ in range(2):
        tup = saver.get_tuple(config)
        assert tup is not None
        assert same(tup.metadata, dict(sorted(counters.items())))  # stored as sorted JSON
        tup.metadata["parents"]["x"] = "y"


def test_kept_reads_match_fresh_decodes_of_the_stored_bytes() -> None:
    """Every kept kind (scalar, record, list, nested record read by ormsgpack, metadata)
    reads back as the serializer decodes the stored bytes, with exact types."""
    serde = MsgpackSerializer()
    saver = InMemorySaver(serde=serde)
    cases = {
        "i": 2**63 + 1,
        "f": -0.0,
        "s": "\udc80 lone surrogate",
        "b": b"\x00",
        "r": {"a": 1, "b": (1, "x")},
        "n": {"a": {"b": [1, {"c": None}]}},
        "l": [[1], [2]],
        "t": (1, 2),
        "k": {1: "int key"},
    }
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = dict(cases)
    checkpoint["channel_versions"] = dict.fromkeys(cases, "1")
    config = saver.put(make_config("t"), checkpoint, {}, dict.fromkeys(cases, "1"))
    fast = serde.fast_loader()
    want = {ch: fast(saver._blobs[("t", "", ch, "1")]) for ch in cases}
    for _ in range(3):
        tup = saver.get_tuple(config)
        assert tup is not None
        assert same(tup.checkpoint["channel_values"], want)


def _both() -> tuple[InMemorySaver, InMemorySaver]:
    kept, plain = InMemorySaver(), InMemorySaver()
    plain._decoded = DecodedValues(max_bytes=0)
    return kept, plain


def _snapshot(saver: InMemorySaver) -> list[Any]:
    return [(t.checkpoint, t.metadata, t.pending_writes, t.parent_config) for t in saver.list(None)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.data())
def test_whole_checkpoints_read_again_follow_every_change(history: list[Any], data: Any) -> None:
    """Reads made again from a checkpoint's template (a second `list`) equal a saver's
    that keeps nothing after any change in between: writes added or replaced, a value
    stored for a channel that had none, a checkpoint put again with other values."""
    kept, plain = _both()
    ids = []
    for saver in (kept, plain):
        configs = _put_all(saver, _padded(history))
        ids = [c["configurable"]["checkpoint_id"] for c in configs]
        _snapshot(saver)  # the templates
    change = data.draw(st.sampled_from(["write", "special", "channel", "drop", "swap", "reput"]))
    at = data.draw(st.integers(0, len(ids) - 1))
    config = make_config("t", "", ids[at])
    for saver in (kept, plain):
        if change == "write":
            saver.put_writes(config, [("msgs", [{"new": 1}])], "other")
        elif change == "special":
            saver.put_writes(config, [("__error__", "boom")], "task")
            saver.put_writes(config, [("__error__", "again")], "task")
        elif change == "channel":  # a channel added to a stored checkpoint's versions
            saver._blobs[("t", "", "absent", "1")] = saver.serde.dumps_typed({"a": [1]})
            stored = saver._threads["t"][""][ids[at]]
            stored.channel_versions["absent"] = "1"
        elif change == "drop":  # as retention drops values no checkpoint needs
            del saver._blobs[("t", "", "msgs", str(at + 1))]
        elif change == "swap":  # as retention stores a snapshot where there was none
            saver._blobs[("t", "", "msgs", str(at + 1))] = saver.serde.dumps_typed([{"b": 2}])
        else:
            checkpoint = empty_checkpoint()
            checkpoint["id"], checkpoint["ts"] = ids[at], "2026-01-02T00:00:00+00:00"
            checkpoint["channel_values"] = {"msgs": ["put again"]}
            checkpoint["channel_versions"] = {"msgs": "99"}
            parent = saver._threads["t"][""][ids[at]].parent_id
            saver.put(make_config("t", "", parent), checkpoint, {"again": True}, {"msgs": "99"})
    for _ in range(2):
        assert same(_snapshot(kept), _snapshot(plain))


def test_a_value_replaced_behind_the_saver_reads_as_stored() -> None:
    """A stored pair swapped for other bytes after a read: the next read decodes them
    (here: the error naming the damaged value), not the template of the earlier read."""
    kept, plain = _both()
    for saver in (kept, plain):
        configs = _chat(saver, 5)
        _snapshot(saver)
        saver._blobs[("t", "", "n", "3")] = ("msgpack", b"\xc1")
    outcomes = []
    for saver in (kept, plain):
        with pytest.raises(CheckpointerError) as err:
            saver.get_tuple(configs[2])
        outcomes.append(type(err.value))
    assert outcomes[0] is outcomes[1]


def test_a_write_or_version_changed_in_place_after_a_read_is_read_anew() -> None:
    saver = InMemorySaver()
    configs = _chat(saver, 4)
    _snapshot(saver)
    stored = saver._threads["t"][""]["cp-0002"]
    write = next(w for w in stored.writes.values() if w.channel == "n")
    write.value = saver.serde.dumps_typed(-1)
    tup = saver.get_tuple(configs[2])
    assert tup is not None and ("task", "n", -1) in tup.pending_writes
    stored.channel_versions["n"] = "1"  # now points at the first checkpoint's value
    tup = saver.get_tuple(configs[2])
    assert tup is not None and tup.checkpoint["channel_values"]["n"] == 0
