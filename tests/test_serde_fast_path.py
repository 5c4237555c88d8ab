"""The ormsgpack fast path of `MsgpackSerializer` against the msgpack-python path.

`loads_typed` and `fast_loader` first try ormsgpack on plain data and fall back to
msgpack-python for everything else. Differential properties: for any value the serializer
can store, and for any bytes at all (random, hand-encoded msgpack in every encoding the format
allows, truncated, with trailing bytes), both paths return type-exactly equal values (float
bit patterns and dict key order included) or raise the same error. The stored bytes do not
depend on ormsgpack. Examples pin down each known difference between the two libraries.

The serializer only tries ormsgpack where it pays (`_worth_trying`: size and shape); that is
a matter of speed, not of correctness, so these tests have it try every value, and check
the choice itself separately.

`CHECKPOINTER_FUZZ_EXAMPLES=20000` runs longer with fresh random seeds.
"""

from __future__ import annotations

import math
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from checkpointer.channels import DeltaSnapshot, Overwrite
from checkpointer.errors import DeserializationError
from checkpointer.serde import MsgpackSerializer
from checkpointer.serde import fast_path as fp
from checkpointer.serde import msgpack_serde as ms
from tests.test_fuzz import example_settings
from tests.test_serde import HERE, assert_same, values

pytestmark = pytest.mark.skipif(fp._plain_unpackb is None, reason="ormsgpack is not installed")

PROPERTY = example_settings(300)

SER = MsgpackSerializer(allowed_modules=[HERE])

Typed = tuple[str, bytes]

WORTH_TRYING = fp._worth_trying
PLAIN_MIN_SIZE = ms._PLAIN_MIN_SIZE


@pytest.fixture(autouse=True, scope="module")
def _try_every_value() -> Iterator[None]:
    """ormsgpack gets every value, however small or shaped, so that it is compared on all."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ms, "_PLAIN_MIN_SIZE", 0)
        patch.setattr(fp, "_worth_trying", lambda raw: True)
        yield


# ---------------------------------------------------------------------------- helpers


@contextmanager
def msgpack_python_only() -> Iterator[None]:
    """The serializer as it is without ormsgpack installed."""
    saved = fp._plain_unpackb
    fp._plain_unpackb = None
    try:
        yield
    finally:
        fp._plain_unpackb = saved


def outcome(load: Callable[[Typed], Any], data: Typed) -> tuple[str, Any]:
    """What loading gives: the value, or the error's type and message."""
    try:
        return ("value", load(data))
    except Exception as exc:
        return ("error", (type(exc), str(exc)))


def both_paths(load: Callable[[], Callable[[Typed], Any]], data: Typed) -> tuple[Any, Any]:
    """Outcomes with and without the fast path; `load` builds the loader to use."""
    fast = outcome(load(), data)
    with msgpack_python_only():
        slow = outcome(load(), data)
    return fast, slow


def assert_identical(a: Any, b: Any) -> None:
    """`assert_same`, stricter on plain data: float bit patterns (nan payloads, -0.0), dict
    key order and key types. Iterative: values may be nested a thousand deep."""
    stack = [(a, b, "value")]
    while stack:
        x, y, path = stack.pop()
        assert type(x) is type(y), f"{path}: {type(x).__name__} != {type(y).__name__}"
        if type(x) is float:
            assert struct.pack(">d", x) == struct.pack(">d", y), f"{path}: {x!r} != {y!r}"
        elif type(x) is list or isinstance(x, tuple):
            assert len(x) == len(y), path
            stack.extend((i, j, f"{path}[{n}]") for n, (i, j) in enumerate(zip(x, y)))
        elif type(x) is dict:
            assert len(x) == len(y), path
            for (kx, vx), (ky, vy) in zip(x.items(), y.items(), strict=True):
                stack.append((kx, ky, f"{path}.key"))
                stack.append((vx, vy, f"{path}[{kx!r}]"))
        else:
            assert_same(x, y, path)


def assert_same_outcome(fast: tuple[str, Any], slow: tuple[str, Any]) -> None:
    assert fast[0] == slow[0], (fast, slow)
    if fast[0] == "error":
        assert fast[1] == slow[1]
    else:
        assert_identical(fast[1], slow[1])


