"""The default serializer: msgpack with typed extensions and a load-time allowlist.

Plain data (dicts, lists, str, int, float, bool, None, bytes) is packed and unpacked by
msgpack's C code; Python is only called back once per list on load. Everything else reaches
`_default`, which turns it into a *tagged array*: a msgpack array whose first element is an
empty extension ("marker") whose code says what the rest of the array is. A `list_hook`
rebuilds tagged arrays bottom-up while msgpack decodes. The whole value is encoded in one
packer pass and decoded in one unpacker pass, so deep nesting (a tuple inside a dataclass
inside a set...) never recurses through nested msgpack calls, which would overflow the C
stack on hostile input. Opaque leaves (big ints, UUID, Decimal) are plain extensions holding
raw bytes.

Safety: dumping is permissive (any dataclass, enum, pydantic model, named tuple or exception
can be written), loading is strict. A class named in stored data is only used if it is one of
our built-in types, explicitly registered, in an allowlisted module, or a builtin exception.
The allowlist is checked before anything is imported, and the resolved object must be a class
of the expected kind, so stored bytes can never make us call an arbitrary function.

Speed: when ormsgpack is installed (it comes with LangGraph), values of 1 KB or more shaped
like records (maps, arrays of maps) are first handed to it: without extensions it reads them
1.3-1.6 times as fast. `_load_plain` says why what it returns is always what msgpack-python
would have returned. Encoding always uses msgpack-python: `ormsgpack.packb` would be about
twice as fast, but it writes its own `Ext` and `Fragment` objects verbatim wherever they sit
in a value, where we refuse them (or use a codec), and no cheap check can rule them out.
"""

from __future__ import annotations

import builtins
import dataclasses
import importlib
import re
import sys
import threading
from collections import Counter, OrderedDict, defaultdict, deque
from collections.abc import Callable, Iterable
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from enum import Enum
from functools import partial
from itertools import islice
from pathlib import PosixPath, PurePosixPath, PureWindowsPath, WindowsPath
from typing import Any, Final, NamedTuple, TypeVar
from uuid import UUID
from zoneinfo import ZoneInfo

import msgpack
from msgpack import ExtType

from checkpointer import errors as _errors
from checkpointer.channels.markers import MISSING, DeltaSnapshot, Overwrite
from checkpointer.errors import DeserializationError, SerializationError, UnregisteredTypeError

_plain_unpackb: Callable[[bytes], Any] | None
try:
    import ormsgpack
except ImportError:  # optional: msgpack-python alone reads everything
    _plain_unpackb = None
else:
    _plain_unpackb = ormsgpack.unpackb

__all__ = [
    "Codec",
    "MsgpackSerializer",
    "default_serializer",
    "register_codec",
]

T = TypeVar("T")
C = TypeVar("C", bound=type)

# Extension codes. Stored data depends on these numbers: never renumber, only add.
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
EXT_DELTA_SNAPSHOT: Final = 48
EXT_OVERWRITE: Final = 49
EXT_MISSING: Final = 50
EXT_CODEC: Final = 64

# Tags of the (tag, bytes) pair.
TAG_NULL: Final = "null"
TAG_BYTES: Final = "bytes"
TAG_MSGPACK: Final = "msgpack"

_PATH_TYPES: Final[dict[str, type]] = {
    "PurePosixPath": PurePosixPath,
    "PosixPath": PosixPath,
    "PureWindowsPath": PureWindowsPath,
    "WindowsPath": WindowsPath,
}

_DOTTED: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*\Z")

# Class kinds a stored class reference can claim to be; each is checked after resolving.
_KIND_BY_EXT: Final[dict[int, str]] = {
    EXT_ENUM: "enum",
    EXT_DATACLASS: "dataclass",
    EXT_PYDANTIC: "pydantic model",
    EXT_PYDANTIC_V1: "pydantic v1 model",
    EXT_NAMEDTUPLE: "named tuple",
    EXT_EXCEPTION: "exception",
    EXT_TYPE: "class",
}


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _class_key(cls: type) -> tuple[str, str]:
    return (cls.__module__, cls.__qualname__)


def _default_allowed() -> dict[tuple[str, str], type]:
    """Classes every serializer may load by reference without being told.

    Builtin exceptions (so errors round trip as themselves), this library's own errors, and
    plain builtin/stdlib value types that may appear as class references (e.g. the factory of
    a `defaultdict`). None of these run user code when constructed.
    """
    allowed: dict[tuple[str, str], type] = {}
    for value in vars(builtins).values():
        if isinstance(value, type) and issubclass(value, BaseException):
            allowed[_class_key(value)] = value
    for value in vars(_errors).values():
        if isinstance(value, type) and issubclass(value, BaseException):
            allowed[_class_key(value)] = value
    plain: tuple[type, ...] = (
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
        *_PATH_TYPES.values(),
    )
    for cls in plain:
        allowed[_class_key(cls)] = cls
    return allowed


_DEFAULT_ALLOWED: Final = _default_allowed()


class Codec(NamedTuple):
    """How to store a foreign type: `encode(obj)` returns any msgpack-able payload (our
    extensions included) and `decode(payload)` rebuilds the object. Registering a codec is
    trusting it, so its type is loadable without any allowlist."""

    name: str
    cls: type
    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]
    include_subclasses: bool = False


