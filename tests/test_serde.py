"""Tests for the msgpack serializer: lossless round trips, strict loading, robust decoding."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
import sys
from collections import Counter, OrderedDict, defaultdict, deque
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from enum import Enum, Flag, IntEnum, StrEnum
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, NamedTuple
from uuid import UUID
from zoneinfo import ZoneInfo

import msgpack
import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpointer.channels.markers import MISSING, DeltaSnapshot, Overwrite
from checkpointer.errors import (
    DeserializationError,
    SerializationError,
    StoredException,
    TypeNotAllowedError,
    UnregisteredTypeError,
)
from checkpointer.serde import (
    MsgpackSerializer,
    Serializer,
    default_serializer,
    register_codec,
)
from checkpointer.serde import msgpack_serde as ms

HERE = __name__  # "tests.test_serde": the module the user-defined classes below live in


# --------------------------------------------------------------------------- fixtures


class Color(Enum):
    RED = "red"
    PAIR = (1, 2)


class Level(IntEnum):
    LOW = 1
    HIGH = 2


class Mode(StrEnum):
    FAST = "fast"
    SLOW = "slow"


class Perm(Flag):
    R = 1
    W = 2
    X = 4


@dataclass
class Point:
    x: Any
    y: Any = None


@dataclass(frozen=True)
class FrozenPoint:
    x: int
    y: int


@dataclass(slots=True)
class SlotPoint:
    x: Any
    tags: tuple[str, ...] = ()


@dataclass
class Derived:
    a: int
    b: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.b = self.a * 2


class Pair(NamedTuple):
    left: Any
    right: Any


class Model(pydantic.BaseModel):
    name: str
    items: tuple[int, ...] = ()
    child: Model | None = None
    payload: Any = None


class Loose(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")
    a: int = 0


class CodedError(Exception):
    """An exception whose constructor signature differs from its `args`."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class Opaque:
    """A class with no msgpack representation."""


class Money:
    __slots__ = ("amount", "currency")

    def __init__(self, amount: int, currency: str) -> None:
        self.amount = amount
        self.currency = currency

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Money)
            and (self.amount, self.currency) == (other.amount, other.currency)
            and type(self) is type(other)
        )

    def __hash__(self) -> int:
        return hash((self.amount, self.currency))


class Euro(Money):
    pass


@pytest.fixture
def ser() -> MsgpackSerializer:
    """A serializer that may load every class defined in this module."""
    return MsgpackSerializer(allowed_modules=[HERE])


def roundtrip(s: MsgpackSerializer, value: Any) -> Any:
    tag, data = s.dumps_typed(value)
    assert isinstance(tag, str) and isinstance(data, bytes)
    return s.loads_typed((tag, data))


def assert_same(a: Any, b: Any, path: str = "value") -> None:
    """Equality that also demands equal types all the way down, and treats nan as equal."""
    assert type(a) is type(b), f"{path}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, float):
        if math.isnan(a):
            assert math.isnan(b), path
        else:
            assert a == b and math.copysign(1, a) == math.copysign(1, b), f"{path}: {a!r} {b!r}"
    elif isinstance(a, complex):
        assert_same(a.real, b.real, path + ".real")
        assert_same(a.imag, b.imag, path + ".imag")
    elif isinstance(a, Decimal):
        assert str(a) == str(b), path
    elif isinstance(a, Enum):
        assert a is b, path
    elif isinstance(a, datetime | time):
        assert a.isoformat() == b.isoformat() and a.fold == b.fold, path
        assert type(a.tzinfo) is type(b.tzinfo) and a.tzinfo == b.tzinfo, path
        if a.tzinfo is not None:
            assert a.tzname() == b.tzname(), path
    elif isinstance(a, BaseException):
        assert_same(a.args, b.args, path + ".args")
        assert_same(vars(a), vars(b), path + ".__dict__")
    elif isinstance(a, pydantic.BaseModel):
        assert_same(a.__dict__, b.__dict__, path)
        assert a.model_fields_set == b.model_fields_set, path
    elif dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            assert_same(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}")
    elif isinstance(a, list | tuple | deque):
        assert len(a) == len(b), path
        if isinstance(a, deque):
            assert a.maxlen == b.maxlen, path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}[{i}]")
    elif isinstance(a, dict):
        assert len(a) == len(b), path
        if isinstance(a, defaultdict):
            assert a.default_factory is b.default_factory, path
        for (ka, va), (kb, vb) in zip(a.items(), b.items()):
            assert_same(ka, kb, f"{path}.key")
            assert_same(va, vb, f"{path}[{ka!r}]")
    elif isinstance(a, set | frozenset):
        assert len(a) == len(b), path
        for x in a:
            matches = [y for y in b if y == x]
            assert len(matches) == 1, f"{path}: {x!r} missing"
            assert_same(x, matches[0], f"{path}{{}}")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def mark(code: int) -> msgpack.ExtType:
    return msgpack.ExtType(code, b"")