def check_bytes(raw: bytes) -> None:
    """Both paths agree on `raw`, through `loads_typed` and through `fast_loader`."""
    data = ("msgpack", raw)
    fast, slow = both_paths(lambda: SER.loads_typed, data)
    assert_same_outcome(fast, slow)
    if slow[0] == "error":
        assert issubclass(slow[1][0], DeserializationError)
    assert_same_outcome(*both_paths(SER.fast_loader, data))


def is_plain(value: Any) -> bool:
    """Whether ormsgpack alone can read `value` back (so the fast path must take it)."""
    if value is None or type(value) in (bool, int, float, bytes):
        return type(value) is not int or -(2**63) <= value < 2**64
    if type(value) is str:
        return not any("\ud800" <= c <= "\udfff" for c in value)
    if type(value) is list:
        return all(map(is_plain, value))
    if type(value) is dict:
        return all(type(k) is str and is_plain(k) and is_plain(v) for k, v in value.items())
    return False


# ------------------------------------------------------------------ stored values


_EDGE_INTS = [
    *(0, 1, -1, 127, 128, -32, -33, 255, 256, -128, -129),
    *(2**15, 2**16, -(2**15) - 1, 2**31, 2**32, -(2**31) - 1),
    *(2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 2**100, -(2**100)),
]
_INT64_EDGES = [n for n in _EDGE_INTS if -(2**63) <= n < 2**64]
_edge_ints = st.sampled_from(_EDGE_INTS)
_ints = _edge_ints | st.integers() | st.integers(-(2**70), 2**70)
_text = (
    st.text(max_size=12)
    | st.text(st.characters() | st.characters(categories=["Cs"]), max_size=12)
    | st.text(min_size=30, max_size=300)
    | st.just("")
)
_floats = st.floats() | st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan, 1e308])
_keys = st.recursive(
    st.none() | st.booleans() | _ints | _floats | _text | st.binary(max_size=6),
    lambda inner: st.lists(inner, max_size=3).map(tuple),
    max_leaves=4,
)

plain_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | _ints | _floats | _text | st.binary(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.dictionaries(_text, inner, max_size=5)
        | st.dictionaries(_keys, inner, max_size=4)
        | st.lists(inner, max_size=3).map(tuple)
    ),
    max_leaves=25,
)

pure_values: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.sampled_from(_INT64_EDGES)
    | st.integers(-(2**63), 2**64 - 1)
    | _floats
    | st.text()
    | st.binary(max_size=40),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=25,
)
"""Values ormsgpack reads alone: the fast path must take all of them."""


@PROPERTY
@given(pure_values | plain_values | values)
def test_stored_values_load_the_same_on_both_paths(value: Any) -> None:
    data = SER.dumps_typed(value)
    with msgpack_python_only():
        assert SER.dumps_typed(value) == data  # the stored format does not depend on it
    fast, slow = both_paths(lambda: SER.loads_typed, data)
    assert fast[0] == slow[0] == "value", (fast, slow)
    assert_identical(fast[1], slow[1])
    assert_same(fast[1], value)
    assert_same_outcome(*both_paths(SER.fast_loader, data))
    if data[0] == "msgpack" and is_plain(value):
        assert fp._load_plain(data[1]) is not fp._NOT_PLAIN  # the fast path was taken


_hashable = (
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False)
) | st.text()
"""Set items that compare equal to themselves (a set holding nan never equals another)."""
wrapped_values: st.SearchStrategy[Any] = st.recursive(
    pure_values
    | st.lists(pure_values, max_size=5).map(tuple)
    | st.sets(_hashable, max_size=5)
    | st.frozensets(_hashable, max_size=5),
    lambda inner: st.builds(DeltaSnapshot, inner) | st.builds(Overwrite, inner),
    max_leaves=3,
)
"""Markers around plain data: the fast path must take them too (wrapper peeled, payload
read by ormsgpack), unless the tuple/set/frozenset is empty."""


