"""Which classes stored bytes may name: the loading policy of the msgpack serializer.

Stored data names a class by its `(module, qualname)`. Whatever the policy allows, finding
the class never imports anything and never follows attributes from one module into another:

- `find_loaded` looks the module up in `sys.modules` only, then walks the qualname through
  classes only (each step a class of that very module, read from the namespace itself, so
  no module `__getattr__` or descriptor runs), and accepts the result only if its own
  `__module__` and `__qualname__` are exactly the stored ones. An allowed module that
  imports `subprocess` therefore never reaches `subprocess.Popen`.
- Classes defined inside a function (`<locals>` in the qualname) cannot be found that way;
  they are found through the process registry: every class this process has *written*
  (`note_dumped`: putting a class into state is trusting it) or registered explicitly.

Which classes may then be rebuilt (see `MsgpackSerializer._resolve`): built-in types and this
library's markers and errors; registered types and allowed modules (also from the
`CHECKPOINTER_ALLOWED_MODULES` environment variable); and, unless the serializer is strict,
classes of the registry, data classes (dataclasses, pydantic models, enums, named tuples)
of the application's own modules (`is_app_module`: loaded, and not inside the standard
library or site-packages), and any exception class found loaded. Rebuilding never runs the
class's own code (see `rebuild`), which is what makes the defaults safe.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import re
import site
import sys
import sysconfig
import threading
import weakref
from collections.abc import Mapping
from enum import Enum
from types import ModuleType
from typing import Any, Final

from checkpointer import errors as _errors
from checkpointer.errors import ConfigError, DeserializationError, TypeNotAllowedError
from checkpointer.serde.rebuild import dataclass_plan, nearest_c_new
from checkpointer.serde.value_types import (
    EXT_DATACLASS,
    EXT_EXCEPTION,
    EXT_PYDANTIC,
    EXT_PYDANTIC_V1,
    EXT_TYPE,
    KIND_BY_EXT,
    PLAIN_CLASSES,
    SUBCLASS_BASES,
)

ENV_ALLOWED_MODULES: Final = "CHECKPOINTER_ALLOWED_MODULES"
"""Comma-separated module names whose classes load as if given in `allowed_modules`."""

DOTTED: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*\Z")


def class_key(cls: type) -> tuple[str, str]:
    return (cls.__module__, cls.__qualname__)


# ------------------------------------------------------------------ the registry

_lock = threading.Lock()
_seen_by_id: dict[int, weakref.ref[type]] = {}
_by_key: weakref.WeakValueDictionary[tuple[str, str], type] = weakref.WeakValueDictionary()
_by_name: dict[tuple[str, str], weakref.WeakSet[type]] = {}


def note_dumped(cls: type) -> None:
    """Remember a class this process wrote (or registered), so it loads back by name.

    Called for every object of a class kind that is dumped: the check for a class already
    noted is one dict look-up. Weak references: a class made per request (pydantic's
    `create_model`) is forgotten with its last instance."""
    ref = _seen_by_id.get(id(cls))
    if ref is not None and ref() is cls:
        return
    _note(cls)


def _note(cls: type) -> None:
    key = class_key(cls)
    ident = id(cls)

    def forget(_: weakref.ref[type]) -> None:
        with _lock:
            if _seen_by_id.get(ident) is ref:
                del _seen_by_id[ident]

    ref = weakref.ref(cls, forget)
    with _lock:
        _seen_by_id[ident] = ref
        _by_key[key] = cls  # the latest definition of a (module, qualname) wins
        _by_name.setdefault((key[0], cls.__name__), weakref.WeakSet()).add(cls)


def registered(module: str, qualname: str) -> type | None:
    """The class of that exact name that this process wrote or registered, if any."""
    return _by_key.get((module, qualname))


def registered_named(module: str, name: str) -> list[type]:
    """Classes of `module` whose own `__name__` is `name` (a class defined in a function is
    listed by LangGraph's schema allowlist as `(module, name)`)."""
    with _lock:
        found = _by_name.get((module, name))
        return list(found) if found is not None else []


# ------------------------------------------------------------ finding a class


def find_loaded(module: str, qualname: str) -> type | None:
    """The class `module.qualname`, if that module is already imported and the class is
    reachable from it through classes of the same module with exactly that name."""
    mod = sys.modules.get(module)
    if not isinstance(mod, ModuleType) or not DOTTED.match(qualname):
        return None
    namespace: Mapping[str, Any] = vars(mod)
    found: type | None = None
    for part in qualname.split("."):
        obj = namespace.get(part)
        if not isinstance(obj, type) or obj.__module__ != module:
            return None
        found = obj
        namespace = obj.__dict__
    if found is None or found.__qualname__ != qualname:
        return None
    return found


# ------------------------------------------------------ the application's modules


def _library_roots() -> tuple[str, ...]:
    """Directories whose modules are the standard library or installed packages."""
    paths: set[str] = set()
    schemes = [sysconfig.get_paths()]
    bases = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}
    schemes.append(sysconfig.get_paths(vars=bases))
    for scheme in schemes:
        for key in ("stdlib", "platstdlib", "purelib", "platlib"):
            if scheme.get(key):
                paths.add(scheme[key])
    with contextlib.suppress(AttributeError):  # some embedded interpreters lack it
        paths.update(site.getsitepackages())
    user_site = getattr(site, "getusersitepackages", None)
    if user_site is not None:
        paths.add(user_site())
    for entry in sys.path:
        tail = os.path.basename(os.path.normpath(entry)) if entry else ""
        if tail in ("site-packages", "dist-packages"):
            paths.add(entry)
    roots = {os.path.join(os.path.realpath(p), "") for p in paths if p}
    return tuple(sorted(roots))