def ext(code: int, payload: bytes | list[Any]) -> tuple[str, bytes]:
    """A hand-made stored value: a leaf extension holding raw bytes, or a tagged array
    (marker extension first) for a list payload."""
    if isinstance(payload, bytes):
        return ("msgpack", msgpack.packb(msgpack.ExtType(code, payload)))
    return ("msgpack", msgpack.packb([mark(code), *payload]))


# ------------------------------------------------------------------------ basic API


def test_default_serializer_is_shared_and_implements_protocol() -> None:
    s = default_serializer()
    assert s is default_serializer()
    assert isinstance(s, Serializer)
    assert isinstance(s, MsgpackSerializer)


def test_tags() -> None:
    s = MsgpackSerializer()
    assert s.dumps_typed(None) == ("null", b"")
    assert s.dumps_typed(b"\x00raw") == ("bytes", b"\x00raw")
    assert s.dumps_typed(bytearray(b"x"))[0] == "msgpack"
    assert s.dumps_typed({"a": 1})[0] == "msgpack"
    assert s.loads_typed(("null", b"")) is None
    view: Any = memoryview(b"ab")  # what some database drivers hand back for BLOBs
    assert s.loads_typed(("bytes", view)) == b"ab"
    packed: Any = memoryview(msgpack.packb([1]))
    assert s.loads_typed(("msgpack", packed)) == [1]


def test_plain_data_is_plain_msgpack() -> None:
    """Common state must stay readable by any msgpack client (no extensions used)."""
    value = {"messages": [{"role": "user", "content": "hi", "n": 1, "ok": True}], "x": None}
    _, data = MsgpackSerializer().dumps_typed(value)
    assert msgpack.unpackb(data) == value


def test_plain_data_never_calls_back_into_python() -> None:
    """The hot path: dicts/lists/str/int/float/bool/None/bytes are packed entirely in C."""

    class Counting(MsgpackSerializer):
        calls = 0

        def _default(self, obj: Any) -> Any:
            self.calls += 1
            return super()._default(obj)

    s = Counting()
    plain = {"m": [{"role": "user", "content": "hi", "n": -(2**63), "f": 1.5, "b": b"x"}] * 50}
    s.dumps_typed(plain)
    assert s.calls == 0
    s.dumps_typed({"t": (1, 2), "big": 2**64})
    assert s.calls == 2


def _stable_id(value: Any) -> str:
    """A test id that is the same in every process: a set's repr follows string hashing,
    which changes per process (pytest-xdist requires every worker to collect alike)."""
    if type(value) in (set, frozenset):
        return f"{type(value).__name__}({sorted(map(_stable_id, value))})"
    return repr(value)


@pytest.mark.parametrize(
    "value",
    [
        (),
        (1,),
        (1, (2, (3, ()))),
        [(1, 2), [3, (4,)]],
        {"t": (1, 2)},
        {(1, 2): "tuple key", 3: "int key", None: "none key", b"k": 1, 1.5: "f"},
        {frozenset({1, 2}): {(1, "a"): [()]}},
        2**63 - 1,
        2**63,
        2**64 - 1,
        2**64,
        -(2**63),
        -(2**63) - 1,
        -(2**64),
        10**100,
        -(10**100),
        2**4000 + 1,
        (2**70, [-(2**70)]),
        {2**80: 2**90},
        0.0,
        -0.0,
        float("inf"),
        float("-inf"),
        float("nan"),
        [float("nan"), {"x": float("nan")}],
        5e-324,
        "",
        "a\x00b",
        "\ud800",
        "lone \udfff surrogate and \U0001f600",
        b"",
        b"\x00\xff",
        bytearray(b"\x00abc"),
        {1, 2, 3},
        set(),
        frozenset(),
        frozenset({"a", (1, 2)}),
        {frozenset({1}), frozenset()},
        deque([1, 2, 3]),
        deque([1, (2,)], maxlen=3),
        deque(maxlen=0),
        Color.RED,
        Color.PAIR,
        Level.HIGH,
        Mode.FAST,
        Perm.R | Perm.X,
        {Level.LOW: Mode.SLOW},
        datetime(2024, 5, 6, 7, 8, 9, 123456),
        datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC),
        datetime(2024, 5, 6, tzinfo=timezone(timedelta(hours=-3, minutes=-30))),
        datetime(2024, 5, 6, tzinfo=timezone(timedelta(hours=2), "CEST-ish")),
        datetime(2024, 3, 10, 12, tzinfo=ZoneInfo("America/New_York")),
        datetime(2024, 11, 3, 1, 30, fold=1, tzinfo=ZoneInfo("America/New_York")),
        date(1, 1, 1),
        date(9999, 12, 31),
        time(23, 59, 59, 999999),
        time(1, 2, tzinfo=timezone(timedelta(minutes=45))),
        time(1, 2, fold=1),
        timedelta(days=-5, seconds=3, microseconds=7),
        timedelta.max,
        UTC,
        timezone(timedelta(hours=5), "Custom"),
        ZoneInfo("Europe/Paris"),
        UUID("12345678-1234-5678-1234-567812345678"),
        UUID("9c5b94b1-35ad-49bb-b118-8e8fc24abf80"),  # a version-4 id, as uuid4() makes
        Decimal("1.10"),
        Decimal("-0.000"),
        Decimal("NaN"),
        Decimal("-sNaN"),
        Decimal("Infinity"),
        Decimal("-Infinity"),
        Decimal("1E+999999"),
        Path("/tmp/a b/c"),
        Path("relative/x.txt"),
        PurePosixPath("/x/y"),
        PureWindowsPath("C:\\Users\\x"),
        re.compile(r"a+b?", re.IGNORECASE | re.MULTILINE),
        re.compile(rb"\x00+"),
        1 + 2j,
        complex(float("inf"), -0.0),
        OrderedDict([("b", 1), ("a", 2)]),
        Counter("abracadabra"),
        defaultdict(list, {"a": [1]}),
        defaultdict(None, {1: 2}),
        int,
        Decimal,
        DeltaSnapshot([1, 2, 3]),
        DeltaSnapshot(None),
        DeltaSnapshot((1, {"a": (2,)})),
        Overwrite({"a": [1]}),
        Overwrite(None),
        Overwrite(DeltaSnapshot(1)),
        {"v": MISSING},
        Point(1, (2, 3)),
        Point(Point(1), {"k": frozenset({1})}),
        FrozenPoint(1, 2),
        {FrozenPoint(1, 2): "dataclass key"},
        SlotPoint("a", ("x", "y")),
        Pair(1, (2, 3)),
        Pair(Pair(1, 2), None),
        Model(name="a"),
        Model(name="a", items=(1, 2), child=Model(name="b", payload={(1,): 2}), payload=(3,)),
        Loose(a=1, extra_field=(1, 2)),  # type: ignore[call-arg]
    ],
    ids=lambda value: _stable_id(value),
)
def test_roundtrip_explicit(ser: MsgpackSerializer, value: Any) -> None:
    assert_same(value, roundtrip(ser, value))


