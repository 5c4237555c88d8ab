"""The stored format's extension codes, and the builtin value types it encodes exactly.

Stored data depends on every number here: never renumber, only add. Tagged arrays start
with an empty "marker" extension whose code says what the rest of the array is; leaf
extensions hold raw bytes (big ints, UUID, Decimal). The encoders and decoders of this
module cover the types that need no class look-up (tuples, sets, the datetime family,
paths, patterns...); `msgpack_serde` adds those that name a class.
"""

from __future__ import annotations

import re
from collections import Counter, OrderedDict, defaultdict, deque
from collections.abc import Callable
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from functools import reduce
from itertools import islice
from operator import or_
from pathlib import PosixPath, PurePosixPath, PureWindowsPath, WindowsPath
from typing import Any, Final
from uuid import UUID
from zoneinfo import ZoneInfo

from msgpack import ExtType

from checkpointer.channels.markers import MISSING, DeltaSnapshot, Overwrite
from checkpointer.errors import DeserializationError, SerializationError

EXT_BIGINT: Final = 1
EXT_TUPLE: Final = 2
EXT_SET: Final = 3
EXT_FROZENSET: Final = 4
EXT_DEQUE: Final = 5
EXT_BYTEARRAY: Final = 6
EXT_DATETIME: Final = 7
EXT_DATE: Final = 8
EXT_TIME: Final = 9
EXT_TIMEDELTA: Final = 10
EXT_TIMEZONE: Final = 11
EXT_ZONEINFO: Final = 12
EXT_UUID: Final = 13
EXT_DECIMAL: Final = 14
EXT_PATH: Final = 15
EXT_PATTERN: Final = 16
EXT_COMPLEX: Final = 17
EXT_ORDEREDDICT: Final = 18
EXT_DEFAULTDICT: Final = 19
EXT_COUNTER: Final = 20
EXT_ENUM: Final = 32
EXT_DATACLASS: Final = 33
EXT_PYDANTIC: Final = 34
EXT_PYDANTIC_V1: Final = 35
EXT_NAMEDTUPLE: Final = 36
EXT_EXCEPTION: Final = 37
EXT_TYPE: Final = 38
EXT_SUBCLASS: Final = 39
"""A subclass of a builtin type (`str`, `int`, `list`...): class, base, value, state."""
EXT_DELTA_SNAPSHOT: Final = 48
EXT_OVERWRITE: Final = 49
EXT_MISSING: Final = 50
EXT_CODEC: Final = 64

# Tags of the (tag, bytes) pair.
TAG_NULL: Final = "null"
TAG_BYTES: Final = "bytes"
TAG_MSGPACK: Final = "msgpack"

PATH_TYPES: Final[dict[str, type]] = {
    "PurePosixPath": PurePosixPath,
    "PosixPath": PosixPath,
    "PureWindowsPath": PureWindowsPath,
    "WindowsPath": WindowsPath,
}

PLAIN_CLASSES: Final[frozenset[type]] = frozenset(
    {
        int,
        float,
        complex,
        str,
        bytes,
        bytearray,
        bool,
        list,
        dict,
        tuple,
        set,
        frozenset,
        object,
        deque,
        OrderedDict,
        Counter,
        defaultdict,
        datetime,
        date,
        time,
        timedelta,
        timezone,
        Decimal,
        UUID,
        PurePosixPath,
        PosixPath,
        PureWindowsPath,
        WindowsPath,
    }
)
"""The only classes stored data may hold as class objects, and so the only default factories
a stored `defaultdict` may have: builtin value types whose constructors are plain data."""


# Class kinds a stored class reference can claim to be; each is checked after resolving.
KIND_BY_EXT: Final[dict[int, str]] = {
    EXT_ENUM: "enum",
    EXT_DATACLASS: "dataclass",
    EXT_PYDANTIC: "pydantic model",
    EXT_PYDANTIC_V1: "pydantic v1 model",
    EXT_NAMEDTUPLE: "named tuple",
    EXT_EXCEPTION: "exception",
    EXT_TYPE: "class",
    EXT_SUBCLASS: "builtin subclass",
}