_LIBRARY_ROOTS: Final = _library_roots()
_app_modules: dict[str, tuple[int, bool]] = {}


def is_app_module(name: str) -> bool:
    """Whether `name` is a loaded module of the application itself: `__main__`, or a module
    whose file lies outside the standard library and site-packages (a project's own code,
    a test suite, a graph file LangGraph's server loaded under a name of its own).

    Installed packages are never app modules: their classes load only when registered or
    allowed (`allowed_modules=`, `CHECKPOINTER_ALLOWED_MODULES`)."""
    mod = sys.modules.get(name)
    if not isinstance(mod, ModuleType):
        return False
    cached = _app_modules.get(name)
    if cached is not None and cached[0] == id(mod):
        return cached[1]
    if name == "__main__":
        answer = True
    else:
        path = vars(mod).get("__file__")
        if not isinstance(path, str) or not path:
            answer = False  # builtin, frozen or synthetic: not a file of the application
        else:
            real = os.path.realpath(path)
            answer = not real.startswith(_LIBRARY_ROOTS)
    _app_modules[name] = (id(mod), answer)
    return answer


# ------------------------------------------------------------ the environment

_env_cache: list[object] = [None, frozenset()]


def env_modules() -> frozenset[str]:
    """Module names allowed by `CHECKPOINTER_ALLOWED_MODULES` (comma or space separated);
    a name that is not a dotted module path raises ConfigError naming it."""
    raw = os.environ.get(ENV_ALLOWED_MODULES, "")
    if raw == _env_cache[0]:
        cached = _env_cache[1]
        assert isinstance(cached, frozenset)
        return cached
    names = [n for n in re.split(r"[\s,]+", raw) if n]
    bad = [n for n in names if not DOTTED.match(n)]
    if bad:
        raise ConfigError(f"{ENV_ALLOWED_MODULES} holds {bad[0]!r}, which is not a module name")
    parsed = frozenset(names)
    _env_cache[:] = [raw, parsed]
    return parsed


def module_covered(module: str, allowed: frozenset[str] | set[str]) -> bool:
    """Whether `module` is one of `allowed` or a submodule of one."""
    if module in allowed:
        return True
    return any(module.startswith(m + ".") for m in allowed)