_GLOBAL_CODECS_BY_NAME: dict[str, Codec] = {}
_GLOBAL_CODECS_BY_TYPE: dict[type, Codec] = {}


def _add_codec(by_name: dict[str, Codec], by_type: dict[type, Codec], codec: Codec) -> None:
    if not isinstance(codec.name, str) or not codec.name:
        raise ValueError("a codec needs a non-empty string name")
    if not isinstance(codec.cls, type):
        raise TypeError(f"codec {codec.name!r}: cls must be a class, got {codec.cls!r}")
    old = by_name.get(codec.name)
    if old is not None and by_type.get(old.cls) is old:
        del by_type[old.cls]
    by_name[codec.name] = codec
    by_type[codec.cls] = codec


def register_codec(
    name: str,
    cls: type[T],
    encode: Callable[[T], Any],
    decode: Callable[[Any], T],
    *,
    include_subclasses: bool = False,
) -> None:
    """Teach every `MsgpackSerializer` (existing and future) to store `cls` under `name`.

    Meant for adapters (e.g. the LangGraph one) that own a family of foreign types. `name`
    is what is stored, so keep it stable. A codec registered on one serializer instance wins
    over a global one of the same name or type.
    """
    _add_codec(
        _GLOBAL_CODECS_BY_NAME,
        _GLOBAL_CODECS_BY_TYPE,
        Codec(name, cls, encode, decode, include_subclasses),
    )


def _pydantic_base() -> type | None:
    """pydantic's BaseModel if pydantic is loaded; an object can't be a model otherwise."""
    mod = sys.modules.get("pydantic")
    base = getattr(mod, "BaseModel", None)
    return base if isinstance(base, type) else None


def _pydantic_v1_base() -> type | None:
    mod = sys.modules.get("pydantic.v1")
    base = getattr(mod, "BaseModel", None)
    return base if isinstance(base, type) else None


def _is_kind(kind: str, cls: type) -> bool:
    """Whether `cls` really is what the stored reference said; stops type confusion."""
    if kind == "enum":
        return issubclass(cls, Enum)
    if kind == "dataclass":
        return dataclasses.is_dataclass(cls)
    if kind == "pydantic model":
        base = _pydantic_base()
        return base is not None and issubclass(cls, base)
    if kind == "pydantic v1 model":
        base = _pydantic_v1_base()
        return base is not None and issubclass(cls, base)
    if kind == "named tuple":
        return issubclass(cls, tuple) and hasattr(cls, "_fields") and hasattr(cls, "_make")
    if kind == "exception":
        return issubclass(cls, BaseException)
    return kind == "class"