SUBCLASS_BASES: Final[dict[str, type]] = {
    cls.__name__: cls
    for cls in (str, int, float, bytes, bytearray, list, dict, tuple, set, frozenset)
}
"""Builtin types whose subclasses are stored as a class reference and a base value."""

# Codes of tagged arrays (the rest are raw-bytes leaf extensions).
ARRAY_CODES: Final = (
    EXT_TUPLE,
    EXT_SET,
    EXT_FROZENSET,
    EXT_DEQUE,
    EXT_DATETIME,
    EXT_DATE,
    EXT_TIME,
    EXT_TIMEDELTA,
    EXT_TIMEZONE,
    EXT_ZONEINFO,
    EXT_PATH,
    EXT_PATTERN,
    EXT_COMPLEX,
    EXT_ORDEREDDICT,
    EXT_DEFAULTDICT,
    EXT_COUNTER,
    EXT_DELTA_SNAPSHOT,
    EXT_OVERWRITE,
    EXT_CODEC,
    *KIND_BY_EXT,
)


class Marker:
    """What a marker extension decodes to, only ever seen by the decoder's `list_hook`."""

    __slots__ = ("code",)

    def __init__(self, code: int) -> None:
        self.code = code


MARK: Final[dict[int, ExtType]] = {code: ExtType(code, b"") for code in ARRAY_CODES}
MARKERS: Final[dict[int, Marker]] = {code: Marker(code) for code in ARRAY_CODES}
TUPLE_MARKER: Final = MARKERS[EXT_TUPLE]
_M_TUPLE: Final = MARK[EXT_TUPLE]
_M_SET: Final = MARK[EXT_SET]
_M_FROZENSET: Final = MARK[EXT_FROZENSET]


def qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def malformed(what: str) -> DeserializationError:
    return DeserializationError(f"malformed {what} extension payload")


def expect_list(value: Any, length: int, what: str) -> list[Any]:
    if type(value) is not list or len(value) != length:
        raise malformed(what)
    return value


def str_dict(value: Any, what: str) -> dict[str, Any]:
    if type(value) is not dict or not all(type(k) is str for k in value):
        raise malformed(what)
    return value


def str_set(value: Any) -> set[str]:
    if type(value) is not list or not all(type(k) is str for k in value):
        raise malformed("fields set")
    return set(value)


# ------------------------------------------------------------------------- encoders


