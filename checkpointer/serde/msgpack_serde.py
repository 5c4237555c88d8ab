"""The default serializer: msgpack with typed extensions and a load-time class policy.

Plain data (dicts, lists, str, int, float, bool, None, bytes) is packed and unpacked by
msgpack's C code; Python is only called back once per list on load. Everything else reaches
`_default`, which turns it into a *tagged array*: a msgpack array whose first element is an
empty extension ("marker") whose code says what the rest of the array is (see
`value_types`). A `list_hook` rebuilds tagged arrays bottom-up while msgpack decodes. The
whole value is encoded in one packer pass and decoded in one unpacker pass, so deep nesting
(a tuple inside a dataclass inside a set...) never recurses through nested msgpack calls,
which would overflow the C stack on hostile input.

Safety: dumping is permissive (any dataclass, enum, pydantic model, named tuple, exception
or subclass of a builtin type can be written), loading is not. Stored bytes never cause an
import, never resolve a class by walking attributes and never run the class's own code:
which classes load is decided by `_resolve` with the rules of `classes`, and instances are
rebuilt by `rebuild` (no `__init__`, validators, `__post_init__` or `_missing_` hooks). A
refused class raises `TypeNotAllowedError` naming the setting that allows it; an exception
that cannot be rebuilt loads as a `StoredException` stand-in, so a task's error never makes
a thread unreadable.

Speed: plain values of 1 KB or more shaped like records are first handed to ormsgpack
(`fast_path`). Encoding always uses msgpack-python: `ormsgpack.packb` would be about twice
as fast, but it writes its own `Ext` and `Fragment` objects verbatim wherever they sit in a
value, where we refuse them (or use a codec), and no cheap check can rule them out.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from itertools import islice
from typing import Any, Final, NamedTuple, TypeVar

import msgpack
from msgpack import ExtType

from checkpointer.errors import (
    ConfigError,
    DeserializationError,
    SerializationError,
    TypeNotAllowedError,
)
from checkpointer.serde.classes import ClassPolicy
from checkpointer.serde.fast_path import (
    _NO_GC_MIN_SIZE,
    _NOT_PLAIN,
    _load_plain,
    _unpack_without_gc,
    load_plain_batch,
)
from checkpointer.serde.frames import decompress_typed, is_compressed
from checkpointer.serde.records import decode_class_ref, encoder_for
from checkpointer.serde.value_types import (  # the format's codes, re-exported
    ARRAY_CODES,
    BUILTIN_ARRAY_DECODERS,
    EXACT_ENCODERS,
    EXT_BIGINT,
    EXT_BYTEARRAY,
    EXT_CODEC,
    EXT_COMPLEX,
    EXT_COUNTER,
    EXT_DATACLASS,
    EXT_DATE,
    EXT_DATETIME,
    EXT_DECIMAL,
    EXT_DEFAULTDICT,
    EXT_DELTA_SNAPSHOT,
    EXT_DEQUE,
    EXT_ENUM,
    EXT_EXCEPTION,
    EXT_FROZENSET,
    EXT_MISSING,
    EXT_NAMEDTUPLE,
    EXT_ORDEREDDICT,
    EXT_OVERWRITE,
    EXT_PATH,
    EXT_PATTERN,
    EXT_PYDANTIC,
    EXT_PYDANTIC_V1,
    EXT_SET,
    EXT_SUBCLASS,
    EXT_TIME,
    EXT_TIMEDELTA,
    EXT_TIMEZONE,
    EXT_TUPLE,
    EXT_TYPE,
    EXT_UUID,
    EXT_ZONEINFO,
    KIND_BY_EXT,
    LEAF_DECODERS,
    MARK,
    MARKERS,
    TAG_BYTES,
    TAG_MSGPACK,
    TAG_NULL,
    TUPLE_MARKER,
    ArrayDecoder,
    Marker,
    expect_list,
    malformed,
    qualified,
)

__all__ = [
    "EXT_BIGINT",
    "EXT_BYTEARRAY",
    "EXT_CODEC",
    "EXT_COMPLEX",
    "EXT_COUNTER",
    "EXT_DATACLASS",
    "EXT_DATE",
    "EXT_DATETIME",
    "EXT_DECIMAL",
    "EXT_DEFAULTDICT",
    "EXT_DELTA_SNAPSHOT",
    "EXT_DEQUE",
    "EXT_ENUM",
    "EXT_EXCEPTION",
    "EXT_FROZENSET",
    "EXT_MISSING",
    "EXT_NAMEDTUPLE",
    "EXT_ORDEREDDICT",
    "EXT_OVERWRITE",
    "EXT_PATH",
    "EXT_PATTERN",
    "EXT_PYDANTIC",
    "EXT_PYDANTIC_V1",
    "EXT_SET",
    "EXT_SUBCLASS",
    "EXT_TIME",
    "EXT_TIMEDELTA",
    "EXT_TIMEZONE",
    "EXT_TUPLE",
    "EXT_TYPE",
    "EXT_UUID",
    "EXT_ZONEINFO",
    "TAG_BYTES",
    "TAG_MSGPACK",
    "TAG_NULL",
    "Codec",
    "MsgpackSerializer",
    "default_serializer",
    "register_codec",
]

T = TypeVar("T")
C = TypeVar("C", bound=type)

_PLAIN_MIN_SIZE: Final = 1024
"""Smaller values are left to msgpack-python: below this, checking that ormsgpack's result
can be used costs about what ormsgpack saves. Checked by the callers of `_load_plain`, as
even calling it shows on small values."""


_MAX_CACHED_ENCODERS: Final = 4096
"""Classes whose encoder a serializer keeps; past that the cache starts over."""


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
_SERIALIZERS: weakref.WeakSet[MsgpackSerializer] = weakref.WeakSet()
"""Every serializer, so that registering a global codec drops their cached encoders."""


def _encode_with_codec(codec: Codec, obj: Any) -> list[Any]:
    return [MARK[EXT_CODEC], codec.name, codec.encode(obj)]


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
    for serializer in list(_SERIALIZERS):
        serializer._encoders.clear()
    _add_codec(
        _GLOBAL_CODECS_BY_NAME,
        _GLOBAL_CODECS_BY_TYPE,
        Codec(name, cls, encode, decode, include_subclasses),
    )


class MsgpackSerializer:
    """msgpack serializer with lossless round trips and safe class loading.

    Classes that stored data names (enums, dataclasses, pydantic models, named tuples,
    exceptions, subclasses of builtin types) load when they are registered
    (`register`, `allowed_types=`), in an allowed module (`allow_module`,
    `allowed_modules=`, the `CHECKPOINTER_ALLOWED_MODULES` environment variable; a package
    covers its submodules), named by a LangGraph schema allowlist (`with_allowlist`), or,
    unless `strict=True`: written by this process, defined in the application's own loaded
    modules, or (exceptions) found loaded. Builtin exceptions and this library's errors
    always load. See `classes` for how a class is found and `rebuild` for how it is made.
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
        strict: bool = False,
    ) -> None:
        self._policy = ClassPolicy(strict=strict)
        self._codecs_by_name: dict[str, Codec] = {}
        self._codecs_by_type: dict[type, Codec] = {}
        self._encoders: dict[type, Callable[[Any], Any]] = {}
        _SERIALIZERS.add(self)
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
        self._policy.register(cls)
        return cls

    def allow_module(self, module: str) -> None:
        """Allow loading any class of the right kind from `module` or its submodules."""
        self._policy.allow_module(module)

    def allow_name(self, module: str, name: str) -> None:
        """Allow the class of `module` whose own `__name__` is `name`, the way LangGraph's
        schema allowlist names classes (a class defined in a function included: it is found
        once this process has written or registered it)."""
        self._policy.allow_name(module, name)

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
        self._encoders.clear()
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
        del state["_encoders"]  # closures, rebuilt on use
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._packers = _PackerSlot()
        self._encoders = {}
        _SERIALIZERS.add(self)

    def _copy(self) -> MsgpackSerializer:
        new = MsgpackSerializer(codecs=self._codecs_by_name.values())
        new._policy = self._policy.copy()
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

    def with_allowlist(self, entries: Iterable[tuple[str, ...]]) -> MsgpackSerializer:
        """A new serializer that also allows LangGraph-style `(module, name)` entries."""
        new = self._copy()
        for entry in entries:
            if len(entry) >= 2 and isinstance(entry[0], str) and isinstance(entry[-1], str):
                new.allow_name(entry[0], entry[-1])
        return new

    @property
    def strict(self) -> bool:
        """Whether only registered types and allowed modules load (see the class doc)."""
        return self._policy.strict

    @property
    def allowed_types(self) -> frozenset[type]:
        return frozenset(self._policy.types.values())

    @property
    def allowed_modules(self) -> frozenset[str]:
        return frozenset(self._policy.modules)

    @property
    def allowed_names(self) -> frozenset[tuple[str, str]]:
        return frozenset(self._policy.names)

    def __repr__(self) -> str:
        policy = self._policy
        return (
            f"MsgpackSerializer(allowed_types={sorted(map(qualified, policy.types.values()))},"
            f" allowed_modules={sorted(policy.modules)}"
            + (f", allowed_names={sorted(policy.names)}" if policy.names else "")
            + (", strict=True" if policy.strict else "")
            + ")"
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
        state = self._packers.state  # [packer, busy]: one thread-local lookup
        packer = state[0]
        if packer is not None and not state[1]:
            state[1] = True
            try:
                return TAG_MSGPACK, packer.pack(obj)
            except Exception:
                pass  # the Packer has reset itself; `_pack` below says what went wrong
            finally:
                state[1] = False
        try:
            return TAG_MSGPACK, self._pack(obj)
        except SerializationError:
            raise
        except RecursionError as exc:
            raise SerializationError(
                f"cannot serialize {qualified(type(obj))}: nested too deeply or recursive"
            ) from exc
        except Exception as exc:
            raise SerializationError(f"cannot serialize {qualified(type(obj))}: {exc}") from exc

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        """Decode a `(tag, bytes)` pair; any bad input raises `DeserializationError`."""
        if not isinstance(data, tuple | list) or len(data) != 2:
            raise DeserializationError(f"expected a (tag, bytes) pair, got {type(data).__name__}")
        tag, raw = data
        if is_compressed(tag):
            # Written by CompressingSerializer: readable whatever this serializer's settings.
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
                unpack = msgpack.unpackb if len(raw) < _NO_GC_MIN_SIZE else _unpackb_without_gc
                value = unpack(
                    raw,
                    ext_hook=decoding.ext_hook,
                    list_hook=decoding.list_hook,
                    strict_map_key=False,
                    unicode_errors="surrogatepass",
                )
            except (DeserializationError, ConfigError):
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

    def fast_batch_loader(self) -> Callable[[Sequence[bytes]], list[Any] | None]:
        """Decodes the payloads of many values tagged msgpack in one call, or returns None
        when any of them needs the hooks (`fast_path.load_plain_batch`); the caller then
        reads each through `fast_loader`."""
        return load_plain_batch

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
            value = (unpackb if len(raw) < _NO_GC_MIN_SIZE else _unpackb_without_gc)(
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
        cls = type(obj)
        encoder = EXACT_ENCODERS.get(cls) or self._encoders.get(cls)
        if encoder is None:
            encoder = self._encoder_for(cls)
        return encoder(obj)

    def _encoder_for(self, cls: type) -> Callable[[Any], Any]:
        """A codec's, or `records.encoder_for`: cached per class (bounded: classes made
        at run time must not pile up), dropped when a codec is registered."""
        codec = self._find_codec(cls)
        if codec is not None:
            encoder: Callable[[Any], Any] = partial(_encode_with_codec, codec)
        else:
            encoder = encoder_for(cls, self._encodable)
        if len(self._encoders) >= _MAX_CACHED_ENCODERS:
            self._encoders.clear()
        self._encoders[cls] = encoder
        return encoder

    def _find_codec(self, cls: type) -> Codec | None:
        codec = self._codecs_by_type.get(cls) or _GLOBAL_CODECS_BY_TYPE.get(cls)
        if codec is not None:
            return codec
        for base in cls.__mro__[1:]:
            codec = self._codecs_by_type.get(base) or _GLOBAL_CODECS_BY_TYPE.get(base)
            if codec is not None and codec.include_subclasses:
                return codec
        return None

    def _pack(self, obj: Any) -> bytes:
        try:
            return self._pack_fast(obj)
        except UnicodeEncodeError:
            return self._pack_surrogates(obj)

    def _pack_fast(self, obj: Any) -> bytes:
        """Pack with this thread's reusable Packer (building one per call costs more than
        packing a small value). A nested dump from inside `_default` gets a fresh one."""
        state = self._packers.state
        if state[1]:
            return self._pack_new(obj)
        packer = state[0]
        if packer is None:
            packer = state[0] = msgpack.Packer(**self._pack_options)
        state[1] = True
        try:
            return packer.pack(obj)
        finally:
            state[1] = False

    def _encodable(self, value: Any) -> bool:
        try:
            self._pack(value)
        except Exception:
            return False
        return True

    # ---------------------------------------------------------------------- decoding

    def _decode_codec(self, args: list[Any]) -> Any:
        name, payload = expect_list(args, 2, "codec")
        codec = None
        if isinstance(name, str):
            codec = self._codecs_by_name.get(name) or _GLOBAL_CODECS_BY_NAME.get(name)
        if codec is None:
            raise TypeNotAllowedError(
                f"a value stored by codec {name!r}",
                "no codec of that name is registered",
                "Register it with serializer.register_codec(...) or import the adapter "
                "that provides it (checkpointer.langgraph for LangGraph's types)",
            )
        return codec.decode(payload)


def _unpackb_without_gc(raw: bytes, **options: Any) -> Any:
    """`msgpack.unpackb` with the collector paused, for large values (see `fast_path`): a
    list of a thousand pydantic messages is thousands of new objects too."""
    return _unpack_without_gc(partial(msgpack.unpackb, **options), raw)


class _PackerSlot(threading.local):
    """One msgpack Packer per thread (Packers are not thread-safe), and whether it is in
    use (a codec may dump a nested value while the outer value is being packed).

    Both live in one list, `state = [packer, busy]`, made for each thread on its first
    use: every attribute access on a `threading.local` finds the thread's dict first,
    and a dump made four of them."""

    def __init__(self) -> None:
        self.state: list[Any] = [None, False]


class _Decoding:
    """Hooks for one `unpackb` call.

    Counts markers handed out and consumed as array heads: a marker anywhere else (corrupt
    or crafted data) leaves the count non-zero and the load fails instead of returning a
    `Marker` inside the user's value.
    """

    __slots__ = ("open_markers", "serializer")

    def __init__(self, serializer: MsgpackSerializer) -> None:
        self.serializer = serializer
        self.open_markers = 0

    def ext_hook(self, code: int, data: bytes) -> Any:
        marker = MARKERS.get(code)
        if marker is not None:
            if data:
                raise malformed("marker")
            self.open_markers += 1
            return marker
        leaf = LEAF_DECODERS.get(code)
        if leaf is None:
            raise DeserializationError(f"unknown msgpack extension code {code}")
        return leaf(data)

    def list_hook(self, items: list[Any]) -> Any:
        if items:
            head = items[0]
            if type(head) is Marker:
                self.open_markers -= 1
                if head is TUPLE_MARKER:  # by far the most common: skip the dispatch
                    return tuple(islice(items, 1, None))
                return _ARRAY_DECODERS[head.code](self.serializer, items[1:])
        return items


def _dec_class_ref(code: int) -> ArrayDecoder:
    return lambda s, args: decode_class_ref(s._policy, code, args)


_ARRAY_DECODERS: Final[dict[int, ArrayDecoder]] = {
    **BUILTIN_ARRAY_DECODERS,
    EXT_CODEC: lambda s, args: s._decode_codec(args),
    **{code: _dec_class_ref(code) for code in KIND_BY_EXT},
}
assert set(_ARRAY_DECODERS) == set(ARRAY_CODES)


_DEFAULT: MsgpackSerializer | None = None


def default_serializer() -> MsgpackSerializer:
    """The shared default instance (no types registered, no modules allowed: what loads
    is what the default policy allows, see the class docstring).

    Registering on it affects every saver that uses the default; savers that want their own
    allowlist derive one with `with_types` / `with_modules`.
    """
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = MsgpackSerializer()
    return _DEFAULT