# ------------------------------------------------------------------ the policy


def pydantic_base() -> type | None:
    """pydantic's BaseModel if pydantic is loaded; an object can't be a model otherwise."""
    mod = sys.modules.get("pydantic")
    base = getattr(mod, "BaseModel", None)
    return base if isinstance(base, type) else None


def pydantic_v1_base() -> type | None:
    mod = sys.modules.get("pydantic.v1")
    base = getattr(mod, "BaseModel", None)
    return base if isinstance(base, type) else None


def defines(cls: type, name: str) -> bool:
    """Whether `cls` or a base has `name` in its own namespace (no attribute hooks run)."""
    return any(name in klass.__dict__ for klass in cls.__mro__)


_SUBCLASS_BASES: Final = frozenset(SUBCLASS_BASES.values())


def is_kind(kind: str, cls: type) -> bool:
    """Whether `cls` really is what the stored reference said; stops type confusion.
    Checked on the MRO itself, so no `__subclasscheck__` or metaclass hook runs."""
    mro = cls.__mro__
    if kind == "enum":
        return Enum in mro
    if kind == "dataclass":
        return defines(cls, "__dataclass_fields__")
    if kind == "pydantic model":
        base = pydantic_base()
        return base is not None and base in mro
    if kind == "pydantic v1 model":
        base = pydantic_v1_base()
        return base is not None and base in mro
    if kind == "named tuple":
        return tuple in mro and defines(cls, "_fields") and defines(cls, "_make")
    if kind == "exception":
        return BaseException in mro
    if kind == "builtin subclass":
        return Enum not in mro and not _SUBCLASS_BASES.isdisjoint(mro)
    return kind == "class"


def _default_allowed() -> dict[tuple[str, str], type]:
    """Exception classes every serializer loads without being told: builtin exceptions (so
    errors round trip as themselves) and this library's own errors."""
    allowed: dict[tuple[str, str], type] = {}
    for namespace in (vars(builtins), vars(_errors)):
        for value in namespace.values():
            if isinstance(value, type) and issubclass(value, BaseException):
                allowed[class_key(value)] = value
    return allowed


_DEFAULT_ALLOWED: Final = _default_allowed()
_PLAIN_BY_KEY: Final = {class_key(cls): cls for cls in PLAIN_CLASSES}


def allow_hint(module: str, qualname: str) -> str:
    return (
        f"Allow it with allowed_types=[{module}.{qualname}] or allowed_modules=[{module!r}] "
        f"(on MsgpackSerializer or LangGraphSaver; serializer.register(cls) and "
        f"serializer.with_modules(...) do the same), or set {ENV_ALLOWED_MODULES}={module}"
    )