def _enc_bigint(n: int) -> ExtType:
    return ExtType(EXT_BIGINT, n.to_bytes((n.bit_length() + 8) // 8, "big", signed=True))


def _enc_datetime(d: datetime) -> list[Any]:
    return [
        MARK[EXT_DATETIME],
        d.year,
        d.month,
        d.day,
        d.hour,
        d.minute,
        d.second,
        d.microsecond,
        d.tzinfo,
        d.fold,
    ]


def _enc_time(t: time) -> list[Any]:
    return [MARK[EXT_TIME], t.hour, t.minute, t.second, t.microsecond, t.tzinfo, t.fold]


def _enc_timezone(tz: timezone) -> list[Any]:
    offset = tz.utcoffset(None)
    name: str | None = tz.tzname(None)
    if name == timezone(offset).tzname(None):
        name = None  # the default name: don't store what the offset already says
    return [MARK[EXT_TIMEZONE], offset.days, offset.seconds, offset.microseconds, name]


def _enc_zoneinfo(tz: ZoneInfo) -> list[Any]:
    if tz.key is None:
        raise SerializationError("cannot serialize a ZoneInfo built from a file (it has no key)")
    return [MARK[EXT_ZONEINFO], tz.key]


def _enc_path(path: Any) -> list[Any]:
    return [MARK[EXT_PATH], type(path).__name__, str(path)]


def _enc_defaultdict(value: defaultdict[Any, Any]) -> list[Any]:
    factory = value.default_factory
    if factory is not None and factory not in PLAIN_CLASSES:
        raise SerializationError(
            f"cannot serialize a defaultdict whose default factory is {factory!r}: stored "
            "data may only name builtin types as factories (list, dict, set, int, ...), "
            "since loading must never call code named by stored bytes"
        )
    return [MARK[EXT_DEFAULTDICT], factory, dict(value)]


EXACT_ENCODERS: Final[dict[type, Callable[[Any], Any]]] = {
    int: _enc_bigint,  # only reached for ints msgpack can't hold in 64 bits
    tuple: lambda o: [_M_TUPLE, *o],
    set: lambda o: [_M_SET, *o],
    frozenset: lambda o: [_M_FROZENSET, *o],
    deque: lambda o: [MARK[EXT_DEQUE], o.maxlen, *o],
    datetime: _enc_datetime,
    date: lambda o: [MARK[EXT_DATE], o.year, o.month, o.day],
    time: _enc_time,
    timedelta: lambda o: [MARK[EXT_TIMEDELTA], o.days, o.seconds, o.microseconds],
    timezone: _enc_timezone,
    ZoneInfo: _enc_zoneinfo,
    UUID: lambda o: ExtType(EXT_UUID, o.bytes),
    Decimal: lambda o: ExtType(EXT_DECIMAL, str(o).encode("ascii")),
    re.Pattern: lambda o: [MARK[EXT_PATTERN], o.pattern, o.flags],
    complex: lambda o: [MARK[EXT_COMPLEX], o.real, o.imag],
    OrderedDict: lambda o: [MARK[EXT_ORDEREDDICT], dict(o)],
    Counter: lambda o: [MARK[EXT_COUNTER], dict(o)],
    defaultdict: _enc_defaultdict,
    DeltaSnapshot: lambda o: [MARK[EXT_DELTA_SNAPSHOT], o.value],
    Overwrite: lambda o: [MARK[EXT_OVERWRITE], o.value],
    type(MISSING): lambda o: ExtType(EXT_MISSING, b""),
    **{cls: _enc_path for cls in PATH_TYPES.values()},
}


# ------------------------------------------------------------------------- decoders


def _dec_bigint(data: bytes) -> int:
    if not data:
        raise malformed("integer")
    return int.from_bytes(data, "big", signed=True)


def _dec_uuid(data: bytes) -> UUID:
    if len(data) != 16:
        raise malformed("uuid")
    return UUID(bytes=bytes(data))


def _dec_missing(data: bytes) -> Any:
    if data:
        raise malformed("MISSING")
    return MISSING


LEAF_DECODERS: Final[dict[int, Callable[[bytes], Any]]] = {
    EXT_BIGINT: _dec_bigint,
    EXT_BYTEARRAY: bytearray,
    EXT_UUID: _dec_uuid,
    EXT_DECIMAL: lambda data: Decimal(bytes(data).decode("ascii")),
    EXT_MISSING: _dec_missing,
}

ArrayDecoder = Callable[[Any, list[Any]], Any]
"""`(serializer, items after the marker) -> value`."""


def _dec_deque(s: Any, args: list[Any]) -> deque[Any]:
    if not args or not (args[0] is None or type(args[0]) is int):
        raise malformed("deque")
    return deque(islice(args, 1, None), args[0])


def _dec_datetime(s: Any, args: list[Any]) -> datetime:
    y, mo, d, h, mi, sec, us, tz, fold = expect_list(args, 9, "datetime")
    return datetime(y, mo, d, h, mi, sec, us, tzinfo=tz, fold=fold)


def _dec_time(s: Any, args: list[Any]) -> time:
    h, mi, sec, us, tz, fold = expect_list(args, 6, "time")
    return time(h, mi, sec, us, tzinfo=tz, fold=fold)


def _dec_timezone(s: Any, args: list[Any]) -> timezone:
    days, seconds, micros, name = expect_list(args, 4, "timezone")
    offset = timedelta(days, seconds, micros)
    return timezone(offset) if name is None else timezone(offset, name)


def _dec_zoneinfo(s: Any, args: list[Any]) -> ZoneInfo:
    (key,) = expect_list(args, 1, "zoneinfo")
    if type(key) is not str:
        raise malformed("zoneinfo")
    return ZoneInfo(key)


def _dec_path(s: Any, args: list[Any]) -> Any:
    kind, text = expect_list(args, 2, "path")
    cls = PATH_TYPES.get(kind) if type(kind) is str else None
    if cls is None or type(text) is not str:
        raise malformed("path")
    return cls(text)


_PATTERN_FLAGS: Final = reduce(or_, (int(flag) for flag in re.RegexFlag), 0)
_QUIET_FLAGS: Final = _PATTERN_FLAGS & ~int(re.DEBUG)


def _dec_pattern(s: Any, args: list[Any]) -> re.Pattern[Any]:
    """`re.compile` of the stored pattern. `re.DEBUG` is dropped: compiling with it prints
    the parse tree, and loading must have no side effects (matching is the same without)."""
    pattern, flags = expect_list(args, 2, "pattern")
    if type(pattern) not in (str, bytes) or type(flags) is not int or flags & ~_PATTERN_FLAGS:
        raise malformed("pattern")
    return re.compile(pattern, flags & _QUIET_FLAGS)


def _dec_complex(s: Any, args: list[Any]) -> complex:
    real, imag = expect_list(args, 2, "complex")
    if type(real) is not float or type(imag) is not float:
        raise malformed("complex")
    return complex(real, imag)


def _dec_mapping(factory: Callable[[dict[Any, Any]], Any], what: str) -> ArrayDecoder:
    def decode(s: Any, args: list[Any]) -> Any:
        (value,) = expect_list(args, 1, what)
        if type(value) is not dict:
            raise malformed(what)
        return factory(value)

    return decode


def _dec_defaultdict(s: Any, args: list[Any]) -> defaultdict[Any, Any]:
    factory, items = expect_list(args, 2, "defaultdict")
    if type(items) is not dict or not (factory is None or factory in PLAIN_CLASSES):
        raise malformed("defaultdict")
    return defaultdict(factory, items)


def _dec_wrapper(factory: Callable[[Any], Any], what: str) -> ArrayDecoder:
    def decode(s: Any, args: list[Any]) -> Any:
        (value,) = expect_list(args, 1, what)
        return factory(value)

    return decode


BUILTIN_ARRAY_DECODERS: Final[dict[int, ArrayDecoder]] = {
    EXT_TUPLE: lambda s, args: tuple(args),
    EXT_SET: lambda s, args: set(args),
    EXT_FROZENSET: lambda s, args: frozenset(args),
    EXT_DEQUE: _dec_deque,
    EXT_DATETIME: _dec_datetime,
    EXT_DATE: lambda s, args: date(*expect_list(args, 3, "date")),
    EXT_TIME: _dec_time,
    EXT_TIMEDELTA: lambda s, args: timedelta(*expect_list(args, 3, "timedelta")),
    EXT_TIMEZONE: _dec_timezone,
    EXT_ZONEINFO: _dec_zoneinfo,
    EXT_PATH: _dec_path,
    EXT_PATTERN: _dec_pattern,
    EXT_COMPLEX: _dec_complex,
    EXT_ORDEREDDICT: _dec_mapping(OrderedDict, "OrderedDict"),
    EXT_COUNTER: _dec_mapping(Counter, "Counter"),
    EXT_DEFAULTDICT: _dec_defaultdict,
    EXT_DELTA_SNAPSHOT: _dec_wrapper(DeltaSnapshot, "DeltaSnapshot"),
    EXT_OVERWRITE: _dec_wrapper(Overwrite, "Overwrite"),
}
