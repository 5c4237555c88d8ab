"""Class records: how objects named by their class are stored and read back.

A record is a tagged array `[marker, module, qualname, ...]` (see `value_types` for the
codes). Encoding is permissive and notes every class it writes in the process registry;
decoding asks the serializer's `ClassPolicy` for the class and builds the object with
`rebuild` (no code of the class runs). Exceptions never fail a load over their class: a
`StoredException` stands in; a subclass of a builtin type whose class is not allowed
loads as the builtin value it holds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import _FIELD  # type: ignore[attr-defined]
from enum import Enum
from functools import partial
from typing import Any, Final

from checkpointer.errors import (
    DeserializationError,
    SerializationError,
    StoredException,
    TypeNotAllowedError,
)
from checkpointer.serde.classes import (
    ClassPolicy,
    defines,
    note_dumped,
    pydantic_base,
    pydantic_v1_base,
)
from checkpointer.serde.rebuild import (
    CannotRebuild,
    build_builtin_subclass,
    build_dataclass,
    build_enum,
    build_exception,
    build_named_tuple,
    build_pydantic,
    build_pydantic_v1,
    has_python_init,
)
from checkpointer.serde.value_types import (
    EXT_DATACLASS,
    EXT_ENUM,
    EXT_EXCEPTION,
    EXT_NAMEDTUPLE,
    EXT_PYDANTIC,
    EXT_PYDANTIC_V1,
    EXT_SUBCLASS,
    EXT_TYPE,
    MARK,
    PLAIN_CLASSES,
    SUBCLASS_BASES,
    expect_list,
    malformed,
    qualified,
    str_dict,
    str_set,
)

_SUBCLASS_BASE_SET: Final = frozenset(SUBCLASS_BASES.values())
_AS_BASE: Final[dict[type, Callable[[Any], Any]]] = {
    str: str.__str__,
    int: int.__int__,
    float: float.__float__,
    bytes: bytes.__bytes__,
    bytearray: lambda o: bytes(memoryview(o)),
    list: lambda o: list(list.__iter__(o)),
    dict: lambda o: dict(dict.items(o)),
    tuple: lambda o: tuple(tuple.__iter__(o)),
    set: lambda o: set(set.__iter__(o)),
    frozenset: lambda o: frozenset(frozenset.__iter__(o)),
}
"""The builtin value inside an instance of a subclass, read with the base type's own C
methods (a subclass's `__str__` or `__iter__` could change what is stored)."""


Encoder = Callable[[Any], Any]


def encoder_for(cls: type, encodable: Callable[[Any], bool]) -> Encoder:
    """How to write objects of `cls` as records, decided once per class (the serializer
    caches it): the checks below depend on the class only. `encodable(value)` says whether
    an exception attribute can be kept. The class is noted (`note_dumped`): writing a
    class into state is trusting it, so this process reads it back. Unsupported classes
    raise SerializationError naming them."""
    module, qualname = cls.__module__, cls.__qualname__
    mro = cls.__mro__
    if Enum in mro:
        note_dumped(cls)
        mark = MARK[EXT_ENUM]
        return lambda o: [mark, module, qualname, o.value]
    if type in mro:
        return _encode_class_object
    base = pydantic_base()
    if base is not None and base in mro:
        note_dumped(cls)
        return partial(_encode_pydantic, [MARK[EXT_PYDANTIC], module, qualname])
    if defines(cls, "__dataclass_fields__"):
        note_dumped(cls)
        return partial(_encode_dataclass, [MARK[EXT_DATACLASS], module, qualname], _fields(cls))
    if tuple in mro and defines(cls, "_fields") and defines(cls, "_make"):
        note_dumped(cls)
        mark = MARK[EXT_NAMEDTUPLE]
        return lambda o: [mark, module, qualname, list(o)]
    if BaseException in mro:
        return partial(encode_exception, encodable=encodable)
    base = pydantic_v1_base()
    if base is not None and base in mro:
        note_dumped(cls)
        mark = MARK[EXT_PYDANTIC_V1]
        return lambda o: [
            mark,
            module,
            qualname,
            dict(o.__dict__),
            sorted(getattr(o, "__fields_set__", ())),
        ]
    for klass in mro:
        if klass in _SUBCLASS_BASE_SET:
            note_dumped(cls)
            return partial(_encode_builtin_subclass, klass)
    raise SerializationError(
        f"cannot serialize object of type {qualified(cls)}: no msgpack representation "
        "(supported: builtin containers and scalars and their subclasses, datetime "
        "types, UUID, Decimal, paths, enums, dataclasses, pydantic models, named tuples, "
        "exceptions; other types need serializer.register_codec(...))"
    )


def _encode_pydantic(head: list[Any], obj: Any) -> list[Any]:
    values = dict(obj.__dict__)
    extra = getattr(obj, "__pydantic_extra__", None)
    if extra:
        values.update(extra)
    return [*head, values, sorted(getattr(obj, "__pydantic_fields_set__", ()))]


def _encode_dataclass(head: list[Any], names: tuple[str, ...], obj: Any) -> list[Any]:
    values = {}
    for name in names:
        try:
            values[name] = getattr(obj, name)
        except AttributeError:  # an init=False field never set: nothing to keep
            continue
    return [*head, values]


def encode_exception(exc: BaseException, encodable: Callable[[Any], bool]) -> list[Any]:
    """Class, args and attributes of an exception, for a rebuild that runs none of its
    Python code (see `rebuild.build_exception`).

    `args` are what the C constructors of the class take when it has no `__init__` in
    Python (its `__reduce__` args: `OSError` keeps its filename there), else the instance's
    own `args`, which a rebuild without `__init__` sets as they are. Attributes are the
    instance dict plus what `__reduce__` adds (`ImportError.name`); those that can't be
    encoded (a live connection on an HTTP error, say) are left out rather than making the
    whole error unstorable; args must encode. Tracebacks and chained causes are not kept.
    For classes outside builtins, `repr()` is kept too, for the stand-in a reader gets if
    it cannot rebuild the class. A stand-in is stored as the exception it stands for.
    """
    if type(exc) is StoredException:
        record = [MARK[EXT_EXCEPTION], exc.module, exc.qualname, list(exc.args), exc.state]
        return record if exc.text is None else [*record, exc.text]
    cls = type(exc)
    note_dumped(cls)
    args: tuple[Any, ...] = exc.args
    state: dict[Any, Any] = {}
    own = getattr(exc, "__dict__", None)
    if isinstance(own, dict):
        state.update(own)
    try:
        reduced = exc.__reduce__()
    except Exception:
        reduced = None
    if (
        isinstance(reduced, tuple)
        and len(reduced) >= 2
        and reduced[0] is cls
        and isinstance(reduced[1], tuple)
    ):
        if len(reduced) > 2 and isinstance(reduced[2], dict):
            state.update(reduced[2])
        if not has_python_init(cls):
            args = reduced[1]
    kept = {k: v for k, v in state.items() if isinstance(k, str) and encodable(v)}
    record = [MARK[EXT_EXCEPTION], cls.__module__, cls.__qualname__, list(args), kept]
    if cls.__module__ != "builtins":
        try:
            text = repr(exc)
        except Exception:
            text = None
        if isinstance(text, str):
            record.append(text)
    return record


# ---------------------------------------------------------------------- decoding


def decode_class_ref(policy: ClassPolicy, code: int, args: list[Any]) -> Any:
    """The object a class record stores (the array after its marker)."""
    if len(args) < 2:
        raise malformed("class reference")
    module, qualname = args[0], args[1]
    rest = args[2:]
    if code == EXT_EXCEPTION:
        return _decode_exception(policy, module, qualname, rest)
    if code == EXT_SUBCLASS:
        return _decode_builtin_subclass(policy, module, qualname, rest)
    cls, plan = policy.resolve(code, module, qualname)  # allowed and kind-checked
    try:
        if code == EXT_TYPE:
            expect_list(rest, 0, "class")
            return cls
        if code == EXT_ENUM:
            (value,) = expect_list(rest, 1, "enum")
            return build_enum(cls, value)
        if code == EXT_NAMEDTUPLE:
            (items,) = expect_list(rest, 1, "named tuple")
            if type(items) is not list:
                raise malformed("named tuple")
            return build_named_tuple(cls, items)
        if code == EXT_DATACLASS:
            (values,) = expect_list(rest, 1, "dataclass")
            return build_dataclass(cls, plan, str_dict(values, "dataclass"))
        values, fields_set = expect_list(rest, 2, "pydantic")
        values = str_dict(values, "pydantic")
        if code == EXT_PYDANTIC:
            return build_pydantic(cls, values, str_set(fields_set))
        return build_pydantic_v1(cls, values, str_set(fields_set))
    except CannotRebuild as exc:
        raise DeserializationError(f"cannot load {module}.{qualname}: {exc}") from None


def _decode_exception(policy: ClassPolicy, module: Any, qualname: Any, rest: list[Any]) -> Any:
    """The stored exception, or a `StoredException` standing in for it when its class
    is not allowed, not loaded, or cannot be made without its own code."""
    if len(rest) not in (2, 3) or type(rest[0]) is not list:
        raise malformed("exception")
    args, state = rest[0], str_dict(rest[1], "exception")
    text = rest[2] if len(rest) == 3 else None
    if text is not None and type(text) is not str:
        raise malformed("exception")
    try:
        cls, _ = policy.resolve(EXT_EXCEPTION, module, qualname)
        return build_exception(cls, args, state)
    except (TypeNotAllowedError, CannotRebuild):
        return StoredException(module, qualname, tuple(args), state, text)


def _decode_builtin_subclass(
    policy: ClassPolicy, module: Any, qualname: Any, rest: list[Any]
) -> Any:
    """An instance of the stored subclass where its class loads; else the builtin value
    itself (a `str` for a `str` subclass), which holds all of the stored data."""
    if len(rest) not in (2, 3) or type(rest[0]) is not str:
        raise malformed("builtin subclass")
    base = SUBCLASS_BASES.get(rest[0])
    value = rest[1]
    if base is bytearray and type(value) is bytes:
        value = bytearray(value)
    state = str_dict(rest[2], "builtin subclass") if len(rest) == 3 else {}
    if base is None or type(value) is not base:
        raise malformed("builtin subclass")
    try:
        cls, _ = policy.resolve(EXT_SUBCLASS, module, qualname)
    except TypeNotAllowedError:
        return value
    if base not in cls.__mro__:
        raise DeserializationError(
            f"stored data names {module}.{qualname} as a subclass of {base.__name__}, "
            "but it is not one"
        )
    try:
        return build_builtin_subclass(cls, base, value, state)
    except CannotRebuild:
        return value


def _fields(cls: type) -> tuple[str, ...]:
    fields = cls.__dataclass_fields__  # type: ignore[attr-defined]
    return tuple(f.name for f in fields.values() if f._field_type is _FIELD)


def _encode_class_object(cls: type) -> list[Any]:
    if cls not in PLAIN_CLASSES:
        raise SerializationError(
            f"cannot serialize the class {qualified(cls)} itself: stored data may hold only "
            "builtin types (int, str, list, dict, ...) as class objects, since loading never "
            "uses a class object from stored bytes; store its name instead"
        )
    return [MARK[EXT_TYPE], cls.__module__, cls.__qualname__]


def _encode_builtin_subclass(base: type, obj: Any) -> list[Any]:
    """A subclass of a builtin type (langchain-core's `TextAccessor(str)`, numpy's
    `float64`): its class, the builtin value, and its attributes if it has any."""
    cls = type(obj)
    record = [MARK[EXT_SUBCLASS], cls.__module__, cls.__qualname__, base.__name__]
    record.append(_AS_BASE[base](obj))
    try:
        state = object.__getattribute__(obj, "__dict__")
    except AttributeError:
        state = None
    if state:
        record.append(dict(state))
    return record