class ClassPolicy:
    """One serializer's answer to "may stored data name this class?", with its settings:
    registered types, allowed modules, LangGraph-style `(module, name)` entries, `strict`.

    `resolve` caches what it allowed: settings only ever widen (register, allow), and a
    class that was allowed stays so."""

    def __init__(self, *, strict: bool = False) -> None:
        if not isinstance(strict, bool):
            raise TypeError(f"strict must be a bool, got {strict!r}")
        self.strict = strict
        self.types: dict[tuple[str, str], type] = {}
        self.modules: set[str] = set()
        self.names: set[tuple[str, str]] = set()
        self._resolved: dict[tuple[int, str, str], tuple[type, Any]] = {}

    def copy(self) -> ClassPolicy:
        new = ClassPolicy(strict=self.strict)
        new.types = dict(self.types)
        new.modules = set(self.modules)
        new.names = set(self.names)
        return new

    def register(self, cls: type) -> None:
        if not isinstance(cls, type):
            raise TypeError(f"register() takes a class, got {cls!r}")
        self.types[class_key(cls)] = cls
        note_dumped(cls)  # a class defined in a function is found by name from now on

    def allow_module(self, module: str) -> None:
        if not isinstance(module, str) or not DOTTED.match(module):
            raise ValueError(f"not a module name: {module!r}")
        self.modules.add(module)

    def allow_name(self, module: str, name: str) -> None:
        if not isinstance(module, str) or not isinstance(name, str) or not name:
            raise ValueError(f"not a (module, name) entry: {(module, name)!r}")
        self.names.add((module, name))

    def resolve(self, code: int, module: Any, qualname: Any) -> tuple[type, Any]:
        """The class a stored reference names (and its dataclass field plan), if allowed;
        `TypeNotAllowedError` saying what would allow it otherwise.

        Nothing is imported, no attribute is followed from one module into another, and the
        class must be of the kind the reference claims (`is_kind`)."""
        if type(module) is not str or type(qualname) is not str:
            raise DeserializationError("malformed class reference")
        key = (code, module, qualname)
        found = self._resolved.get(key)
        if found is not None:
            return found
        kind = KIND_BY_EXT[code]
        cls = self._find(code, module, qualname)
        if not is_kind(kind, cls):
            raise DeserializationError(
                f"stored data names {module}.{qualname} as a {kind}, but it is not one"
            )
        plan: Any = None
        if code == EXT_DATACLASS:
            plan = dataclass_plan(cls)
        elif code in (EXT_PYDANTIC, EXT_PYDANTIC_V1):
            plan = nearest_c_new(cls)
        found = self._resolved[key] = (cls, plan)
        return found

    def _find(self, code: int, module: str, qualname: str) -> type:
        name_key = (module, qualname)
        if code == EXT_TYPE:
            plain = _PLAIN_BY_KEY.get(name_key)
            if plain is None:
                raise TypeNotAllowedError(
                    f"class object {module}.{qualname}",
                    "stored data may hold only builtin types as class objects",
                    "Store the class's name instead and look it up in your code",
                )
            return plain
        cls = self.types.get(name_key)
        if cls is None and code == EXT_EXCEPTION:
            cls = _DEFAULT_ALLOWED.get(name_key)
        if cls is not None:
            return cls
        explicit = (
            module_covered(module, self.modules)
            or (module, qualname.rpartition(".")[2]) in self.names
            or module_covered(module, env_modules())
        )
        trusted = explicit or (not self.strict and (code == EXT_EXCEPTION or is_app_module(module)))
        if trusted:
            cls = find_loaded(module, qualname)
        if cls is None and (explicit or not self.strict):
            cls = registered(module, qualname)
        if cls is not None:
            return cls
        raise self._refusal(code, module, qualname, explicit)

    def _refusal(self, code: int, module: str, qualname: str, explicit: bool) -> Exception:
        what = f"{KIND_BY_EXT[code]} {module}.{qualname}"
        hint = allow_hint(module, qualname)
        strict_refusal = (
            "this serializer is strict (only registered types and allowed modules load)"
        )
        known = registered(module, qualname) or find_loaded(module, qualname)
        if self.strict and not explicit and known is not None:
            return TypeNotAllowedError(what, strict_refusal, hint)
        if "<locals>" in qualname:
            return TypeNotAllowedError(
                what,
                "a class defined inside a function is only found once this process has "
                "written one or registered it",
                "Register it: serializer.register(cls) or allowed_types=[cls]",
            )
        if module not in sys.modules:
            return TypeNotAllowedError(
                what,
                f"module {module!r} is not imported in this process (loading never imports)",
                f"Import {module} before reading" + ("" if explicit else f". {hint}"),
            )
        if explicit or (not self.strict and is_app_module(module)):
            return TypeNotAllowedError(
                what,
                f"module {module!r} has no class of exactly that name (renamed or moved?)",
                "Register the class it became under its old name, or migrate the data",
            )
        why = (
            strict_refusal
            if self.strict
            else f"{module!r} is an installed package, not the application's own code"
        )
        return TypeNotAllowedError(what, why, hint)