class MsgpackSerializer:
    """msgpack serializer with lossless round trips and strict class loading.

    Types loadable by reference (enums, dataclasses, pydantic models, named tuples,
    exceptions, class objects) must be registered (`register`, `allowed_types=`) or live in
    an allowlisted module (`allow_module`, `allowed_modules=`; a package covers its
    submodules). Builtin exceptions and this library's errors are always allowed.
    """

    binds_location = False
    """Values are not bound to where they are stored (see `located.is_located`). Said
    explicitly because savers ask on every call, and a missing attribute is slow to ask."""

    stores_scalars_inline = True
    """SQL savers may keep small scalars in checkpoint records: their msgpack form is
    plain, so the record holds the same information (see `savers/sql/inline.py`)."""

    def __init__(
        self,
        *,
        allowed_types: Iterable[type] = (),
        allowed_modules: Iterable[str] = (),
        codecs: Iterable[Codec] = (),
    ) -> None:
        self._types: dict[tuple[str, str], type] = {}
        self._modules: set[str] = set()
        self._resolved: dict[tuple[str, str], type] = {}
        self._codecs_by_name: dict[str, Codec] = {}
        self._codecs_by_type: dict[type, Codec] = {}
        for cls in allowed_types:
            self.register(cls)
        for module in allowed_modules:
            self.allow_module(module)
        for codec in codecs:
            _add_codec(self._codecs_by_name, self._codecs_by_type, codec)
        # Bound once: called for every dump. msgpack's fast path for str only works with
        # the default (strict) error handler; the few strings holding lone surrogates make
        # the whole value go through the surrogatepass packer instead (`_pack_any`).
        options: dict[str, Any] = {
            "default": self._default,
            "strict_types": True,
            "use_bin_type": True,
            "datetime": False,
        }
        self._pack_options = options
        self._pack_new: Callable[[Any], bytes] = partial(msgpack.packb, **options)
        self._pack_surrogates: Callable[[Any], bytes] = partial(
            msgpack.packb, unicode_errors="surrogatepass", **options
        )
        self._packers = _PackerSlot()

    # ----------------------------------------------------------------- configuration

    def register(self, cls: C) -> C:
        """Allow loading `cls` by reference. Returns `cls`, so it works as a decorator."""
        if not isinstance(cls, type):
            raise TypeError(f"register() takes a class, got {cls!r}")
        self._types[_class_key(cls)] = cls
        return cls

    def allow_module(self, module: str) -> None:
        """Allow loading any class of the right kind from `module` or its submodules."""
        if not isinstance(module, str) or not _DOTTED.match(module):
            raise ValueError(f"not a module name: {module!r}")
        self._modules.add(module)

    def register_codec(
        self,
        name: str,
        cls: type[T],
        encode: Callable[[T], Any],
        decode: Callable[[Any], T],
        *,
        include_subclasses: bool = False,
    ) -> None:
        """Store `cls` through `encode`/`decode` under `name`, for this serializer only."""
        _add_codec(
            self._codecs_by_name,
            self._codecs_by_type,
            Codec(name, cls, encode, decode, include_subclasses),
        )

    def __copy__(self) -> MsgpackSerializer:
        return self._copy()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_packers"]  # per-thread Packers bound to this instance: never shared
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._packers = _PackerSlot()

    def _copy(self) -> MsgpackSerializer:
        new = MsgpackSerializer(
            allowed_types=self._types.values(),
            allowed_modules=self._modules,
            codecs=self._codecs_by_name.values(),
        )
        return new

    def with_types(self, *classes: type) -> MsgpackSerializer:
        """A new serializer with this one's settings plus `classes` allowed."""
        new = self._copy()
        for cls in classes:
            new.register(cls)
        return new

    def with_modules(self, *modules: str) -> MsgpackSerializer:
        """A new serializer with this one's settings plus `modules` allowlisted."""
        new = self._copy()
        for module in modules:
            new.allow_module(module)
        return new

    @property
    def allowed_types(self) -> frozenset[type]:
        return frozenset(self._types.values())

    @property
    def allowed_modules(self) -> frozenset[str]:
        return frozenset(self._modules)

    def __repr__(self) -> str:
        return (
            f"MsgpackSerializer(allowed_types={sorted(map(_qualified, self._types.values()))},"
            f" allowed_modules={sorted(self._modules)})"
        )

    # ------------------------------------------------------------------- public API

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        """Encode `obj` as `(tag, bytes)`; `SerializationError` names what could not be."""
        if obj is None:
            return TAG_NULL, b""
        if type(obj) is bytes:
            return TAG_BYTES, obj
        if type(obj) is bytearray:
            # msgpack's C packer writes every bytearray as plain bin without asking `default`,
            # so only a top-level one can keep its type; nested ones load as bytes.
            return TAG_MSGPACK, self._pack(ExtType(EXT_BYTEARRAY, bytes(obj)))
        # `_pack` inlined for the common case (this thread's Packer is free): a put dumps
        # a handful of small values, where two extra calls per value show.
        slot = self._packers
        packer = slot.packer
        if packer is not None and not slot.busy:
            slot.busy = True
            try:
                return TAG_MSGPACK, packer.pack(obj)
            except Exception:
                pass  # the Packer has reset itself; `_pack` below says what went wrong
            finally:
                slot.busy = False
        try:
            return TAG_MSGPACK, self._pack(obj)
        except SerializationError:
            raise
        except RecursionError as exc:
            raise SerializationError(
                f"cannot serialize {_qualified(type(obj))}: nested too deeply or recursive"
            ) from exc
        except Exception as exc:
            raise SerializationError(f"cannot serialize {_qualified(type(obj))}: {exc}") from exc

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        """Decode a `(tag, bytes)` pair; any bad input raises `DeserializationError`."""
        if not isinstance(data, tuple | list) or len(data) != 2:
            raise DeserializationError(f"expected a (tag, bytes) pair, got {type(data).__name__}")
        tag, raw = data
        if isinstance(tag, str) and tag.endswith("+zstd"):
            # Written by CompressingSerializer: readable whatever this serializer's settings.
            from checkpointer.serde.compression import decompress_typed

            tag, raw = decompress_typed((tag, raw))
        if not isinstance(raw, bytes | bytearray | memoryview):
            raise DeserializationError(f"expected bytes for tag {tag!r}, got {type(raw).__name__}")
        if tag == TAG_MSGPACK:
            # ormsgpack reads any buffer, msgpack-python only byte ones.
            if type(raw) is bytes and len(raw) >= _PLAIN_MIN_SIZE:
                value = _load_plain(raw)
                if value is not _NOT_PLAIN:
                    return value
            decoding = _Decoding(self)
            try:
                value = msgpack.unpackb(
                    raw,
                    ext_hook=decoding.ext_hook,
                    list_hook=decoding.list_hook,
                    strict_map_key=False,
                    unicode_errors="surrogatepass",
                )
            except DeserializationError:
                raise
            except Exception as exc:
                raise DeserializationError(
                    f"corrupt msgpack data: {type(exc).__name__}: {exc}"
                ) from exc
            if decoding.open_markers:
                raise DeserializationError("corrupt msgpack data: misplaced extension marker")
            return value
        if tag == TAG_BYTES:
            return bytes(raw)
        if tag == TAG_NULL:
            if len(raw):
                raise DeserializationError("a 'null' value must have empty bytes")
            return None
        raise DeserializationError(f"unknown serialization tag {tag!r}")

    def fast_loader(self) -> Callable[[tuple[str, bytes]], Any]:
        """`loads_typed` for a batch of values read together (a thread's history, a page
        of checkpoints): one set of hooks for the whole batch instead of one per value.

        Any failure raises; the caller retries that value through `loads_typed` for the
        precise error. Other tags (bytes, null, compressed) take the ordinary path.
        """
        decoding = _Decoding(self)
        ext_hook, list_hook = decoding.ext_hook, decoding.list_hook
        unpackb, slow = msgpack.unpackb, self.loads_typed

        def load(data: tuple[str, bytes]) -> Any:
            tag, raw = data
            if tag != TAG_MSGPACK or type(raw) is not bytes:
                if tag == TAG_NULL and raw == b"":  # a None value (often a channel's)
                    return None
                return slow(data)
            if len(raw) >= _PLAIN_MIN_SIZE:
                value = _load_plain(raw)
                if value is not _NOT_PLAIN:
                    return value
            value = unpackb(
                raw,
                ext_hook=ext_hook,
                list_hook=list_hook,
                strict_map_key=False,
                unicode_errors="surrogatepass",
            )
            if decoding.open_markers:
                decoding.open_markers = 0
                raise DeserializationError("corrupt msgpack data: misplaced extension marker")
            return value

        return load

    # ---------------------------------------------------------------------- encoding

    def _default(self, obj: Any) -> Any:
        """Called by msgpack for everything it can't pack natively."""
        encoder = _EXACT_ENCODERS.get(type(obj))
        if encoder is not None:
            return encoder(obj)
        return self._encode_other(obj)

    def _find_codec(self, cls: type) -> Codec | None:
        codec = self._codecs_by_type.get(cls) or _GLOBAL_CODECS_BY_TYPE.get(cls)
        if codec is not None:
            return codec
        for base in cls.__mro__[1:]:
            codec = self._codecs_by_type.get(base) or _GLOBAL_CODECS_BY_TYPE.get(base)
            if codec is not None and codec.include_subclasses:
                return codec
        return None

    def _encode_other(self, obj: Any) -> list[Any]:
        cls = type(obj)
        codec = self._find_codec(cls)
        if codec is not None:
            return [_MARK[EXT_CODEC], codec.name, codec.encode(obj)]
        if isinstance(obj, Enum):
            return [_MARK[EXT_ENUM], cls.__module__, cls.__qualname__, obj.value]
        if isinstance(obj, type):
            return [_MARK[EXT_TYPE], obj.__module__, obj.__qualname__]
        base = _pydantic_base()
        if base is not None and isinstance(obj, base):
            values = dict(obj.__dict__)
            extra = getattr(obj, "__pydantic_extra__", None)
            if extra:
                values.update(extra)
            fields_set = sorted(getattr(obj, "model_fields_set", ()))
            return [_MARK[EXT_PYDANTIC], cls.__module__, cls.__qualname__, values, fields_set]
        if dataclasses.is_dataclass(obj):
            values = {}
            for field in dataclasses.fields(obj):
                try:
                    values[field.name] = getattr(obj, field.name)
                except AttributeError:  # an init=False field never set: nothing to keep
                    continue
            return [_MARK[EXT_DATACLASS], cls.__module__, cls.__qualname__, values]
        if isinstance(obj, tuple) and hasattr(cls, "_fields") and hasattr(cls, "_make"):
            return [_MARK[EXT_NAMEDTUPLE], cls.__module__, cls.__qualname__, list(obj)]
        if isinstance(obj, BaseException):
            return self._encode_exception(obj)
        base = _pydantic_v1_base()
        if base is not None and isinstance(obj, base):
            fields_set = sorted(getattr(obj, "__fields_set__", ()))
            return [
                _MARK[EXT_PYDANTIC_V1],
                cls.__module__,
                cls.__qualname__,
                dict(obj.__dict__),
                fields_set,
            ]
        raise SerializationError(
            f"cannot serialize object of type {_qualified(cls)}: no msgpack representation "
            "(supported: builtin containers and scalars, datetime types, UUID, Decimal, paths, "
            "enums, dataclasses, pydantic models, named tuples, exceptions; "
            "other types need serializer.register_codec(...))"
        )

    def _pack(self, obj: Any) -> bytes:
        try:
            return self._pack_fast(obj)
        except UnicodeEncodeError:
            return self._pack_surrogates(obj)

    def _pack_fast(self, obj: Any) -> bytes:
        """Pack with this thread's reusable Packer (building one per call costs more than
        packing a small value). A nested dump from inside `_default` gets a fresh one."""
        slot = self._packers
        if slot.busy:
            return self._pack_new(obj)
        packer = slot.packer
        if packer is None:
            packer = slot.packer = msgpack.Packer(**self._pack_options)
        slot.busy = True
        try:
            return packer.pack(obj)
        finally:
            slot.busy = False

    def _encodable(self, value: Any) -> bool:
        try:
            self._pack(value)
        except Exception:
            return False
        return True

    def _encode_exception(self, exc: BaseException) -> list[Any]:
        """Class, args and attributes, the way pickle sees an exception.

        Attributes that can't be encoded (a live connection on an HTTP error, say) are left
        out rather than making the whole error unstorable; args must encode. Tracebacks and
        chained causes are not kept.
        """
        cls = type(exc)
        args: tuple[Any, ...] = exc.args
        state: Any = getattr(exc, "__dict__", None)
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
            args = reduced[1]
            state = reduced[2] if len(reduced) > 2 else None
        kept = {}
        if isinstance(state, dict):
            kept = {k: v for k, v in state.items() if isinstance(k, str) and self._encodable(v)}
        return [_MARK[EXT_EXCEPTION], cls.__module__, cls.__qualname__, list(args), kept]

    # ---------------------------------------------------------------------- decoding

    def _module_allowed(self, module: str) -> bool:
        return any(module == m or module.startswith(m + ".") for m in self._modules)

    def _resolve(self, module: Any, qualname: Any, kind: str) -> type:
        """The class a stored reference names, if (and only if) loading it is allowed.

        The allowlist is consulted before any import, and the result must be a class of the
        claimed kind: an allowlisted module's functions are never reachable.
        """
        if not isinstance(module, str) or not isinstance(qualname, str):
            raise DeserializationError("malformed class reference")
        key = (module, qualname)
        # Explicit `is None` checks: a class can be falsy (an empty Enum has len() == 0).
        cls = self._types.get(key)
        if cls is None:
            cls = _DEFAULT_ALLOWED.get(key)
        if cls is None:
            cls = self._resolved.get(key)
        if cls is None:
            if not self._module_allowed(module):
                raise UnregisteredTypeError(
                    f"refusing to load {kind} {module}.{qualname}: it is not registered or "
                    f"allowlisted. Register it with serializer.register({module}.{qualname}) "
                    f"or allow its module with serializer.with_modules({module!r}) / "
                    f"MsgpackSerializer(allowed_modules=[{module!r}])"
                )
            cls = self._import(module, qualname)
            self._resolved[key] = cls
        if not _is_kind(kind, cls):
            raise DeserializationError(
                f"stored data names {module}.{qualname} as a {kind}, but it is not one"
            )
        return cls

    @staticmethod
    def _import(module: str, qualname: str) -> type:
        if "<locals>" in qualname:
            raise UnregisteredTypeError(
                f"refusing to load {module}.{qualname}: a class defined inside a function can "
                "only be loaded after serializer.register(cls)"
            )
        if not _DOTTED.match(module) or not _DOTTED.match(qualname):
            raise DeserializationError(f"cannot resolve {module}.{qualname}: not a valid path")
        try:
            target: Any = importlib.import_module(module)
        except Exception as exc:
            raise DeserializationError(
                f"cannot import allowlisted module {module!r} for {module}.{qualname}: {exc}"
            ) from exc
        for part in qualname.split("."):
            target = getattr(target, part, None)
            if target is None:
                break
        if not isinstance(target, type):
            raise DeserializationError(f"{module}.{qualname} is not a class")
        return target

    def _decode_codec(self, args: list[Any]) -> Any:
        name, payload = _expect_list(args, 2, "codec")
        codec = None
        if isinstance(name, str):
            codec = self._codecs_by_name.get(name) or _GLOBAL_CODECS_BY_NAME.get(name)
        if codec is None:
            raise UnregisteredTypeError(
                f"stored data uses codec {name!r}, but no codec of that name is registered "
                "(register it with serializer.register_codec(...) or import the adapter that "
                "provides it)"
            )
        return codec.decode(payload)

    def _decode_class_ref(self, code: int, args: list[Any]) -> Any:
        if len(args) < 2:
            raise _malformed("class reference")
        cls: Any = self._resolve(args[0], args[1], _KIND_BY_EXT[code])  # kind-checked
        rest = args[2:]
        if code == EXT_TYPE:
            _expect_list(rest, 0, "class")
            return cls
        if code == EXT_ENUM:
            (value,) = _expect_list(rest, 1, "enum")
            return cls(value)
        if code == EXT_NAMEDTUPLE:
            (items,) = _expect_list(rest, 1, "named tuple")
            if type(items) is not list:
                raise _malformed("named tuple")
            return cls._make(items)
        if code == EXT_DATACLASS:
            (values,) = _expect_list(rest, 1, "dataclass")
            return _build_dataclass(cls, _str_dict(values, "dataclass"))
        if code == EXT_PYDANTIC:
            values, fields_set = _expect_list(rest, 2, "pydantic")
            values = _str_dict(values, "pydantic")
            return cls.model_construct(_fields_set=_str_set(fields_set), **values)
        if code == EXT_PYDANTIC_V1:
            values, fields_set = _expect_list(rest, 2, "pydantic v1")
            values = _str_dict(values, "pydantic v1")
            return cls.construct(_fields_set=_str_set(fields_set), **values)
        args_, state = _expect_list(rest, 2, "exception")
        return _build_exception(cls, args_, _str_dict(state, "exception"))