@PROPERTY
@given(wrapped_values)
def test_wrapped_plain_values_take_the_fast_path(value: Any) -> None:
    data = SER.dumps_typed(value)
    fast, slow = both_paths(lambda: SER.loads_typed, data)
    assert fast[0] == slow[0] == "value", (fast, slow)
    assert_identical(fast[1], slow[1])
    assert_same(fast[1], value)
    assert_same_outcome(*both_paths(SER.fast_loader, data))
    inner = value
    while isinstance(inner, DeltaSnapshot | Overwrite):
        inner = inner.value
    if data[0] == "msgpack" and not (isinstance(inner, tuple | set | frozenset) and not inner):
        taken = fp._load_plain(data[1])
        assert taken is not fp._NOT_PLAIN
        assert_identical(taken, slow[1])


# ------------------------------------------------------------------ arbitrary bytes


def _uint(n: int, size: int) -> bytes:
    return n.to_bytes(size, "big")


def _sized(n: int, fix: tuple[int, int] | None, codes: tuple[int | None, int, int]) -> list[bytes]:
    """Every header that can announce length `n`: fix-form (base, limit) and 8/16/32-bit."""
    heads = []
    if fix is not None and n < fix[1]:
        heads.append(bytes([fix[0] + n]))
    for code, size in zip(codes, (1, 2, 4), strict=True):
        if code is not None and n < 256**size:
            heads.append(bytes([code]) + _uint(n, size))
    return heads


def _int_forms(n: int) -> list[bytes]:
    """Every encoding of `n`, not only the shortest one msgpack-python writes."""
    forms = []
    if 0 <= n < 128:
        forms.append(bytes([n]))
    if -32 <= n < 0:
        forms.append(n.to_bytes(1, "big", signed=True))
    for code, size in ((0xCC, 1), (0xCD, 2), (0xCE, 4), (0xCF, 8)):
        if 0 <= n < 256**size:
            forms.append(bytes([code]) + _uint(n, size))
    for code, size in ((0xD0, 1), (0xD1, 2), (0xD2, 4), (0xD3, 8)):
        if -(2 ** (8 * size - 1)) <= n < 2 ** (8 * size - 1):
            forms.append(bytes([code]) + n.to_bytes(size, "big", signed=True))
    return forms