def test_bytearray_top_level_keeps_type_nested_becomes_bytes() -> None:
    """msgpack's C packer emits nested bytearrays as bin without consulting `default`."""
    s = MsgpackSerializer()
    assert_same(bytearray(b"\x00a"), roundtrip(s, bytearray(b"\x00a")))
    assert_same([b"\x00a"], roundtrip(s, [bytearray(b"\x00a")]))


def test_missing_keeps_identity() -> None:
    assert roundtrip(MsgpackSerializer(), MISSING) is MISSING


def test_markers_are_not_confused_with_plain_tuples() -> None:
    s = MsgpackSerializer()
    loaded = roundtrip(s, [DeltaSnapshot(1), (1,), Overwrite(1)])
    assert type(loaded[0]) is DeltaSnapshot and loaded[0].value == 1
    assert type(loaded[1]) is tuple
    assert type(loaded[2]) is Overwrite


def test_bigint_is_not_truncated_or_float() -> None:
    s = MsgpackSerializer()
    for n in (2**64, -(2**64) - 1, 3**500, -(7**300)):
        loaded = roundtrip(s, n)
        assert type(loaded) is int and loaded == n


def test_int_enum_does_not_decay_to_int(ser: MsgpackSerializer) -> None:
    loaded = roundtrip(ser, [Level.LOW, Mode.FAST])
    assert type(loaded[0]) is Level and type(loaded[1]) is Mode


def test_zoneinfo_aware_datetime_keeps_zone_and_fold() -> None:
    value = datetime(2024, 11, 3, 1, 30, fold=1, tzinfo=ZoneInfo("America/New_York"))
    loaded = roundtrip(MsgpackSerializer(), value)
    assert loaded.tzinfo is ZoneInfo("America/New_York")
    assert loaded.fold == 1 and loaded.utcoffset() == timedelta(hours=-5)


def test_dataclass_init_false_field_kept(ser: MsgpackSerializer) -> None:
    d = Derived(3)
    d.b = 100  # changed after construction: the stored value must win over __post_init__
    loaded = roundtrip(ser, d)
    assert type(loaded) is Derived and loaded.a == 3 and loaded.b == 100