class _PackerSlot(threading.local):
    """One msgpack Packer per thread (Packers are not thread-safe), and whether it is in
    use (a codec may dump a nested value while the outer value is being packed)."""

    packer: Any = None
    busy: bool = False


_NOT_PLAIN: Final = object()
"""What `_load_plain` returns when the value must be decoded the usual way."""

_REUSED_SKIP_LIMIT: Final = 1 << 16
"""Values up to this size are checked with the thread's reused Unpacker, whose buffer grows
to the largest value fed to it and stays allocated; larger ones get an Unpacker of their own."""


class _SkipSlot(threading.local):
    """A msgpack Unpacker per thread, reused to skip over one object at a time, and the
    stream offset (`tell()`) at which its buffer was last empty.

    A check takes the Unpacker out of the slot and puts it back only once its buffer is
    empty again, so a check that fails, raises or is interrupted (or one nested in it) can
    never leave stale bytes for the next one to skip instead of its own."""

    def __init__(self) -> None:
        self.state: list[Any] = [None, 0]


_SKIP_SLOT: Final = _SkipSlot()


def _is_one_object(raw: bytes) -> bool:
    """Whether `raw` is exactly one msgpack object, with no bytes after it.

    ormsgpack stops after the first object and ignores the rest, where msgpack-python
    (and so our format) refuses "extra data". Skipping builds no objects: a fraction of the
    cost of decoding."""
    size = len(raw)
    state = _SKIP_SLOT.state
    unpacker = state[0]
    if unpacker is None or size > _REUSED_SKIP_LIMIT:
        unpacker = msgpack.Unpacker(max_buffer_size=max(size, _REUSED_SKIP_LIMIT))
        start = 0
    else:
        state[0] = None
        start = state[1]
    unpacker.feed(raw)
    unpacker.skip()
    end = unpacker.tell()
    if end - start != size:
        return False  # bytes left over: this Unpacker is not reused
    if size <= _REUSED_SKIP_LIMIT:
        state[0] = unpacker
        state[1] = end
    return True


