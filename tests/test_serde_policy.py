"""The class-loading policy: what loads with no configuration, what never does, and that
loading stored bytes runs none of the named class's own code.

Stored bytes are attacker-controlled in a shared database. The rules under test: a class is
found through `sys.modules` only, walking its qualname through classes of the same module,
and must match its own `__module__` and `__qualname__` exactly; it is rebuilt without its
`__init__`, `__new__`, validators or hooks; a refusal is `TypeNotAllowedError` saying how to
allow the class; an exception that cannot be rebuilt loads as a `StoredException`.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import subprocess
import sys
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any, NamedTuple

import msgpack
import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from checkpointer.errors import (
    ConfigError,
    CorruptValueError,
    DeserializationError,
    SerializationError,
    StoredException,
    TypeNotAllowedError,
    UnregisteredTypeError,
)
from checkpointer.savers.memory import InMemorySaver
from checkpointer.serde import MsgpackSerializer
from checkpointer.serde import classes as policy
from checkpointer.serde import msgpack_serde as ms
from tests.test_fuzz import example_settings
from tests.test_serde import assert_same, ext, mark, roundtrip

HERE = __name__

# ------------------------------------------------------------------ the gadget module

GADGET_SOURCE = '''
"""An application module that merely imports subprocess (16.7's setting)."""
import subprocess
from subprocess import CalledProcessError, Popen
from dataclasses import dataclass


@dataclass
class Note:
    text: str
'''


@pytest.fixture
def myapp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A module `myapp_<random>` of the application (outside site-packages) that imports
    subprocess, loaded the usual way; and `subprocess.Popen` made to record any call."""
    name = f"myapp_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(GADGET_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = __import__(name)
    calls: list[Any] = []
    monkeypatch.setattr(subprocess.Popen, "_execute_child", lambda *a, **k: calls.append(a))
    module.calls = calls
    yield module
    sys.modules.pop(name, None)


def _ref(code: int, module: str, qualname: str, *rest: Any) -> tuple[str, bytes]:
    return ("msgpack", msgpack.packb([mark(code), module, qualname, *rest]))


GADGET_RESTS: dict[int, list[Any]] = {
    ms.EXT_DATACLASS: [{"args": ["touch", "/tmp/pwned"]}],
    ms.EXT_PYDANTIC: [{"args": ["id"]}, []],
    ms.EXT_NAMEDTUPLE: [[["id"]]],
    ms.EXT_ENUM: [1],
    ms.EXT_TYPE: [],
    ms.EXT_SUBCLASS: ["str", "x"],
}


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("code", sorted(GADGET_RESTS))
@pytest.mark.parametrize("qualname", ["subprocess.Popen", "Popen"])
def test_popen_is_never_reached_through_an_allowed_module(
    myapp: Any, code: int, qualname: str, strict: bool
) -> None:
    """`allowed_modules=["myapp"]` where myapp imports subprocess: neither the attribute
    path `myapp.subprocess.Popen` nor the imported name `myapp.Popen` is a class of myapp."""
    s = MsgpackSerializer(allowed_modules=[myapp.__name__], strict=strict)
    data = _ref(code, myapp.__name__, qualname, *GADGET_RESTS[code])
    loaded: Any = None
    try:
        loaded = s.loads_typed(data)
    except TypeNotAllowedError as exc:
        assert "Popen" in str(exc)
    assert not isinstance(loaded, subprocess.Popen)
    if code == ms.EXT_SUBCLASS:
        assert loaded == "x" and type(loaded) is str  # the stored builtin value, no class
    assert myapp.calls == []


@pytest.mark.parametrize("qualname", ["subprocess.CalledProcessError", "CalledProcessError"])
def test_called_process_error_via_a_module_attribute_is_a_stand_in(
    myapp: Any, qualname: str
) -> None:
    """An exception record naming `myapp.CalledProcessError` does not build subprocess's
    class: myapp has no exception of that name of its own."""
    s = MsgpackSerializer(allowed_modules=[myapp.__name__])
    loaded = s.loads_typed(_ref(ms.EXT_EXCEPTION, myapp.__name__, qualname, [1, "ls"], {}))
    assert type(loaded) is StoredException
    assert (loaded.module, loaded.qualname, loaded.args) == (myapp.__name__, qualname, (1, "ls"))


def test_called_process_error_under_its_own_name_rebuilds_without_init() -> None:
    """Exceptions load by exact name from any loaded module: this is the real class, made
    without running its `__init__` (a Python one)."""
    original = subprocess.CalledProcessError(2, ["ls", "-l"], output=b"o")
    loaded = roundtrip(MsgpackSerializer(), original)
    assert type(loaded) is subprocess.CalledProcessError
    assert (loaded.returncode, loaded.cmd, loaded.output) == (2, ["ls", "-l"], b"o")


@pytest.mark.parametrize(
    ("module_attr", "qualname"),
    [(None, "Popen"), ("subprocess", "Popen"), (None, "subprocess.Popen")],
)
def test_defaultdict_factory_is_never_popen(
    myapp: Any, module_attr: str | None, qualname: str
) -> None:
    module = module_attr or myapp.__name__
    factory = [mark(ms.EXT_TYPE), module, qualname]
    crafted = ("msgpack", msgpack.packb([mark(ms.EXT_DEFAULTDICT), factory, {}]))
    s = MsgpackSerializer(allowed_modules=[myapp.__name__, "subprocess"])
    with pytest.raises(TypeNotAllowedError, match="only builtin types"):
        s.loads_typed(crafted)
    assert myapp.calls == []


def test_defaultdict_with_a_class_factory_is_refused_on_dump(myapp: Any) -> None:
    with pytest.raises(SerializationError, match="default factory"):
        MsgpackSerializer().dumps_typed(defaultdict(myapp.Note))
    with pytest.raises(SerializationError, match="default factory"):
        MsgpackSerializer().dumps_typed(defaultdict(subprocess.Popen))
    plain = defaultdict(list, {"a": [1]})
    loaded = roundtrip(MsgpackSerializer(), plain)
    assert loaded.default_factory is list and loaded == plain


def test_the_gadget_modules_own_class_loads(myapp: Any) -> None:
    data = _ref(ms.EXT_DATACLASS, myapp.__name__, "Note", {"text": "hi"})
    assert MsgpackSerializer().loads_typed(data) == myapp.Note("hi")  # an app module
    with pytest.raises(TypeNotAllowedError, match="strict"):
        MsgpackSerializer(strict=True).loads_typed(data)
    strict_allowed = MsgpackSerializer(strict=True, allowed_modules=[myapp.__name__])
    assert strict_allowed.loads_typed(data) == myapp.Note("hi")


def test_module_getattr_is_never_called(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A module-level `__getattr__` (lazy imports) is code of the module: never run."""
    name = f"lazy_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        "calls = []\n"
        "def __getattr__(attr):\n    calls.append(attr)\n    raise AttributeError(attr)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    module = __import__(name)
    s = MsgpackSerializer(allowed_modules=[name])
    with pytest.raises(TypeNotAllowedError):
        s.loads_typed(_ref(ms.EXT_DATACLASS, name, "Anything", {}))
    assert module.calls == []


# ------------------------------------------------------- what loads by default


def test_stdlib_and_installed_classes_need_allowing() -> None:
    """A dataclass of the standard library (as of any installed package) is not application
    code: refused by default, naming the options, loaded once allowed."""
    import pstats

    data = _ref(ms.EXT_DATACLASS, "pstats", "FunctionProfile", {"ncalls": "1"})
    with pytest.raises(TypeNotAllowedError) as info:
        MsgpackSerializer().loads_typed(data)
    message = str(info.value)
    assert "not the application's own code" in message
    assert "allowed_types=[pstats.FunctionProfile]" in message
    assert "allowed_modules=['pstats']" in message
    assert "CHECKPOINTER_ALLOWED_MODULES=pstats" in message
    loaded = MsgpackSerializer(allowed_modules=["pstats"]).loads_typed(data)
    assert type(loaded) is pstats.FunctionProfile and loaded.ncalls == "1"


def test_environment_variable_allows_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    import pstats

    data = _ref(ms.EXT_DATACLASS, "pstats", "FunctionProfile", {"ncalls": "1"})
    monkeypatch.setenv(policy.ENV_ALLOWED_MODULES, "colorsys, pstats")
    assert type(MsgpackSerializer().loads_typed(data)) is pstats.FunctionProfile
    assert type(MsgpackSerializer(strict=True).loads_typed(data)) is pstats.FunctionProfile
    monkeypatch.setenv(policy.ENV_ALLOWED_MODULES, "pstats;rm -rf")
    with pytest.raises(ConfigError, match=policy.ENV_ALLOWED_MODULES):
        MsgpackSerializer().loads_typed(data)


def test_app_module_detection() -> None:
    assert policy.is_app_module(HERE)  # the test suite is the application here
    assert policy.is_app_module("__main__")
    for library in ("json", "subprocess", "pydantic", "langgraph.types", "builtins", "sys"):
        __import__(library)
        assert not policy.is_app_module(library), library
    assert not policy.is_app_module("never_imported_module_xyz")


def test_classes_written_by_this_process_load_by_name() -> None:
    """A class defined in a function has `<locals>` in its qualname: no module path reaches
    it, but this process wrote one, so it loads back (the same class object)."""

    @dataclasses.dataclass
    class Inner:
        v: int

    class Kind(enum.Enum):
        A = "a"

    value = [Inner(1), Kind.A]
    data = MsgpackSerializer().dumps_typed(value)
    loaded = MsgpackSerializer().loads_typed(data)
    assert loaded == value and type(loaded[0]) is Inner and loaded[1] is Kind.A
    with pytest.raises(TypeNotAllowedError, match="strict"):
        MsgpackSerializer(strict=True).loads_typed(data)


def test_local_class_never_written_is_refused_with_advice() -> None:
    data = _ref(ms.EXT_DATACLASS, HERE, "f.<locals>.Never", {})
    with pytest.raises(TypeNotAllowedError, match=r"serializer\.register\(cls\)"):
        MsgpackSerializer().loads_typed(data)


def test_renamed_app_class_says_so() -> None:
    data = _ref(ms.EXT_DATACLASS, HERE, "NoLongerHere", {})
    with pytest.raises(TypeNotAllowedError, match="no class of exactly that name"):
        MsgpackSerializer().loads_typed(data)


def test_langgraph_style_names_allow_a_local_class() -> None:
    """LangGraph lists a class defined in a function as (module, name)."""

    @dataclasses.dataclass
    class InnerObject:
        v: int

    strict = MsgpackSerializer(strict=True)
    data = strict.dumps_typed(InnerObject(2))
    with pytest.raises(TypeNotAllowedError):
        strict.loads_typed(data)
    named = strict.with_allowlist([(HERE, "InnerObject")])
    assert named.loads_typed(data) == InnerObject(2)
    assert named.allowed_names == {(HERE, "InnerObject")}
    assert named.strict


def test_exceptions_of_any_loaded_module_load_by_exact_name() -> None:
    import json

    err = json.JSONDecodeError("bad", "doc", 1)
    loaded = roundtrip(MsgpackSerializer(), err)
    assert type(loaded) is json.JSONDecodeError
    assert (loaded.msg, loaded.doc, loaded.pos) == ("bad", "doc", 1)


def test_exception_of_a_module_not_loaded_is_a_stand_in() -> None:
    data = _ref(ms.EXT_EXCEPTION, "not_loaded_pkg.errors", "Boom", ["why", 3], {"code": 7})
    loaded = MsgpackSerializer().loads_typed(data)
    assert type(loaded) is StoredException
    assert repr(loaded) == "Boom('why', 3)"
    assert loaded.state == {"code": 7} and loaded.args == ("why", 3)
    assert "not_loaded_pkg" not in sys.modules
    # Stored again, the stand-in writes the record it stands for.
    again = MsgpackSerializer().dumps_typed(loaded)
    assert again == MsgpackSerializer().dumps_typed(loaded)
    assert msgpack.unpackb(again[1])[1:3] == ["not_loaded_pkg.errors", "Boom"]


def test_pydantic_validation_error_loads_as_a_stand_in_with_its_repr() -> None:
    class Strict(pydantic.BaseModel):
        x: int

    with pytest.raises(pydantic.ValidationError) as info:
        Strict(x="nope")  # type: ignore[arg-type]
    loaded = roundtrip(MsgpackSerializer(), info.value)
    assert type(loaded) is StoredException
    assert loaded.qualname == "ValidationError"
    assert repr(loaded) == repr(info.value)
    assert "validation error" in str(loaded)


def test_cancelled_error_round_trips() -> None:
    import asyncio

    loaded = roundtrip(MsgpackSerializer(), asyncio.CancelledError("stop"))
    assert type(loaded) is asyncio.CancelledError and loaded.args == ("stop",)


def test_kind_confusion_is_refused() -> None:
    """A stored record naming subprocess.Popen as an exception finds the class (exceptions
    load from any module), then refuses it: it is not one."""
    with pytest.raises(DeserializationError, match="not one"):
        MsgpackSerializer().loads_typed(_ref(ms.EXT_EXCEPTION, "subprocess", "Popen", [], {}))


# ------------------------------------------------------------ no user code on load


@dataclasses.dataclass
class Recorded:
    calls: Any = None
    x: int = 0
    tags: list[str] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        LOG.append("Recorded.__post_init__")


class RecordedNew:
    pass


@dataclasses.dataclass
class WithNew:
    x: int = 0

    def __new__(cls, *args: Any, **kwargs: Any) -> WithNew:
        LOG.append("WithNew.__new__")
        return super().__new__(cls)


@dataclasses.dataclass
class WithSetter:
    x: int = 0

    def __setattr__(self, name: str, value: Any) -> None:
        LOG.append(f"WithSetter.__setattr__({name})")
        object.__setattr__(self, name, value)


class Validated(pydantic.BaseModel):
    x: int
    y: str = "d"
    _secret: str = pydantic.PrivateAttr(default="p")

    @pydantic.field_validator("x")
    @classmethod
    def _check_x(cls, value: int) -> int:
        LOG.append("Validated.field_validator")
        return value

    @pydantic.model_validator(mode="after")
    def _check_model(self) -> Validated:
        LOG.append("Validated.model_validator")
        return self

    def model_post_init(self, context: Any) -> None:
        LOG.append("Validated.model_post_init")


class SideEffectError(Exception):
    def __init__(self, message: str, code: int) -> None:
        LOG.append("SideEffectError.__init__")
        super().__init__(message)
        self.code = code


class Hooked(enum.Enum):
    A = 1

    @classmethod
    def _missing_(cls, value: object) -> Any:
        LOG.append("Hooked._missing_")
        return cls.A


class NewTuple(NamedTuple):
    a: int
    b: int = 5


class LoudStr(str):
    def __new__(cls, value: str) -> LoudStr:
        LOG.append("LoudStr.__new__")
        return super().__new__(cls, value)

    def __init__(self, value: str) -> None:
        LOG.append("LoudStr.__init__")


class LoudList(list[int]):
    def __init__(self, *args: Any) -> None:
        LOG.append("LoudList.__init__")
        super().__init__(*args)


LOG: list[str] = []


def _dumped_quietly(value: Any) -> tuple[str, bytes]:
    data = MsgpackSerializer().dumps_typed(value)
    LOG.clear()
    return data


def test_loading_runs_no_constructor_validator_or_hook() -> None:
    values = [
        Recorded(x=1, tags=["a"]),
        WithNew(3),
        WithSetter(4),
        Validated(x=5),
        SideEffectError("boom", 7),
        Hooked.A,
        NewTuple(1, 2),
        LoudStr("text"),
        LoudList([1, 2]),
    ]
    data = _dumped_quietly(values)
    loaded = MsgpackSerializer().loads_typed(data)
    assert LOG == []
    assert loaded[0] == Recorded(x=1, tags=["a"])
    assert type(loaded[1]) is WithNew and loaded[1].x == 3
    assert loaded[2].x == 4
    assert type(loaded[3]) is Validated and loaded[3].x == 5 and loaded[3].y == "d"
    assert loaded[3]._secret == "p" and loaded[3].model_fields_set == {"x"}
    assert type(loaded[4]) is SideEffectError and loaded[4].args == ("boom",)
    assert loaded[4].code == 7
    assert loaded[5] is Hooked.A
    assert loaded[6] == NewTuple(1, 2) and type(loaded[6]) is NewTuple
    assert type(loaded[7]) is LoudStr and loaded[7] == "text"
    assert type(loaded[8]) is LoudList and loaded[8] == [1, 2]
    LOG.clear()


def test_enum_missing_hook_is_not_called_for_unknown_values() -> None:
    data = _ref(ms.EXT_ENUM, HERE, "Hooked", 99)
    LOG.clear()
    with pytest.raises(DeserializationError, match="no member"):
        MsgpackSerializer().loads_typed(data)
    assert LOG == []


def test_missing_fields_take_declared_defaults_without_init() -> None:
    data = _ref(ms.EXT_DATACLASS, HERE, "Recorded", {"x": 9})
    loaded = MsgpackSerializer().loads_typed(data)
    assert loaded == Recorded(x=9) and loaded.tags == [] and LOG == ["Recorded.__post_init__"]
    LOG.clear()  # the comparison built a Recorded; loading itself logged nothing
    loaded = MsgpackSerializer().loads_typed(data)
    assert LOG == []
    model = MsgpackSerializer().loads_typed(_ref(ms.EXT_PYDANTIC, HERE, "Validated", {"x": 1}, []))
    assert model.y == "d" and model.model_fields_set == set() and LOG == []
    padded = MsgpackSerializer().loads_typed(_ref(ms.EXT_NAMEDTUPLE, HERE, "NewTuple", [1]))
    assert padded == NewTuple(1, 5)


def test_named_tuple_with_too_many_items_is_refused() -> None:
    with pytest.raises(DeserializationError, match="has 3 items"):
        MsgpackSerializer().loads_typed(_ref(ms.EXT_NAMEDTUPLE, HERE, "NewTuple", [1, 2, 3]))


def test_exception_state_cannot_replace_the_class() -> None:
    crafted = _ref(ms.EXT_EXCEPTION, "builtins", "ValueError", ["x"], {"__class__": "y", "note": 1})
    loaded = MsgpackSerializer().loads_typed(crafted)
    assert type(loaded) is ValueError and loaded.note == 1  # type: ignore[attr-defined]
    assert "__class__" not in vars(loaded)


def test_debug_pattern_loads_silently(capsys: pytest.CaptureFixture[str]) -> None:
    pattern = re.compile(r"(a|b)+c", re.IGNORECASE | re.DEBUG)
    data = _dumped_quietly(pattern)
    capsys.readouterr()  # what compiling it above printed
    loaded = MsgpackSerializer().loads_typed(data)
    assert capsys.readouterr() == ("", "")
    assert loaded.pattern == pattern.pattern and loaded.flags & re.IGNORECASE
    assert not loaded.flags & re.DEBUG
    crafted = ext(ms.EXT_PATTERN, ["x", int(re.DEBUG)])
    MsgpackSerializer().loads_typed(crafted)
    assert capsys.readouterr() == ("", "")
    with pytest.raises(DeserializationError):
        MsgpackSerializer().loads_typed(ext(ms.EXT_PATTERN, ["x", 1 << 20]))


# ----------------------------------------------------- builtin type subclasses


def test_langchain_text_accessor_round_trips() -> None:
    from langchain_core.messages import AIMessage
    from langchain_core.messages.base import TextAccessor

    text = AIMessage(content="hello").text
    assert type(text) is TextAccessor
    loaded = roundtrip(MsgpackSerializer(), {"answer": text})
    assert type(loaded["answer"]) is TextAccessor and loaded["answer"] == "hello"
    data = MsgpackSerializer().dumps_typed(text)
    as_str = MsgpackSerializer(strict=True).loads_typed(data)
    assert type(as_str) is str and as_str == "hello"  # its class not allowed: the str


class Tagged(str):
    pass


class Counted(dict[str, int]):
    pass


def test_builtin_subclasses_keep_class_and_state() -> None:
    tagged = Tagged("x")
    tagged.source = "user"  # type: ignore[attr-defined]
    for value in (tagged, Counted(a=1), NewTuple(1, 2)):
        loaded = roundtrip(MsgpackSerializer(), value)
        assert type(loaded) is type(value) and loaded == value
    assert roundtrip(MsgpackSerializer(), tagged).source == "user"


def test_builtin_subclass_payload_must_match_its_base() -> None:
    for rest in (["str", 1], ["nope", "x"], ["int"], ["list", "x"]):
        with pytest.raises(DeserializationError):
            MsgpackSerializer().loads_typed(_ref(ms.EXT_SUBCLASS, HERE, "Tagged", *rest))
    with pytest.raises(DeserializationError, match="not one"):
        MsgpackSerializer().loads_typed(_ref(ms.EXT_SUBCLASS, HERE, "Counted", "str", "x"))


# ------------------------------------------------------------ refusals in savers


def test_a_saver_reports_a_refusal_as_a_located_policy_error() -> None:
    @dataclasses.dataclass
    class Note:
        text: str

    writer = InMemorySaver()
    config = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
    checkpoint = {
        "v": 1,
        "id": "1ef0000000000000000000000000001",
        "ts": "2024-01-01T00:00:00+00:00",
        "channel_values": {"note": Note("hi")},
        "channel_versions": {"note": "1"},
        "versions_seen": {},
        "updated_channels": ["note"],
    }
    stored = writer.put(config, checkpoint, {"source": "input", "step": -1}, {"note": "1"})
    writer.serde = MsgpackSerializer(strict=True)
    with pytest.raises(TypeNotAllowedError) as info:
        writer.get_tuple(stored)
    exc = info.value
    assert isinstance(exc, CorruptValueError) and isinstance(exc, UnregisteredTypeError)
    assert exc.thread_id == "t1" and exc.channel == "note"
    assert "corrupt" not in str(exc) and "thread_id='t1'" in str(exc)
    assert "strict" in str(exc) and "Note" in str(exc)
    writer.serde = MsgpackSerializer()
    assert writer.get_tuple(stored).checkpoint["channel_values"]["note"] == Note("hi")


def test_stand_in_exception_text() -> None:
    stand_in = StoredException("pkg.mod", "Outer.Boom", ("a",), {"x": 1})
    assert repr(stand_in) == "Boom('a')" and str(stand_in) == "a" and stand_in.name == "Boom"
    with_text = StoredException("pkg", "E", (), {}, "E: custom repr")
    assert repr(with_text) == "E: custom repr" == str(with_text)
    assert_same(roundtrip(MsgpackSerializer(), stand_in).args, ("a",))


# ------------------------------------------------------------------ properties

PROPERTY = example_settings(200)


@dataclasses.dataclass
class Doubling:
    """`__post_init__` changes the value: a load that ran it would not round trip."""

    n: int
    child: Any = None

    def __post_init__(self) -> None:
        LOG.append("Doubling.__post_init__")
        self.n *= 2


@dataclasses.dataclass(frozen=True, slots=True)
class Frozen:
    a: Any
    b: tuple[int, ...] = ()


class Shouting(pydantic.BaseModel):
    """A validator that changes the value and a post-init hook: neither may run on load."""

    text: str
    inner: Any = None
    _seen: int = pydantic.PrivateAttr(default=0)

    @pydantic.field_validator("text")
    @classmethod
    def _upper(cls, value: str) -> str:
        LOG.append("Shouting._upper")
        return value.upper()

    def model_post_init(self, context: Any) -> None:
        LOG.append("Shouting.model_post_init")


class Loose(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")
    a: int = 0


class Grade(enum.IntEnum):
    A = 1
    B = 2

    @classmethod
    def _missing_(cls, value: object) -> Any:
        LOG.append("Grade._missing_")
        return cls.A


class Span(NamedTuple):
    start: Any
    end: Any = None


class AppError(Exception):
    def __init__(self, message: str, *, status: int) -> None:
        LOG.append("AppError.__init__")
        super().__init__(message)
        self.status = status


def _app_error(message: str, status: int) -> AppError:
    error = AppError(message, status=status)
    return error


_leaf = (
    st.none()
    | st.integers(-(2**70), 2**70)
    | st.text(max_size=6)
    | st.sampled_from(list(Grade) + list(Hooked))
    | st.builds(Tagged, st.text(max_size=4))
)


def _nested(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=3), inner, max_size=3)
        | st.builds(Doubling, st.integers(-100, 100), inner).map(_undouble)
        | st.builds(Frozen, inner, st.lists(st.integers(0, 9), max_size=2).map(tuple))
        | st.builds(Shouting.model_construct, text=st.text(max_size=5), inner=inner)
        | st.builds(lambda a, x: Loose(a=a, extra=x), st.integers(0, 9), inner)
        | st.builds(Span, inner, inner)
        | st.builds(_app_error, st.text(max_size=5), st.integers(0, 599))
        | st.builds(Counted, st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
    )


def _undouble(value: Doubling) -> Doubling:
    object.__setattr__(value, "n", value.n // 2 * 2)  # __post_init__ ran once at build
    return value


app_values = st.recursive(_leaf, _nested, max_leaves=12)


@PROPERTY
@given(app_values)
def test_app_classes_round_trip_without_running_their_code(value: Any) -> None:
    data = MsgpackSerializer().dumps_typed(value)
    LOG.clear()
    for serde in (MsgpackSerializer(), MsgpackSerializer(strict=True, allowed_modules=[HERE])):
        loaded = serde.loads_typed(data)
        assert LOG == []
        assert_same(value, loaded)
        if isinstance(value, Shouting):
            assert loaded.text == value.text  # the validator would have upper-cased it


@PROPERTY
@given(app_values)
def test_strict_serializer_refuses_or_round_trips(value: Any) -> None:
    """Strict and not told about this module: a value loads identically (only builtins in
    it; app exceptions as stand-ins), or the refusal names a class of this module."""
    data = MsgpackSerializer().dumps_typed(value)
    try:
        loaded = MsgpackSerializer(strict=True).loads_typed(data)
    except TypeNotAllowedError as exc:
        assert HERE in str(exc)
        return
    _assert_same_with_stand_ins(value, loaded)


def _assert_same_with_stand_ins(value: Any, loaded: Any) -> None:
    if isinstance(value, AppError):
        assert type(loaded) is StoredException and loaded.args == value.args
        assert loaded.state == {"status": value.status} and repr(loaded) == repr(value)
    elif isinstance(value, Tagged | Counted):  # the builtin value, its class not allowed
        assert type(loaded) is type(value).__mro__[1] and loaded == value
    elif isinstance(value, list | tuple) and not hasattr(value, "_fields"):
        assert type(loaded) is type(value) and len(loaded) == len(value)
        for a, b in zip(value, loaded):
            _assert_same_with_stand_ins(a, b)
    elif isinstance(value, dict) and type(value) is dict:
        assert list(loaded) == list(value)
        for key in value:
            _assert_same_with_stand_ins(value[key], loaded[key])
    else:
        assert_same(value, loaded)


@PROPERTY
@given(st.sampled_from(sorted(GADGET_RESTS)), st.sampled_from(["subprocess", "os", "builtins"]))
def test_gadget_references_never_load(code: int, attr: str) -> None:
    """Every class-record kind naming a callable reached through an allowed module's
    attributes is refused, strict or not."""
    for target in ("Popen", "system", "eval", "check_output"):
        qualname = f"{attr}.{target}"
        for strict in (False, True):
            s = MsgpackSerializer(allowed_modules=[HERE], strict=strict)
            try:
                loaded = s.loads_typed(_ref(code, HERE, qualname, *GADGET_RESTS[code]))
            except TypeNotAllowedError:
                continue
            assert code == ms.EXT_SUBCLASS and type(loaded) is str