def test_frozen_and_slots_dataclasses(ser: MsgpackSerializer) -> None:
    frozen = roundtrip(ser, FrozenPoint(1, 2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        frozen.x = 5
    slots = roundtrip(ser, SlotPoint("a"))
    assert not hasattr(slots, "__dict__")
    assert slots == SlotPoint("a")


def test_pydantic_keeps_nested_types_and_fields_set(ser: MsgpackSerializer) -> None:
    m = Model(name="a", child=Model(name="b", items=(1,)), payload=(1, 2))
    loaded = roundtrip(ser, m)
    assert type(loaded.child) is Model
    assert loaded.payload == (1, 2) and type(loaded.payload) is tuple
    assert loaded.model_fields_set == {"name", "child", "payload"}
    assert loaded == m


def test_pydantic_v1_model() -> None:
    from pydantic import v1

    class V1Model(v1.BaseModel):
        a: int
        b: tuple[int, ...] = ()

    s = MsgpackSerializer(allowed_types=[V1Model])
    loaded = roundtrip(s, V1Model(a=1, b=(2,)))
    assert type(loaded) is V1Model and loaded.a == 1 and loaded.b == (2,)


# ------------------------------------------------------------------------ exceptions


def test_builtin_exceptions_load_by_default() -> None:
    s = MsgpackSerializer()
    loaded = roundtrip(s, ValueError("bad", 42, (1, 2)))
    assert type(loaded) is ValueError and loaded.args == ("bad", 42, (1, 2))
    key = roundtrip(s, KeyError("k"))
    assert type(key) is KeyError and key.args == ("k",)


def test_oserror_and_importerror_keep_their_attributes() -> None:
    s = MsgpackSerializer()
    err = roundtrip(s, FileNotFoundError(2, "No such file", "x.txt"))
    assert type(err) is FileNotFoundError
    assert (err.errno, err.strerror, err.filename) == (2, "No such file", "x.txt")
    imp = roundtrip(s, ModuleNotFoundError("nope", name="pkg", path="/p"))
    assert type(imp) is ModuleNotFoundError and (imp.name, imp.path) == ("pkg", "/p")


def test_library_errors_load_by_default() -> None:
    loaded = roundtrip(MsgpackSerializer(), UnregisteredTypeError("x"))
    assert type(loaded) is UnregisteredTypeError


def test_exception_notes_and_attributes(ser: MsgpackSerializer) -> None:
    exc = CodedError("boom", 7)
    exc.add_note("while doing X")
    loaded = roundtrip(ser, exc)
    assert type(loaded) is CodedError
    assert loaded.args == ("boom",) and loaded.code == 7
    assert loaded.__notes__ == ["while doing X"]


def test_exception_unencodable_attribute_is_dropped_not_fatal() -> None:
    exc = ValueError("x")
    exc.conn = Opaque()  # type: ignore[attr-defined]
    exc.status = 503  # type: ignore[attr-defined]
    loaded = roundtrip(MsgpackSerializer(), exc)
    assert loaded.args == ("x",) and loaded.status == 503
    assert not hasattr(loaded, "conn")


def test_exception_with_unencodable_args_fails_loudly() -> None:
    with pytest.raises(SerializationError, match="Opaque"):
        MsgpackSerializer().dumps_typed(ValueError(Opaque()))


def test_strict_serializer_gives_a_stand_in_for_an_unlisted_exception() -> None:
    """A task's error never makes a thread unreadable: a strict serializer does not build
    the class, it returns a stand-in carrying what was stored."""
    data = MsgpackSerializer().dumps_typed(CodedError("boom", 1))
    loaded = MsgpackSerializer(strict=True).loads_typed(data)
    assert type(loaded) is StoredException
    assert (loaded.module, loaded.qualname) == (HERE, "CodedError")
    assert loaded.args == ("boom",) and loaded.state == {"code": 1}
    assert repr(loaded) == "CodedError('boom')"
    allowed = MsgpackSerializer(strict=True, allowed_types=[CodedError]).loads_typed(data)
    assert type(allowed) is CodedError


# ---------------------------------------------------------------- dump-side errors


@pytest.mark.parametrize(
    "value",
    [Opaque(), {"nested": [Opaque()]}, (1, Opaque()), lambda: 1, object()],
    ids=["plain", "nested", "in-tuple", "lambda", "object"],
)
def test_unsupported_type_raises_serialization_error_naming_it(value: Any) -> None:
    with pytest.raises(SerializationError) as info:
        MsgpackSerializer().dumps_typed(value)
    inner = value
    while isinstance(inner, dict | list | tuple):
        inner = next(iter(inner.values())) if isinstance(inner, dict) else inner[-1]
    assert type(inner).__qualname__ in str(info.value)


def test_class_objects_other_than_builtin_types_are_refused_on_dump() -> None:
    with pytest.raises(SerializationError, match=r"Opaque itself"):
        MsgpackSerializer().dumps_typed(Opaque)
    with pytest.raises(SerializationError, match="Point"):
        MsgpackSerializer().dumps_typed({"schema": Point})
    assert roundtrip(MsgpackSerializer(), [int, str, dict, Decimal]) == [int, str, dict, Decimal]


def test_recursive_structure_raises_serialization_error() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(SerializationError):
        MsgpackSerializer().dumps_typed(loop)
    tup_loop: list[Any] = []
    tup_loop.append((tup_loop,))
    with pytest.raises(SerializationError):
        MsgpackSerializer().dumps_typed(tup_loop)


def test_zoneinfo_without_key_is_refused() -> None:
    source = Path("/usr/share/zoneinfo/UTC")
    if not source.exists():
        pytest.skip("no system tz database")
    with source.open("rb") as fh:
        tz = ZoneInfo.from_file(fh)
    with pytest.raises(SerializationError, match="key"):
        MsgpackSerializer().dumps_typed(datetime(2020, 1, 1, tzinfo=tz))


# ----------------------------------------------------------------------- strictness

UNREGISTERED = [
    Point(1, 2),
    FrozenPoint(1, 2),
    Color.RED,
    Level.LOW,
    Pair(1, 2),
    Model(name="x"),
    {"deep": [(1, SlotPoint("a"))]},
]


@pytest.mark.parametrize("value", UNREGISTERED, ids=repr)
def test_strict_serializer_refuses_unlisted_classes(value: Any) -> None:
    """This module's classes load by default (an application module, and written by this
    process); a strict serializer loads only what it was told."""
    data = MsgpackSerializer(strict=True).dumps_typed(value)  # dumping is permissive
    assert_same(value, MsgpackSerializer().loads_typed(data))
    with pytest.raises(TypeNotAllowedError) as info:
        MsgpackSerializer(strict=True).loads_typed(data)
    message = str(info.value)
    assert "tests.test_serde." in message and "strict" in message
    assert "allowed_types=[tests.test_serde." in message
    assert "allowed_modules=['tests.test_serde']" in message
    assert "CHECKPOINTER_ALLOWED_MODULES=tests.test_serde" in message
    assert "corrupt" not in message
    assert isinstance(info.value, UnregisteredTypeError)
    loaded = MsgpackSerializer(strict=True, allowed_modules=["tests.test_serde"]).loads_typed(data)
    assert_same(value, loaded)


def test_error_message_names_the_class() -> None:
    data = MsgpackSerializer().dumps_typed(Point(1))
    with pytest.raises(UnregisteredTypeError, match=r"allowed_types=\[tests\.test_serde\.Point\]"):
        MsgpackSerializer(strict=True).loads_typed(data)


def test_register_allows_just_that_class() -> None:
    s = MsgpackSerializer(strict=True)
    assert s.register(Point) is Point
    assert roundtrip(s, Point(1)) == Point(1)
    with pytest.raises(UnregisteredTypeError, match="FrozenPoint"):
        roundtrip(s, FrozenPoint(1, 2))


def test_register_as_decorator_and_local_class() -> None:
    s = MsgpackSerializer(strict=True)

    @s.register
    @dataclass
    class Local:
        v: int

    assert roundtrip(s, Local(3)) == Local(3)
    # A strict serializer allowing the module finds the class by its exact name among
    # the classes this process registered or wrote; one that does not allow it refuses.
    allowed = MsgpackSerializer(strict=True, allowed_modules=[HERE])
    assert allowed.loads_typed(s.dumps_typed(Local(3))) == Local(3)
    with pytest.raises(TypeNotAllowedError, match="strict"):
        MsgpackSerializer(strict=True).loads_typed(s.dumps_typed(Local(3)))


def test_with_types_and_with_modules_return_new_serializers() -> None:
    base = MsgpackSerializer(allowed_types=[Point], strict=True)
    data = base.dumps_typed([Point(1), Color.RED])
    derived = base.with_types(Color)
    assert derived is not base and derived.strict
    assert derived.loads_typed(data) == [Point(1), Color.RED]
    with pytest.raises(UnregisteredTypeError, match="Color"):
        base.loads_typed(data)  # the original is unchanged
    by_module = MsgpackSerializer(strict=True).with_modules(HERE)
    assert by_module.loads_typed(data) == [Point(1), Color.RED]
    assert by_module.allowed_modules == {HERE}
    assert base.allowed_types == {Point}


def test_module_allowlist_covers_submodules_but_not_name_prefixes() -> None:
    data = MsgpackSerializer().dumps_typed(Point(1))
    assert MsgpackSerializer(strict=True, allowed_modules=["tests"]).loads_typed(data) == Point(1)
    with pytest.raises(UnregisteredTypeError):
        MsgpackSerializer(strict=True, allowed_modules=["tests.test_ser"]).loads_typed(data)


def test_allow_module_rejects_garbage_names() -> None:
    with pytest.raises(ValueError):
        MsgpackSerializer(allowed_modules=["../etc"])
    with pytest.raises(TypeError):
        MsgpackSerializer().register(Point(1))  # type: ignore[type-var]


CLASS_REF_CODES = [
    ms.EXT_ENUM,
    ms.EXT_DATACLASS,
    ms.EXT_PYDANTIC,
    ms.EXT_NAMEDTUPLE,
    ms.EXT_EXCEPTION,
    ms.EXT_TYPE,
]


def _class_ref_payload(code: int, module: str, qualname: str) -> tuple[str, bytes]:
    rests: dict[int, list[Any]] = {
        ms.EXT_ENUM: [1],
        ms.EXT_DATACLASS: [{}],
        ms.EXT_PYDANTIC: [{}, []],
        ms.EXT_NAMEDTUPLE: [[]],
        ms.EXT_EXCEPTION: [[], {}],
        ms.EXT_TYPE: [],
    }
    rest = rests[code]
    return ext(code, [module, qualname, *rest])


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("code", CLASS_REF_CODES)
@pytest.mark.parametrize("module", ["this", "definitely_not_a_module_xyz", "tests.no_such_mod"])
def test_crafted_reference_to_unlisted_module_is_never_imported(
    code: int, module: str, strict: bool
) -> None:
    assert module not in sys.modules
    s = MsgpackSerializer(strict=strict)
    if code == ms.EXT_EXCEPTION:  # an error record: a stand-in, never the class
        loaded = s.loads_typed(_class_ref_payload(code, module, "Thing"))
        assert type(loaded) is StoredException and loaded.module == module
    else:
        with pytest.raises(TypeNotAllowedError, match=re.escape(module)):
            s.loads_typed(_class_ref_payload(code, module, "Thing"))
    assert module not in sys.modules


def test_allowlisted_but_missing_module_says_to_import_it() -> None:
    s = MsgpackSerializer(allowed_modules=["definitely_not_a_module_xyz"])
    with pytest.raises(TypeNotAllowedError, match="not imported") as info:
        s.loads_typed(_class_ref_payload(ms.EXT_DATACLASS, "definitely_not_a_module_xyz", "A"))
    assert "Import definitely_not_a_module_xyz before reading" in str(info.value)
    assert "definitely_not_a_module_xyz" not in sys.modules


@pytest.mark.parametrize("code", CLASS_REF_CODES)
def test_allowlisted_module_function_is_never_called(
    code: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[Any] = []
    monkeypatch.setattr(os, "system", lambda *a: calls.append(a))
    s = MsgpackSerializer(allowed_modules=["os"])
    data = _class_ref_payload(code, "os", "system")
    if code == ms.EXT_EXCEPTION:
        assert type(s.loads_typed(data)) is StoredException
    else:
        with pytest.raises(TypeNotAllowedError, match=r"os\.system"):
            s.loads_typed(data)
    assert calls == []


def test_builtin_callables_are_not_loadable() -> None:
    s = MsgpackSerializer()
    for code in CLASS_REF_CODES:
        data = _class_ref_payload(code, "builtins", "eval")
        if code == ms.EXT_EXCEPTION:
            assert type(s.loads_typed(data)) is StoredException
        else:
            with pytest.raises(TypeNotAllowedError):
                s.loads_typed(data)


@pytest.mark.parametrize(
    ("code", "qualname"),
    [
        (ms.EXT_DATACLASS, "Color"),  # an enum claimed to be a dataclass
        (ms.EXT_ENUM, "Point"),
        (ms.EXT_EXCEPTION, "Point"),
        (ms.EXT_PYDANTIC, "Point"),
        (ms.EXT_NAMEDTUPLE, "Model"),
    ],
)
def test_class_of_the_wrong_kind_is_refused(
    ser: MsgpackSerializer, code: int, qualname: str
) -> None:
    with pytest.raises(DeserializationError, match="not one"):
        ser.loads_typed(_class_ref_payload(code, HERE, qualname))


def test_builtin_non_exception_claimed_as_exception_is_refused() -> None:
    with pytest.raises(DeserializationError):
        MsgpackSerializer().loads_typed(_class_ref_payload(ms.EXT_EXCEPTION, "builtins", "int"))


def test_defaultdict_factory_must_be_allowed() -> None:
    s = MsgpackSerializer()
    with pytest.raises(SerializationError, match="function"):
        s.dumps_typed(defaultdict(lambda: 0))
    crafted = ext(
        ms.EXT_DEFAULTDICT,
        [[mark(ms.EXT_TYPE), "subprocess", "Popen"], {}],
    )
    with pytest.raises(UnregisteredTypeError, match=r"subprocess\.Popen"):
        s.loads_typed(crafted)


# ----------------------------------------------------------------------------- codecs


def test_instance_codec_roundtrip_and_isolation() -> None:
    s = MsgpackSerializer()
    s.register_codec("test.money", Money, lambda m: [m.amount, m.currency], lambda p: Money(*p))
    value = {"price": Money(10**30, "EUR"), "t": (Money(1, "USD"),)}
    assert roundtrip(s, value) == value
    assert type(roundtrip(s, value)["t"]) is tuple
    other = MsgpackSerializer()
    with pytest.raises(SerializationError, match="Money"):
        other.dumps_typed(Money(1, "X"))
    with pytest.raises(UnregisteredTypeError, match=r"test\.money"):
        other.loads_typed(s.dumps_typed(Money(1, "X")))
    assert s.with_modules("x").loads_typed(s.dumps_typed(Money(1, "X"))) == Money(1, "X")


def test_codec_subclasses_only_when_asked() -> None:
    s = MsgpackSerializer()
    s.register_codec("test.money", Money, lambda m: [m.amount, m.currency], lambda p: Money(*p))
    with pytest.raises(SerializationError, match="Euro"):
        s.dumps_typed(Euro(1, "EUR"))
    s.register_codec(
        "test.money2",
        Money,
        lambda m: [type(m).__name__, m.amount, m.currency],
        lambda p: {"Money": Money, "Euro": Euro}[p[0]](p[1], p[2]),
        include_subclasses=True,
    )
    assert type(roundtrip(s, Euro(1, "EUR"))) is Euro


def test_global_codec_reaches_existing_serializers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ms, "_GLOBAL_CODECS_BY_NAME", {})
    monkeypatch.setattr(ms, "_GLOBAL_CODECS_BY_TYPE", {})
    existing = MsgpackSerializer()
    register_codec(
        "test.global.money", Money, lambda m: [m.amount, m.currency], lambda p: Money(*p)
    )
    assert roundtrip(existing, Money(5, "GBP")) == Money(5, "GBP")
    # an instance codec of the same type wins over the global one
    existing.register_codec("test.local.money", Money, lambda m: m.amount, lambda p: Money(p, "L"))
    assert roundtrip(existing, Money(5, "GBP")) == Money(5, "L")


# ------------------------------------------------------------- malformed / hostile input


@pytest.mark.parametrize(
    "data",
    [
        ("pickle", b"\x80\x04K\x01."),
        ("json", b"1"),
        ("", b""),
        ("msgpack", "not bytes"),
        ("null", b"\x01"),
        ("msgpack",),
        "msgpack",
        None,
        ("msgpack", b""),
        ("msgpack", b"\xc1"),  # never-used msgpack byte
        ("msgpack", b"\x92\x01"),  # array of 2 with one item
        ("msgpack", b"\x01\x02"),  # trailing data
    ],
    ids=repr,
)
def test_bad_input_raises_deserialization_error(data: Any) -> None:
    with pytest.raises(DeserializationError):
        MsgpackSerializer().loads_typed(data)


@pytest.mark.parametrize("code", [0, 21, 99, 127])
def test_unknown_ext_code(code: int) -> None:
    with pytest.raises(DeserializationError, match="extension code"):
        MsgpackSerializer().loads_typed(("msgpack", msgpack.packb(msgpack.ExtType(code, b"x"))))


def test_negative_ext_code() -> None:
    with pytest.raises(DeserializationError, match="extension code -5"):
        MsgpackSerializer().loads_typed(("msgpack", b"\xd4\xfbx"))  # fixext1, type -5


@pytest.mark.parametrize(
    ("code", "payload"),
    [
        (ms.EXT_BIGINT, b""),
        (ms.EXT_TUPLE, b"\x01"),  # a marker must be empty
        (ms.EXT_UUID, b"short"),
        (ms.EXT_DECIMAL, b"not a number"),
        (ms.EXT_DECIMAL, b"\xff"),
        (ms.EXT_DATETIME, [2024, 13, 1, 0, 0, 0, 0, None, 0]),
        (ms.EXT_DATETIME, [2024, 1, 1, 0, 0, 0, 0, "UTC", 0]),
        (ms.EXT_DATETIME, [2024]),
        (ms.EXT_ZONEINFO, ["../../etc/passwd"]),
        (ms.EXT_ZONEINFO, ["No/Such_Zone"]),
        (ms.EXT_ZONEINFO, []),
        (ms.EXT_PATH, ["os.system", "x"]),
        (ms.EXT_PATTERN, ["(", 0]),
        (ms.EXT_DEQUE, [-1, 1]),
        (ms.EXT_DEQUE, ["x", 1]),
        (ms.EXT_DEQUE, []),
        (ms.EXT_SET, [[1]]),  # unhashable element
        (ms.EXT_MISSING, b"x"),
        (ms.EXT_CODEC, ["nope", 1]),
        (ms.EXT_DATACLASS, []),
        (ms.EXT_DATACLASS, [HERE, "Point", "not a dict"]),
        (ms.EXT_DATACLASS, [HERE, "Point", {1: 2}]),
        (ms.EXT_PYDANTIC, [HERE, "Model", {}, [1]]),
        (ms.EXT_TYPE, [HERE, "Point", "extra"]),
        (ms.EXT_DELTA_SNAPSHOT, []),
        (ms.EXT_OVERWRITE, [1, 2]),
        (ms.EXT_COUNTER, [[1]]),
        (ms.EXT_COMPLEX, ["1", 2.0]),
        (ms.EXT_DATACLASS, [HERE]),
        (ms.EXT_ENUM, [HERE, "Color", "no such value"]),
    ],
    ids=repr,
)
def test_malformed_extension_payloads(ser: MsgpackSerializer, code: int, payload: Any) -> None:
    with pytest.raises(DeserializationError):
        ser.loads_typed(ext(code, payload))


@pytest.mark.parametrize(
    "raw",
    [
        msgpack.packb(mark(ms.EXT_TUPLE)),  # a bare marker
        msgpack.packb([1, mark(ms.EXT_TUPLE)]),  # not at the head of an array
        msgpack.packb({"a": mark(ms.EXT_SET)}),
        msgpack.packb([mark(ms.EXT_TUPLE), mark(ms.EXT_TUPLE)]),
        b"\x81" + msgpack.packb(mark(ms.EXT_TUPLE)) + b"\x01",  # as a map key
        msgpack.packb([mark(ms.EXT_DELTA_SNAPSHOT), [1, mark(ms.EXT_TUPLE)]]),
    ],
    ids=repr,
)
def test_misplaced_markers_are_rejected(raw: bytes) -> None:
    """A marker outside the head of an array must never leak into the loaded value."""
    with pytest.raises(DeserializationError, match="marker"):
        MsgpackSerializer().loads_typed(("msgpack", raw))


def test_hostile_deep_nesting_is_an_error_not_a_crash() -> None:
    """Tagged arrays are decoded in one unpacker pass: depth can't overflow the C stack."""
    for code in (ms.EXT_TUPLE, ms.EXT_DELTA_SNAPSHOT, ms.EXT_SET):
        raw = msgpack.packb(1)
        head = b"\x92" + msgpack.packb(mark(code))
        raw = head * 100_000 + raw
        with pytest.raises(DeserializationError):
            MsgpackSerializer().loads_typed(("msgpack", raw))


def test_deep_but_legal_nesting_roundtrips() -> None:
    value: Any = 1
    for i in range(300):
        value = (value,) if i % 3 else [DeltaSnapshot(value)]
    assert_same(value, roundtrip(MsgpackSerializer(), value))
    for _ in range(5000):
        value = (value,)
    with pytest.raises(SerializationError, match="tuple"):
        MsgpackSerializer().dumps_typed(value)


def test_nested_unregistered_type_error_is_not_rewrapped() -> None:
    data = MsgpackSerializer().dumps_typed({"a": [(1, {"b": Point(1)})]})
    with pytest.raises(TypeNotAllowedError):
        MsgpackSerializer(strict=True).loads_typed(data)


# ------------------------------------------------------------------- property tests

_text = st.text(st.characters() | st.characters(categories=["Cs"]), max_size=12)
_ints = st.integers() | st.integers(min_value=-(2**200), max_value=2**200)
_tz = (
    st.none()
    | st.timezones()
    | st.builds(
        timezone, st.timedeltas(min_value=timedelta(hours=-23), max_value=timedelta(hours=23))
    )
)

_hashable_leaves = (
    st.none()
    | st.booleans()
    | _ints
    | st.floats(allow_nan=False)
    | _text
    | st.binary(max_size=8)
    | st.sampled_from([*Color, *Level, *Mode, Perm.R | Perm.W])
    | st.uuids()
    | st.decimals(allow_nan=False)
    | st.dates()
    | st.datetimes(timezones=_tz)
    | st.times(timezones=_tz)
    | st.timedeltas()
    | st.builds(PurePosixPath, _text.filter(lambda t: "\x00" not in t))
    | st.complex_numbers(allow_nan=False)
)

hashables = st.recursive(
    _hashable_leaves,
    lambda inner: (
        st.lists(inner, max_size=3).map(tuple)
        | st.frozensets(inner, max_size=3)
        | st.builds(FrozenPoint, _ints, _ints)
        | st.builds(Pair, inner, inner)
    ),
    max_leaves=6,
)

_leaves = (
    _hashable_leaves
    | st.floats()
    | st.decimals()
    | st.just(MISSING)
    | st.builds(ValueError, _text, _ints)
)

values: st.SearchStrategy[Any] = st.recursive(
    _leaves,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=4).map(tuple)
        | st.dictionaries(hashables, inner, max_size=4)
        | st.sets(hashables, max_size=4)
        | st.frozensets(hashables, max_size=4)
        | st.builds(deque, st.lists(inner, max_size=3), st.none() | st.integers(3, 5))
        | st.builds(OrderedDict, st.dictionaries(_text, inner, max_size=3))
        | st.builds(DeltaSnapshot, inner)
        | st.builds(Overwrite, inner)
        | st.builds(Point, inner, inner)
        | st.builds(SlotPoint, inner)
        | st.builds(Pair, inner, inner)
        | st.builds(Model, name=_text, items=st.lists(_ints, max_size=3).map(tuple), payload=inner)
    ),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values)