_PLAIN_MIN_SIZE: Final = 1024
"""Smaller values are left to msgpack-python: below this, checking that ormsgpack's result
can be used costs about what ormsgpack saves. Checked by the callers of `_load_plain`, as
even calling it shows on small values."""

_MAP_HEADS: Final = frozenset({*range(0x80, 0x90), 0xDE, 0xDF})
_CONTAINER_HEADS: Final = _MAP_HEADS | {*range(0x90, 0xA0), 0xDC, 0xDD}


def _item_at(head: int) -> int:
    """For a value's first byte: 0 for a map, where the first item starts for a non-empty
    array (fixarray, array 16, array 32), -1 for anything else."""
    if head in _MAP_HEADS:
        return 0
    if 0x91 <= head <= 0x9F:
        return 1
    return {0xDC: 3, 0xDD: 5}.get(head, -1)


_ITEM_AT: Final = tuple(map(_item_at, range(256)))


def _worth_trying(raw: bytes) -> bool:
    """Whether ormsgpack is likely to read `raw` (non-empty) faster than msgpack-python,
    judging by its first bytes: a map, or an array of maps or arrays.

    That is where ormsgpack gains (it caches map keys and makes no Python call per array,
    where our `list_hook` does); on flat arrays of scalars, single strings and the like it is
    no faster, and the end check is a loss. An array whose first item is an extension is a
    tagged value (a tuple, a dataclass...), which ormsgpack would refuse anyway."""
    at = _ITEM_AT[raw[0]]
    return at == 0 or (at > 0 and len(raw) > at and raw[at] in _CONTAINER_HEADS)