_utf8 = (
    st.text(max_size=8).map(str.encode)
    | st.text(st.characters(categories=["Cs"]), min_size=1, max_size=3).map(
        lambda t: t.encode("utf-8", "surrogatepass")
    )
    | st.binary(max_size=6)  # mostly invalid UTF-8
    | st.sampled_from([b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xef\xbf\xbe"])
)
_str_forms = _utf8.flatmap(
    lambda p: st.sampled_from(_sized(len(p), (0xA0, 32), (0xD9, 0xDA, 0xDB))).map(lambda h: h + p)
)
_bin_forms = st.binary(max_size=8).flatmap(
    lambda p: st.sampled_from(_sized(len(p), None, (0xC4, 0xC5, 0xC6))).map(lambda h: h + p)
)
_FIXEXT = {1: 0xD4, 2: 0xD5, 4: 0xD6, 8: 0xD7, 16: 0xD8}


def _ext_forms(code: int, payload: bytes) -> list[bytes]:
    body = code.to_bytes(1, "big", signed=True) + payload
    heads = _sized(len(payload), None, (0xC7, 0xC8, 0xC9))
    if len(payload) in _FIXEXT:
        heads.append(bytes([_FIXEXT[len(payload)]]))
    return [head + body for head in heads]


_ext = st.tuples(st.integers(-128, 127), st.binary(max_size=17)).flatmap(
    lambda t: st.sampled_from(_ext_forms(*t))
)
_scalar_forms = (
    st.sampled_from([b"\xc0", b"\xc2", b"\xc3", b"\xc1"])
    | (st.sampled_from(_INT64_EDGES) | st.integers(-(2**63), 2**64 - 1)).flatmap(
        lambda n: st.sampled_from(_int_forms(n))
    )
    | _floats.map(lambda f: b"\xcb" + struct.pack(">d", f))
    | st.binary(min_size=4, max_size=4).map(lambda b: b"\xca" + b)  # float32, any bits
    | _floats.filter(lambda f: math.isnan(f) or abs(f) < 3e38).map(
        lambda f: b"\xca" + struct.pack(">f", f)
    )
    | _str_forms
    | _bin_forms
    | _ext
)
_repeated_keys = st.sampled_from(
    [
        *(b"\xa1a", b"\xd9\x01a", b"\xa1b", b"\xc4\x01a", b"\xa3\xed\xa0\x80"),
        *(b"\x01", b"\xc3", b"\xcb" + struct.pack(">d", 1.0), b"\xc0", b"\x91\x01", b"\x80"),
    ]
)
"""Keys that collide (equal str, 1 == True == 1.0) or that msgpack-python cannot hash."""


def _containers(inner: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    arrays = st.lists(inner, max_size=4).flatmap(
        lambda items: st.sampled_from(_sized(len(items), (0x90, 16), (None, 0xDC, 0xDD))).map(
            lambda h: h + b"".join(items)
        )
    )
    pairs = st.lists(st.tuples(_repeated_keys | _str_forms | inner, inner), max_size=4)
    maps = pairs.flatmap(
        lambda kv: st.sampled_from(_sized(len(kv), (0x80, 16), (None, 0xDE, 0xDF))).map(
            lambda h: h + b"".join(k + v for k, v in kv)
        )
    )
    return arrays | maps


encoded = st.recursive(_scalar_forms, _containers, max_leaves=12)
"""One msgpack object each, in any encoding the format allows (valid or not inside)."""

damaged = (
    st.tuples(encoded, st.binary(min_size=1, max_size=3)).map(lambda t: t[0] + t[1])
    | st.tuples(encoded, encoded).map(lambda t: t[0] + t[1])
    | encoded.flatmap(lambda e: st.integers(0, max(0, len(e) - 1)).map(lambda n: e[:n]))
)


_wrapper_prefix = st.sampled_from([b"\xc7\x00" + bytes([c]) for c in (2, 3, 4, 48, 49, 50, 7)])
wrapped = st.tuples(
    st.lists(_wrapper_prefix, min_size=1, max_size=3),
    st.lists(encoded | damaged, max_size=3),
    st.integers(-1, 1),
).map(
    lambda t: (
        b"".join(bytes([0x91 + len(t[1]) + t[2]]) + m for m in t[0][:1])
        + b"".join(b"\x92" + m for m in t[0][1:])
        + b"".join(t[1])
    )
)
"""Bytes that start like the wrappers `_unwrap` peels: item counts right and wrong, payloads
well formed or damaged."""


@PROPERTY
@given(st.binary(max_size=64) | encoded | damaged | wrapped)
def test_any_bytes_load_or_fail_the_same_on_both_paths(raw: bytes) -> None:
    check_bytes(raw)


@PROPERTY
@given(plain_values, st.data())
def test_damaged_stored_values_fail_the_same_on_both_paths(value: Any, data: st.DataObject) -> None:
    tag, raw = SER.dumps_typed(value)
    if tag != "msgpack":
        return
    damage = data.draw(st.sampled_from(["cut", "append", "flip"]))
    if damage == "cut":
        raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
    elif damage == "append":
        raw += data.draw(st.binary(min_size=1, max_size=4))
    else:
        at = data.draw(st.integers(0, len(raw) - 1))
        raw = raw[:at] + bytes([data.draw(st.integers(0, 255))]) + raw[at + 1 :]
    check_bytes(raw)


# ------------------------------------------------------------- known differences


def _pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


DIFFERENCES: dict[str, bytes] = {
    # ormsgpack only reads str map keys; msgpack-python reads any hashable.
    "int key": _pack({1: "a"}),
    "bytes key": _pack({b"k": "a"}),
    "float key": _pack({1.5: "a"}),
    "bool key": _pack({True: "a"}),
    "None key": _pack({None: "a"}),
    "nan key": b"\x81\xcb" + struct.pack(">d", math.nan) + b"\x01",
    "array key (unhashable for msgpack-python)": b"\x81\x91\x01\x02",
    "map key (unhashable for msgpack-python)": b"\x81\x80\x02",
    "str and bytes keys alike": b"\x82\xa1a\x01\xc4\x01a\x02",
    # Duplicate keys: the first key object stays, the last value wins.
    "duplicate str keys": b"\x83\xa1a\x01\xa1b\x02\xa1a\x03",
    "1 then True": b"\x82\x01\xa1a\xc3\xa1b",
    "True then 1.0": b"\x82\xc3\xa1a\xcb" + struct.pack(">d", 1.0) + b"\xa1b",
    # Strings: we accept lone surrogates (surrogatepass); ormsgpack only strict UTF-8.
    "lone surrogate": b"\xa3\xed\xa0\x80",
    "lone surrogate key": b"\x81\xa3\xed\xa0\x80\x01",
    "invalid UTF-8": b"\xa1\xff",
    "overlong UTF-8": b"\xa2\xc0\x80",
    "noncharacter": b"\xa3\xef\xbf\xbe",
    # Numbers.
    "float32": b"\xca\x3f\xc0\x00\x00",
    "float32 signalling nan": b"\xca\x7f\x80\x00\x01",
    "float32 -0.0": b"\xca\x80\x00\x00\x00",
    "uint64 max": _pack(2**64 - 1),
    "int64 min": _pack(-(2**63)),
    "1 as int64": b"\xd3" + (1).to_bytes(8, "big"),
    "bin8 empty": b"\xc4\x00",
    "str8 short": b"\xd9\x01a",
    # Framing: ormsgpack ignores bytes after the object.
    "extra data": b"\x01\x02",
    "extra data after map": b"\x80\x90",
    "extra nil": b"\x91\x01\xc0",
    "truncated": b"\x92\x01",
    "empty": b"",
    "reserved byte": b"\xc1",
    "array32 claiming 4G items": b"\xdd\xff\xff\xff\xff",
    "str32 claiming 4 GB": b"\xdb\xff\xff\xff\xff",
    "bin32 claiming 4 GB": b"\xc6\xff\xff\xff\xff",
    "map32 claiming 4G pairs": b"\xdf\xff\xff\xff\xff" + b"\xa1a\x80" * 400,
    "nested arrays claiming 256M items": b"\xdd\x10\x00\x00\x00" * 50 + b"\x80" * 1200,
    # Extensions: msgpack-python reads ext -1 as a Timestamp without asking ext_hook.
    "timestamp": _pack(msgpack.Timestamp(1, 0)),
    "timestamp key": b"\x81" + _pack(msgpack.Timestamp(1, 0)) + b"\x01",
    "unknown extension": _pack(msgpack.ExtType(99, b"x")),
    "tuple marker": b"\x92\xc7\x00\x02\x01",
    # Wrappers the fast path peels (see `_unwrap`), well and badly formed.
    "tuple marker, 3 items claimed": b"\x94\xc7\x00\x02\x01\x02",
    "tuple marker, extra data": b"\x92\xc7\x00\x02\x01\x02",
    "snapshot": b"\x92\xc7\x00\x30\x91\x81\xa1a\x01",
    "snapshot without payload": b"\x92\xc7\x00\x30",
    "snapshot, 3 items": b"\x93\xc7\x00\x30\x01\x02",
    "snapshot, 1 item": b"\x91\xc7\x00\x30",
    "snapshot, extra data": b"\x92\xc7\x00\x30\x80\x80",
    "snapshot of an extension": b"\x92\xc7\x00\x30" + _pack(msgpack.ExtType(1, b"\x05")),
    "snapshot marker with data": b"\x92\xc7\x01\x30\x00\x80",
    "overwrite of a snapshot": b"\x92\xc7\x00\x31\x92\xc7\x00\x30\x91\x80",
    "set of unhashable items": b"\x93\xc7\x00\x03\x91\x01\x80",
    "set of equal items": b"\x94\xc7\x00\x03\x01\xc3\xcb" + struct.pack(">d", 1.0),
    "frozenset, array 16 header": b"\xdc\x00\x02\xc7\x00\x04\x80",
    "tuple, array 32 header": b"\xdd\x00\x00\x00\x02\xc7\x00\x02\x80",
    "tuple of 20 maps": b"\xdc\x00\x15\xc7\x00\x02" + b"\x80" * 20,
    "deeply wrapped": b"\x92\xc7\x00\x30" * 12 + b"\x91\x80",
}
for _depth in (254, 255, 256, 1000, 1022, 1023, 1024, 1025, 1100):
    DIFFERENCES[f"{_depth} nested arrays"] = b"\x91" * _depth + b"\x01"
    DIFFERENCES[f"{_depth} nested maps"] = b"\x81\xa1k" * _depth + b"\x01"


@pytest.mark.parametrize("raw", DIFFERENCES.values(), ids=DIFFERENCES.keys())
def test_known_differences_are_caught(raw: bytes) -> None:
    check_bytes(raw)


@pytest.mark.parametrize(
    ("name", "plain"),
    [
        ("duplicate str keys", True),
        ("float32", True),
        ("float32 signalling nan", True),
        ("1 as int64", True),
        ("noncharacter", True),
        ("1000 nested arrays", True),
        ("int key", False),
        ("lone surrogate", False),
        ("extra data", False),
        ("extra nil", False),
        ("1023 nested arrays", False),
        ("timestamp", False),
        ("tuple marker", True),  # a wrapper around plain items: the payload is plain
        ("tuple marker, 3 items claimed", False),
        ("snapshot of an extension", False),
    ],
)
def test_what_the_fast_path_takes(name: str, plain: bool) -> None:
    assert (fp._load_plain(DIFFERENCES[name]) is not fp._NOT_PLAIN) is plain


# ------------------------------------------------------------ the end-of-object check


def test_end_check_reuses_only_an_emptied_unpacker() -> None:
    """The thread's Unpacker goes back to its slot only with an empty buffer: a check that
    stopped early (extra data, truncated input) must not leave bytes for the next one."""
    state = fp._SKIP_SLOT.state
    assert fp._is_one_object(b"\x92\x01\x02")
    reused = state[0]
    assert reused is not None and reused.tell() == state[1]
    assert fp._is_one_object(b"\xa1a")
    assert state[0] is reused
    assert not fp._is_one_object(b"\x05\x06")
    assert state[0] is None
    assert fp._is_one_object(b"\x07")
    with pytest.raises(msgpack.OutOfData):
        fp._is_one_object(b"\x92\x01")
    assert state[0] is None
    # With b"\x92\x01" still buffered, the skip would take b"\x92\x01\x02": 3 bytes, "True".
    assert not fp._is_one_object(b"\x02\x03\x04")
    assert fp._is_one_object(b"\x92\x01\x02")


def test_end_check_of_large_values() -> None:
    big = _pack(["x" * 1000] * 100)
    assert len(big) > fp._REUSED_SKIP_LIMIT
    assert fp._is_one_object(b"\x01")
    small_one = fp._SKIP_SLOT.state[0]
    assert fp._is_one_object(big)
    assert fp._SKIP_SLOT.state[0] is small_one  # a big buffer is not kept for the thread
    assert not fp._is_one_object(big + b"\xc0")
    with pytest.raises(msgpack.OutOfData):
        fp._is_one_object(big[:-1])
    assert fp._load_plain(big + b"\xc0") is fp._NOT_PLAIN
    assert fp._load_plain(big) == ["x" * 1000] * 100


def test_threads_load_their_own_values() -> None:
    payloads = [SER.dumps_typed({"n": n, "text": "y" * (n % 50)}) for n in range(200)]
    errors: list[BaseException] = []

    def work() -> None:
        try:
            load = SER.fast_loader()
            for _ in range(20):
                for n, data in enumerate(payloads):
                    assert load(data) == SER.loads_typed(data) == {"n": n, "text": "y" * (n % 50)}
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors


# ------------------------------------------------------------- without ormsgpack


def test_fast_loader_and_loads_typed_without_ormsgpack() -> None:
    value = {"messages": [{"id": "m-1", "content": "hi", "n": 1}], "t": (1, 2), 3: b"x"}
    with msgpack_python_only():
        data = SER.dumps_typed(value)
        assert_same(SER.loads_typed(data), value)
        assert_same(SER.fast_loader()(data), value)
        assert fp._load_plain(SER.dumps_typed([1])[1]) is fp._NOT_PLAIN
        with pytest.raises(DeserializationError, match="extra data"):
            SER.loads_typed(("msgpack", b"\x01\x02"))


def test_module_works_when_ormsgpack_cannot_be_imported() -> None:
    script = (
        "import sys; sys.modules['ormsgpack'] = None\n"
        "from checkpointer.serde import fast_path as fp, msgpack_serde as ms\n"
        "assert fp._plain_unpackb is None\n"
        "s = ms.MsgpackSerializer()\n"
        "value = {'a': [1, 2.5, 'x', b'y', None, True], 'b': (1, {2: 3})}\n"
        "assert s.loads_typed(s.dumps_typed(value)) == value\n"
        "assert s.fast_loader()(s.dumps_typed(value)) == value\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)


# ------------------------------------------------------------ what is worth trying


_MESSAGES = [{"speaker": "tool", "content": f"text {i} " * 20, "id": f"m-{i}"} for i in range(20)]


@pytest.mark.parametrize(
    ("value", "tried"),
    [
        (_MESSAGES, True),  # an array of maps
        ({"messages": _MESSAGES}, True),
        ([[m] for m in _MESSAGES], True),  # an array of arrays
        ([(i, i) for i in range(300)], True),  # an array of tagged arrays: refused at once
        (_MESSAGES[:2], False),  # too small to pay
        ({"a": 1}, False),
        (list(range(1000)), False),  # flat arrays of scalars: ormsgpack is no faster
        (["x" * 10] * 200, False),
        ("x" * 5000, False),
        (tuple(_MESSAGES), False),  # a tagged array: `_unwrap` peels it first
        (tuple(range(70000)), False),  # array 32
        (frozenset(range(1000)), False),
        (2**8000, False),  # a leaf extension
    ],
)
def test_worth_trying(value: Any, tried: bool) -> None:
    raw = SER.dumps_typed(value)[1]
    assert (len(raw) >= PLAIN_MIN_SIZE and WORTH_TRYING(raw)) is tried


def test_large_plain_values_take_the_fast_path() -> None:
    data = SER.dumps_typed({"messages": _MESSAGES, "turn": 3})
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ms, "_PLAIN_MIN_SIZE", PLAIN_MIN_SIZE)
        patch.setattr(fp, "_worth_trying", WORTH_TRYING)
        assert fp._load_plain(data[1]) == {"messages": _MESSAGES, "turn": 3}
        assert_identical(SER.loads_typed(data), {"messages": _MESSAGES, "turn": 3})
        assert_identical(SER.fast_loader()(data), {"messages": _MESSAGES, "turn": 3})


@pytest.mark.parametrize(
    ("value", "taken"),
    [
        (DeltaSnapshot(_MESSAGES), True),
        (Overwrite({"messages": _MESSAGES}), True),
        (DeltaSnapshot(Overwrite(_MESSAGES)), True),
        (tuple(_MESSAGES), True),
        (frozenset(f"m-{i}" * 200 for i in range(9)), False),  # items not worth trying
        (DeltaSnapshot([(i, str(i) * 300) for i in range(9)]), False),  # tuples inside
        (DeltaSnapshot(list(range(2000))), False),  # flat array of scalars
    ],
)
def test_wrapped_large_values_take_the_fast_path(value: Any, taken: bool) -> None:
    data = SER.dumps_typed(value)
    assert len(data[1]) >= PLAIN_MIN_SIZE
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fp, "_worth_trying", WORTH_TRYING)
        assert (fp._load_plain(data[1]) is not fp._NOT_PLAIN) is taken
        assert_identical(SER.loads_typed(data), SER.fast_loader()(data))
    assert_same(SER.loads_typed(data), value)


def test_large_values_decode_with_the_collector_paused_and_restored() -> None:
    import gc

    big = _pack([{"text": "x" * 100, "n": i} for i in range(400)])
    assert len(big) >= fp._NO_GC_MIN_SIZE
    seen: list[bool] = []

    def spy(raw: Any) -> Any:
        seen.append(gc.isenabled())
        return fp.ormsgpack.unpackb(raw)

    def failing(raw: Any) -> Any:
        raise ValueError("refused")

    was = gc.isenabled()
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(fp, "_plain_unpackb", spy)
                assert fp._load_plain(big) == msgpack.unpackb(big)
                patch.setattr(fp, "_plain_unpackb", failing)
                assert fp._load_plain(big) is fp._NOT_PLAIN
            assert gc.isenabled() is enabled  # as it was, after a value and after a refusal
        assert seen == [False, False]
    finally:
        (gc.enable if was else gc.disable)()


def test_large_values_on_the_hook_path_pause_the_collector_too() -> None:
    """A large value ormsgpack cannot read (tuples inside) decodes through msgpack-python
    with the collector paused, restored after, on both loaders."""
    import gc

    value = [(i, {"text": "x" * 100}) for i in range(400)]
    data = SER.dumps_typed(value)
    assert len(data[1]) >= fp._NO_GC_MIN_SIZE and fp._load_plain(data[1]) is fp._NOT_PLAIN
    seen: list[bool] = []
    unpackb = msgpack.unpackb

    def spy(raw: Any, **options: Any) -> Any:
        seen.append(gc.isenabled())
        return unpackb(raw, **options)

    was = gc.isenabled()
    gc.enable()
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(ms.msgpack, "unpackb", spy)
            assert_same(SER.loads_typed(data), value)
            assert_same(SER.fast_loader()(data), value)
            assert_same(SER.loads_typed(SER.dumps_typed([(1, 2)])), [(1, 2)])
        assert gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()
    assert seen == [False, False, True]


def test_overlapping_decodes_in_two_threads_leave_the_collector_on() -> None:
    """Thread A pauses the collector, thread B enters while it is paused, A finishes first:
    when B finishes the collector must be on again (a per-call "restore what I saw" would
    leave it off for good)."""
    import gc
    import threading

    a_inside, b_inside, release_b = threading.Event(), threading.Event(), threading.Event()

    def decode_a(raw: Any) -> Any:
        a_inside.set()
        assert b_inside.wait(5)
        return raw

    def decode_b(raw: Any) -> Any:
        b_inside.set()
        assert release_b.wait(5)  # held until the test has looked, with A finished
        return raw

    def run_a() -> None:
        fp._unpack_without_gc(decode_a, b"a")

    was = gc.isenabled()
    gc.enable()
    try:
        a = threading.Thread(target=run_a)
        a.start()
        assert a_inside.wait(5)
        b = threading.Thread(target=fp._unpack_without_gc, args=(decode_b, b"b"))
        b.start()
        a.join(10)
        assert not a.is_alive()
        assert not gc.isenabled()  # B is still decoding
        release_b.set()
        b.join(10)
        assert gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()


def slow_value(raw: bytes) -> tuple[str, Any]:
    """What msgpack-python alone makes of `raw` (a value, or that it raised)."""
    with msgpack_python_only():
        return outcome(SER.loads_typed, ("msgpack", raw))


@PROPERTY
@given(st.lists(pure_values | plain_values | values, max_size=12))
def test_a_batch_of_stored_values_loads_as_each_alone(batch: list[Any]) -> None:
    """`load_plain_batch` (a delta history's writes): one ormsgpack call, the same values as
    reading each alone, or None, and never None for enough plain values."""
    raws = [raw for tag, raw in map(SER.dumps_typed, batch) if tag == "msgpack"]
    loaded = fp.load_plain_batch(raws)
    if loaded is not None:
        assert len(loaded) == len(raws)
        for got, raw in zip(loaded, raws, strict=True):
            kind, want = slow_value(raw)
            assert kind == "value"
            assert_identical(got, want)
    plain = [v for v in batch if SER.dumps_typed(v)[0] == "msgpack" and is_plain(v)]
    if len(plain) == len(raws) >= fp._BATCH_MIN:
        assert loaded is not None  # the batch was taken


@PROPERTY
@given(st.lists(encoded | damaged | st.binary(max_size=12), min_size=8, max_size=14))
def test_a_batch_of_any_bytes_loads_as_each_alone_or_not_at_all(raws: list[bytes]) -> None:
    """Damaged values (bytes left over, cut short, empty) never shift their neighbours: the
    batch is refused unless every value reads alone to exactly what the batch gives."""
    loaded = fp.load_plain_batch(raws)
    if loaded is None:
        return
    for got, raw in zip(loaded, raws, strict=True):
        kind, want = slow_value(raw)
        assert kind == "value", (raw, got)
        assert_identical(got, want)


def test_a_batch_refuses_values_split_across_their_boundaries() -> None:
    """Two objects in one value and none in the next: the joined bytes hold as many objects
    as values, so only the per-value end check catches it."""
    one, two = msgpack.packb({"a": 1}), msgpack.packb([1, 2])
    raws = [msgpack.packb(i) for i in range(8)]
    assert fp.load_plain_batch([*raws, one, two]) == [*range(8), {"a": 1}, [1, 2]]
    assert fp.load_plain_batch([*raws, one + two[:1], two[1:]]) is None
    assert fp.load_plain_batch([*raws, one, b""]) is None
    assert fp.load_plain_batch(raws[:7]) is None  # too few to be worth a batch