def test_roundtrip_property(value: Any) -> None:
    s = MsgpackSerializer(allowed_modules=[HERE])
    assert_same(value, roundtrip(s, value))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_only_raise_deserialization_error(data: bytes) -> None:
    s = MsgpackSerializer(allowed_modules=[HERE])
    with contextlib.suppress(DeserializationError):
        s.loads_typed(("msgpack", data))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values, st.data())
def test_truncated_payload_always_raises(value: Any, data: st.DataObject) -> None:
    s = MsgpackSerializer(allowed_modules=[HERE])
    tag, raw = s.dumps_typed(value)
    if tag != "msgpack":
        return
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(DeserializationError):
        s.loads_typed((tag, raw[:cut]))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values, st.data())
def test_corrupted_payload_only_raises_deserialization_error(
    value: Any, data: st.DataObject
) -> None:
    s = MsgpackSerializer(allowed_modules=[HERE])
    tag, raw = s.dumps_typed(value)
    if tag != "msgpack":
        return
    corrupt = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 3))):
        corrupt[data.draw(st.integers(0, len(corrupt) - 1))] = data.draw(st.integers(0, 255))
    with contextlib.suppress(DeserializationError):
        s.loads_typed((tag, bytes(corrupt)))


@settings(max_examples=100, deadline=None)
@given(values)
def test_strict_serializer_loads_or_refuses_with_typed_error(value: Any) -> None:
    """Without the allowlist, a value either loads identically or names what is missing."""
    strict = MsgpackSerializer(strict=True)
    data = strict.dumps_typed(value)
    try:
        loaded = strict.loads_typed(data)
    except UnregisteredTypeError as exc:
        assert HERE in str(exc)
    else:
        assert_same(value, loaded)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values)
def test_default_serializer_loads_this_modules_classes(value: Any) -> None:
    """With no configuration, every value of the property strategy loads back identically:
    built-ins, and this module's dataclasses, models, enums and named tuples."""
    assert_same(value, roundtrip(MsgpackSerializer(), value))