def _load_plain(raw: bytes) -> Any:
    """`raw` decoded by ormsgpack, or `_NOT_PLAIN` if it may differ from msgpack-python's
    (or is not worth trying, see `_worth_trying`).

    Called without an `ext_hook`, ormsgpack refuses at the first extension, so everything
    our hooks would rebuild (tagged arrays, big ints, UUIDs...) takes the usual path, which
    also gives the precise errors. It refuses as well map keys that are not str, strings
    that are not strict UTF-8 (we accept lone surrogates) and nesting msgpack-python would
    still accept (a shallower limit). What it does read it reads as msgpack-python does,
    except that it ignores bytes after the object: `_is_one_object` checks for those.
    """
    unpackb = _plain_unpackb
    if unpackb is None or not raw or not _worth_trying(raw):
        return _NOT_PLAIN
    try:
        value = unpackb(raw)
        if _is_one_object(raw):
            return value
    except Exception:
        pass  # ormsgpack refused (or the check failed): the usual path decides
    return _NOT_PLAIN


class _Marker:
    """What a marker extension decodes to, only ever seen by `_Decoding.list_hook`."""

    __slots__ = ("code",)

    def __init__(self, code: int) -> None:
        self.code = code


class _Decoding:
    """Hooks for one `unpackb` call.

    Counts markers handed out and consumed as array heads: a marker anywhere else (corrupt
    or crafted data) leaves the count non-zero and the load fails instead of returning a
    `_Marker` inside the user's value.
    """

    __slots__ = ("open_markers", "serializer")

    def __init__(self, serializer: MsgpackSerializer) -> None:
        self.serializer = serializer
        self.open_markers = 0

    def ext_hook(self, code: int, data: bytes) -> Any:
        marker = _MARKERS.get(code)
        if marker is not None:
            if data:
                raise _malformed("marker")
            self.open_markers += 1
            return marker
        leaf = _LEAF_DECODERS.get(code)
        if leaf is None:
            raise DeserializationError(f"unknown msgpack extension code {code}")
        return leaf(data)

    def list_hook(self, items: list[Any]) -> Any:
        if items:
            head = items[0]
            if type(head) is _Marker:
                self.open_markers -= 1
                if head is _TUPLE_MARKER:  # by far the most common: skip the dispatch
                    return tuple(islice(items, 1, None))
                return _ARRAY_DECODERS[head.code](self.serializer, items[1:])
        return items


def _malformed(what: str) -> DeserializationError:
    return DeserializationError(f"malformed {what} extension payload")


def _expect_list(value: Any, length: int, what: str) -> list[Any]:
    if type(value) is not list or len(value) != length:
        raise _malformed(what)
    return value


def _str_dict(value: Any, what: str) -> dict[str, Any]:
    if type(value) is not dict or not all(type(k) is str for k in value):
        raise _malformed(what)
    return value


def _str_set(value: Any) -> set[str]:
    if type(value) is not list or not all(type(k) is str for k in value):
        raise _malformed("fields set")
    return set(value)


def _build_dataclass(cls: Any, values: dict[str, Any]) -> Any:
    """Through the constructor, so fields added later get their defaults and validation in
    `__post_init__` runs; stored fields the class no longer has are dropped (as pydantic
    does). `init=False` fields are restored afterwards. If the constructor refuses (a
    required InitVar, say), the fields are set directly, the way pickle would."""
    fields = dataclasses.fields(cls)
    init = {f.name: values[f.name] for f in fields if f.init and f.name in values}
    late = {f.name: values[f.name] for f in fields if not f.init and f.name in values}
    try:
        obj = cls(**init)
    except TypeError:
        obj = cls.__new__(cls)
        late = {f.name: values[f.name] for f in fields if f.name in values}
    for name, value in late.items():
        object.__setattr__(obj, name, value)
    return obj


def _build_exception(cls: type[BaseException], args: Any, state: dict[str, Any]) -> BaseException:
    """Like unpickling: call the class with its args, fall back to bypassing `__init__`
    for exceptions whose constructor takes other arguments than it passes up as `args`."""
    if type(args) is not list:
        raise _malformed("exception")
    try:
        exc = cls(*args)
    except Exception:
        exc = cls.__new__(cls, *args)
        exc.args = tuple(args)
    for name, value in state.items():
        setattr(exc, name, value)
    return exc


# --------------------------------------------------------------- exact-type encoders

# Codes of tagged arrays (the rest are raw-bytes leaf extensions).
_ARRAY_CODES: Final = (
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
    *_KIND_BY_EXT,
)
_MARK: Final[dict[int, ExtType]] = {code: ExtType(code, b"") for code in _ARRAY_CODES}
_MARKERS: Final[dict[int, _Marker]] = {code: _Marker(code) for code in _ARRAY_CODES}
_M_TUPLE: Final = _MARK[EXT_TUPLE]
_TUPLE_MARKER: Final = _MARKERS[EXT_TUPLE]
_M_SET: Final = _MARK[EXT_SET]
_M_FROZENSET: Final = _MARK[EXT_FROZENSET]


def _enc_bigint(n: int) -> ExtType:
    return ExtType(EXT_BIGINT, n.to_bytes((n.bit_length() + 8) // 8, "big", signed=True))


def _enc_datetime(d: datetime) -> list[Any]:
    return [
        _MARK[EXT_DATETIME],
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
    return [_MARK[EXT_TIME], t.hour, t.minute, t.second, t.microsecond, t.tzinfo, t.fold]


def _enc_timezone(tz: timezone) -> list[Any]:
    offset = tz.utcoffset(None)
    name: str | None = tz.tzname(None)
    if name == timezone(offset).tzname(None):
        name = None  # the default name: don't store what the offset already says
    return [_MARK[EXT_TIMEZONE], offset.days, offset.seconds, offset.microseconds, name]


def _enc_zoneinfo(tz: ZoneInfo) -> list[Any]:
    if tz.key is None:
        raise SerializationError("cannot serialize a ZoneInfo built from a file (it has no key)")
    return [_MARK[EXT_ZONEINFO], tz.key]


def _enc_path(path: Any) -> list[Any]:
    return [_MARK[EXT_PATH], type(path).__name__, str(path)]


_EXACT_ENCODERS: Final[dict[type, Callable[[Any], Any]]] = {
    int: _enc_bigint,  # only reached for ints msgpack can't hold in 64 bits
    tuple: lambda o: [_M_TUPLE, *o],
    set: lambda o: [_M_SET, *o],
    frozenset: lambda o: [_M_FROZENSET, *o],
    deque: lambda o: [_MARK[EXT_DEQUE], o.maxlen, *o],
    datetime: _enc_datetime,
    date: lambda o: [_MARK[EXT_DATE], o.year, o.month, o.day],
    time: _enc_time,
    timedelta: lambda o: [_MARK[EXT_TIMEDELTA], o.days, o.seconds, o.microseconds],
    timezone: _enc_timezone,
    ZoneInfo: _enc_zoneinfo,
    UUID: lambda o: ExtType(EXT_UUID, o.bytes),
    Decimal: lambda o: ExtType(EXT_DECIMAL, str(o).encode("ascii")),
    re.Pattern: lambda o: [_MARK[EXT_PATTERN], o.pattern, o.flags],
    complex: lambda o: [_MARK[EXT_COMPLEX], o.real, o.imag],
    OrderedDict: lambda o: [_MARK[EXT_ORDEREDDICT], dict(o)],
    Counter: lambda o: [_MARK[EXT_COUNTER], dict(o)],
    defaultdict: lambda o: [_MARK[EXT_DEFAULTDICT], o.default_factory, dict(o)],
    DeltaSnapshot: lambda o: [_MARK[EXT_DELTA_SNAPSHOT], o.value],
    Overwrite: lambda o: [_MARK[EXT_OVERWRITE], o.value],
    type(MISSING): lambda o: ExtType(EXT_MISSING, b""),
    **{cls: _enc_path for cls in _PATH_TYPES.values()},
}


# ------------------------------------------------------------------------- decoders


def _dec_bigint(data: bytes) -> int:
    if not data:
        raise _malformed("integer")
    return int.from_bytes(data, "big", signed=True)


def _dec_uuid(data: bytes) -> UUID:
    if len(data) != 16:
        raise _malformed("uuid")
    return UUID(bytes=bytes(data))


def _dec_missing(data: bytes) -> Any:
    if data:
        raise _malformed("MISSING")
    return MISSING


_LEAF_DECODERS: Final[dict[int, Callable[[bytes], Any]]] = {
    EXT_BIGINT: _dec_bigint,
    EXT_BYTEARRAY: bytearray,
    EXT_UUID: _dec_uuid,
    EXT_DECIMAL: lambda data: Decimal(bytes(data).decode("ascii")),
    EXT_MISSING: _dec_missing,
}


def _dec_deque(s: MsgpackSerializer, args: list[Any]) -> deque[Any]:
    if not args or not (args[0] is None or type(args[0]) is int):
        raise _malformed("deque")
    return deque(islice(args, 1, None), args[0])


def _dec_datetime(s: MsgpackSerializer, args: list[Any]) -> datetime:
    y, mo, d, h, mi, sec, us, tz, fold = _expect_list(args, 9, "datetime")
    return datetime(y, mo, d, h, mi, sec, us, tzinfo=tz, fold=fold)


def _dec_time(s: MsgpackSerializer, args: list[Any]) -> time:
    h, mi, sec, us, tz, fold = _expect_list(args, 6, "time")
    return time(h, mi, sec, us, tzinfo=tz, fold=fold)


def _dec_timezone(s: MsgpackSerializer, args: list[Any]) -> timezone:
    days, seconds, micros, name = _expect_list(args, 4, "timezone")
    offset = timedelta(days, seconds, micros)
    return timezone(offset) if name is None else timezone(offset, name)


def _dec_zoneinfo(s: MsgpackSerializer, args: list[Any]) -> ZoneInfo:
    (key,) = _expect_list(args, 1, "zoneinfo")
    if type(key) is not str:
        raise _malformed("zoneinfo")
    return ZoneInfo(key)


def _dec_path(s: MsgpackSerializer, args: list[Any]) -> Any:
    kind, text = _expect_list(args, 2, "path")
    cls = _PATH_TYPES.get(kind) if type(kind) is str else None
    if cls is None or type(text) is not str:
        raise _malformed("path")
    return cls(text)


def _dec_pattern(s: MsgpackSerializer, args: list[Any]) -> re.Pattern[Any]:
    pattern, flags = _expect_list(args, 2, "pattern")
    if type(pattern) not in (str, bytes) or type(flags) is not int:
        raise _malformed("pattern")
    return re.compile(pattern, flags)


def _dec_complex(s: MsgpackSerializer, args: list[Any]) -> complex:
    real, imag = _expect_list(args, 2, "complex")
    if type(real) is not float or type(imag) is not float:
        raise _malformed("complex")
    return complex(real, imag)


def _dec_mapping(factory: Callable[[dict[Any, Any]], Any], what: str) -> Any:
    def decode(s: MsgpackSerializer, args: list[Any]) -> Any:
        (value,) = _expect_list(args, 1, what)
        if type(value) is not dict:
            raise _malformed(what)
        return factory(value)

    return decode


def _dec_defaultdict(s: MsgpackSerializer, args: list[Any]) -> defaultdict[Any, Any]:
    factory, items = _expect_list(args, 2, "defaultdict")
    if type(items) is not dict or not (factory is None or callable(factory)):
        raise _malformed("defaultdict")
    return defaultdict(factory, items)


def _dec_wrapper(factory: Callable[[Any], Any], what: str) -> Any:
    def decode(s: MsgpackSerializer, args: list[Any]) -> Any:
        (value,) = _expect_list(args, 1, what)
        return factory(value)

    return decode


def _dec_class_ref(code: int) -> Callable[[MsgpackSerializer, list[Any]], Any]:
    return lambda s, args: s._decode_class_ref(code, args)


_ARRAY_DECODERS: Final[dict[int, Callable[[MsgpackSerializer, list[Any]], Any]]] = {
    EXT_TUPLE: lambda s, args: tuple(args),
    EXT_SET: lambda s, args: set(args),
    EXT_FROZENSET: lambda s, args: frozenset(args),
    EXT_DEQUE: _dec_deque,
    EXT_DATETIME: _dec_datetime,
    EXT_DATE: lambda s, args: date(*_expect_list(args, 3, "date")),
    EXT_TIME: _dec_time,
    EXT_TIMEDELTA: lambda s, args: timedelta(*_expect_list(args, 3, "timedelta")),
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
    EXT_CODEC: lambda s, args: s._decode_codec(args),
    **{code: _dec_class_ref(code) for code in _KIND_BY_EXT},
}
assert set(_ARRAY_DECODERS) == set(_ARRAY_CODES)


_DEFAULT: MsgpackSerializer | None = None


def default_serializer() -> MsgpackSerializer:
    """The shared default instance (strict: only built-in types load by reference).

    Registering on it affects every saver that uses the default; savers that want their own
    allowlist derive one with `with_types` / `with_modules`.
    """
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = MsgpackSerializer()
    return _DEFAULT
