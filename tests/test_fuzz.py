"""Fuzzing the read path: stored bytes are attacker-controlled in a shared database.

Properties, checked with hypothesis on random, structured and mutated inputs:
- `loads_typed` (through `load_typed`, what savers call) returns a value or raises
  `DeserializationError`, nothing else;
- no module is imported while loading unless it was allowlisted (sys.modules is compared
  around every single load);
- the row decoders (`decode_tuples`, `decode_delta_history`) fed rows with corrupt values
  raise only `DeserializationError`;
- the encrypting serializer refuses every forged or damaged ciphertext with a typed error.

Bounded by default (a fixed seed, a few hundred examples per property, a few seconds);
`CHECKPOINTER_FUZZ_EXAMPLES=20000` runs longer with fresh random seeds.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import math
import os
import sys
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpointer.channels import DeltaSnapshot, Overwrite
from checkpointer.errors import CorruptValueError, DeserializationError
from checkpointer.savers.sql.delta import decode_delta_history
from checkpointer.savers.sql.reads import decode_tuples
from checkpointer.savers.sql.sqlite_dialect import SqliteDialect
from checkpointer.serde import MsgpackSerializer
from checkpointer.serde.compression import compress, load_typed
from checkpointer.serde.encryption import EncryptedSerializer


def example_settings(default_examples: int) -> settings:
    """Hypothesis settings for the fuzz and property suites: derandomized and quick by
    default; `CHECKPOINTER_FUZZ_EXAMPLES=N` runs N random examples per test instead."""
    return settings(
        max_examples=int(os.environ.get("CHECKPOINTER_FUZZ_EXAMPLES", default_examples)),
        deadline=None,
        database=None,
        derandomize="CHECKPOINTER_FUZZ_EXAMPLES" not in os.environ,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


FUZZ = example_settings(200)
EXAMPLES = FUZZ.max_examples
FUZZ_HALF = settings(FUZZ, max_examples=max(1, EXAMPLES // 2))
"""For properties whose inputs are slow to generate (or covered elsewhere too)."""

ALLOWED_MODULE = "colorsys"
"""A harmless stdlib module the second serializer allowlists, so the check can tell an
allowed import from a forbidden one."""

STRICT = MsgpackSerializer(strict=True)
DEFAULT = MsgpackSerializer()
PERMISSIVE = MsgpackSerializer(allowed_modules=[ALLOWED_MODULE])

DANGEROUS_MODULES = [
    "os",
    "subprocess",
    "pickle",
    "ctypes",
    "shutil",
    "socket",
    "builtins",
    "importlib",
    "sys",
    "code",
    "pty",
    "antigravity",
    "this",
    "webbrowser",
    "tkinter",
    "idlelib",
    "turtle",
    "xmlrpc.server",
    "http.server",
    "checkpointer.savers.postgres",
    "tests.crash_worker",
    ALLOWED_MODULE,
    "colorsys.evil",
    "",
    "..",
    "os.path",
]
DANGEROUS_NAMES = [
    "system",
    "Popen",
    "loads",
    "CDLL",
    "__import__",
    "eval",
    "exec",
    "open",
    "getattr",
    "rmtree",
    "hls_to_rgb",
    "object.__subclasses__",
    "Path",
    "SystemExit",
    "KeyboardInterrupt",
    "<locals>.X",
    "",
]
EXT_CODES = [*range(1, 21), *range(32, 40), 48, 49, 50, 64]


def load_checked(serde: Any, data: tuple[str, bytes], allowed: frozenset[str] = frozenset()) -> Any:
    """Load like a saver; only DeserializationError may escape; no new module but
    `allowed` (and their parents) may appear in sys.modules."""
    before = set(sys.modules)
    try:
        return load_typed(serde, data)
    except DeserializationError:
        return None
    finally:
        new = set(sys.modules) - before
        assert new <= allowed, f"loading imported {sorted(new - allowed)} from {data!r:.200}"


# ------------------------------------------------------------------ strategies
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.binary(max_size=20),
    st.sampled_from(DANGEROUS_MODULES + DANGEROUS_NAMES),
)


def ext_leaf() -> st.SearchStrategy[Any]:
    return st.builds(
        msgpack.ExtType,
        st.one_of(st.sampled_from(EXT_CODES), st.integers(0, 127)),
        st.one_of(st.just(b""), st.binary(max_size=24)),
    )


def tagged(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """What the serializer writes for a non-plain value: [marker, *args]; class references
    get (module, qualname) pairs from the dangerous lists."""
    marker = st.builds(msgpack.ExtType, st.sampled_from(EXT_CODES), st.just(b""))
    class_ref = st.tuples(
        st.sampled_from([32, 33, 34, 35, 36, 37, 38]).map(lambda c: msgpack.ExtType(c, b"")),
        st.sampled_from(DANGEROUS_MODULES),
        st.sampled_from(DANGEROUS_NAMES),
        st.lists(children, max_size=3),
    ).map(lambda t: [t[0], t[1], t[2], *t[3]])
    generic = st.tuples(marker, st.lists(children, max_size=4)).map(lambda t: [t[0], *t[1]])
    return st.one_of(class_ref, generic)


structured = st.recursive(
    st.one_of(scalars, ext_leaf()),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(
            st.one_of(st.text(max_size=8), st.integers(-(2**63), 2**63 - 1)), children, max_size=4
        ),
        tagged(children),
    ),
    max_leaves=15,
)


def sample_values() -> list[Any]:
    """Values whose valid encodings are mutated."""
    return [
        {"messages": ["hi", ("a", 1)], "n": 2**80, "when": datetime(2024, 1, 2, tzinfo=UTC)},
        DeltaSnapshot([1, 2, {3, 4}]),
        Overwrite(frozenset({"x"})),
        [UUID(int=7), Decimal("1.5"), b"\x00\xff", None, math.inf],
        ValueError("boom", 3),
        {"deep": [[[[["x"]]]]]},
    ]


VALID = [STRICT.dumps_typed(v) for v in sample_values()]


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, bytes]:
    tag, data = draw(st.sampled_from(VALID))
    raw = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "cut", "insert", "dup"]))
        if not raw:
            break
        i = draw(st.integers(0, len(raw) - 1))
        if op == "flip":
            raw[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "cut":
            del raw[i:]
        elif op == "insert":
            raw[i:i] = draw(st.binary(min_size=1, max_size=4))
        else:
            raw[i:i] = raw[i : i + draw(st.integers(1, 8))]
    return tag, bytes(raw)


tags = st.one_of(
    st.sampled_from(["msgpack", "bytes", "null", "msgpack+zstd", "aesgcm", "json", "pickle"]),
    st.text(max_size=12),
)


# --------------------------------------------------------------------- loads
@FUZZ
@given(tags, st.binary(max_size=256))
def test_random_pairs_load_or_raise_typed(tag: str, data: bytes) -> None:
    load_checked(STRICT, (tag, data))
    load_checked(PERMISSIVE, (tag, data))
    load_checked(DEFAULT, (tag, data))


@FUZZ
@given(structured)
def test_structured_hostile_payloads_import_nothing(value: Any) -> None:
    packed = msgpack.packb(value, use_bin_type=True)
    load_checked(STRICT, ("msgpack", packed))
    load_checked(DEFAULT, ("msgpack", packed))
    load_checked(PERMISSIVE, ("msgpack", packed))
    load_checked(STRICT, ("msgpack+zstd", compress(packed)))


@FUZZ
@given(mutated())
def test_mutated_encodings_load_or_raise_typed(pair: tuple[str, bytes]) -> None:
    load_checked(STRICT, pair)


class _ImportingSerde:
    """A serializer that imports while loading: what the check below must catch."""

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        import colorsys  # noqa: F401

        return None


def test_the_import_check_is_not_vacuous_and_even_allowed_modules_are_not_imported() -> None:
    """The property above would catch an import; and a reference into an allowlisted module
    that is not loaded does not import it either (loading never imports)."""
    for code in (33, 37, 38):
        ref = msgpack.packb([msgpack.ExtType(code, b""), ALLOWED_MODULE, "Thing", {}, {}][:5])
        saved = sys.modules.pop(ALLOWED_MODULE, None)
        try:
            load_checked(PERMISSIVE, ("msgpack", ref))  # no import at all
            assert ALLOWED_MODULE not in sys.modules
            with pytest.raises(AssertionError, match="imported"):
                load_checked(_ImportingSerde(), ("msgpack", ref))
        finally:
            sys.modules.pop(ALLOWED_MODULE, None)
            if saved is not None:
                sys.modules[ALLOWED_MODULE] = saved


def test_deep_nesting_is_a_typed_error_not_a_crash() -> None:
    depth = 200_000
    raw = b"\x91" * depth + b"\xc0"
    load_checked(STRICT, ("msgpack", raw))
    marker = msgpack.packb(msgpack.ExtType(2, b""))
    raw = (b"\x92" + marker) * depth + b"\xc0"
    load_checked(STRICT, ("msgpack", raw))


hashable = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**100), max_value=2**100),
        st.text(max_size=10),
        st.binary(max_size=10),
    ),
    lambda c: st.one_of(st.tuples(c, c), st.frozensets(c, max_size=3)),
    max_leaves=8,
)
plain = st.recursive(
    st.one_of(hashable, st.floats(allow_nan=False)),
    lambda c: st.one_of(
        st.lists(c, max_size=4),
        st.tuples(c, c),
        st.dictionaries(hashable, c, max_size=4),
        st.sets(hashable, max_size=4),
    ),
    max_leaves=20,
)


@FUZZ_HALF
@given(plain)
def test_round_trips_are_lossless(value: Any) -> None:
    assert STRICT.loads_typed(STRICT.dumps_typed(value)) == value


# -------------------------------------------------------------- row decoders
def decode(fn: Any, *args: Any) -> Any:
    """Call a row decoder, giving it a dialect and the thread it reads if its signature
    takes them (the decoders' signatures belong to the savers and may grow). Generators
    are drained: a decoder that yields must fail as it goes, not when first called."""
    params = inspect.signature(fn).parameters
    extra = {"d": SqliteDialect(), "thread_id": "t", "checkpoint_ns": ""}
    result = fn(*args, **{k: v for k, v in extra.items() if k in params})
    return list(result) if inspect.isgenerator(result) else result


def _checkpoint_row(cid: str, rec: Any = None, meta: Any = None) -> tuple[Any, ...]:
    record = rec if rec is not None else json.dumps({"v": 4, "ts": "", "channel_versions": {}})
    # (k, kind, thread, ns, checkpoint id, parent, page limit, data, record, metadata)
    return (1, 0, "t", "", cid, None, 1, None, record, meta or '{"step": 1}')


value_pairs = st.one_of(mutated(), st.tuples(tags, st.binary(max_size=64)))


@FUZZ_HALF
@given(st.lists(st.tuples(st.sampled_from([1, 2]), st.text(max_size=6), value_pairs), max_size=8))
def test_decode_tuples_with_corrupt_values_raises_only_typed(rows: list[Any]) -> None:
    built: list[tuple[Any, ...]] = [_checkpoint_row("c1")]
    for kind, channel, (tag, blob) in rows:
        if kind == 1:
            built.append((1, 1, channel, "v1", None, tag, None, blob, None, None))
        else:
            built.append((1, 2, "", "task", channel, tag, 0, blob, None, None))
    before = set(sys.modules)
    with contextlib.suppress(DeserializationError):
        decode(decode_tuples, built, STRICT)
    assert set(sys.modules) == before


@FUZZ_HALF
@given(
    st.lists(
        st.tuples(st.sampled_from([0, 1]), st.sampled_from(["a", "b", "zz"]), value_pairs),
        max_size=8,
    )
)
def test_decode_delta_history_with_corrupt_values_raises_only_typed(rows: list[Any]) -> None:
    built = [
        (kind, depth, channel, "", "task", depth, tag, blob, "ref")
        for depth, (kind, channel, (tag, blob)) in enumerate(rows)
    ]
    with contextlib.suppress(DeserializationError):
        decode(decode_delta_history, built, ["a", "b"], STRICT)


CORRUPT_RECORDS = [
    ("{bad", None),
    ("[]", None),
    ('"text"', None),
    ("null", None),
    ('{"channel_versions": 5}', None),
    ('{"v": 4, "ts": "", "channel_versions": {}}', "[1]"),
    ('{"v": 4, "ts": "", "channel_versions": {}}', "{bad"),
    ('{"v": 4, "ts": "", "channel_versions": {}}', '{"counters_since_delta_snapshot": 3}'),
]


@pytest.mark.parametrize(("rec", "meta"), CORRUPT_RECORDS)
def test_decode_tuples_with_corrupt_records_raises_only_typed(rec: str, meta: str | None) -> None:
    with pytest.raises(CorruptValueError) as caught:
        decode(decode_tuples, [_checkpoint_row("c1", rec, meta)], STRICT)
    assert (caught.value.thread_id, caught.value.checkpoint_id) == ("t", "c1")


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=5)),
    lambda c: st.one_of(
        st.lists(c, max_size=3), st.dictionaries(st.text(max_size=5), c, max_size=3)
    ),
    max_leaves=10,
)
record_fields = st.sampled_from(
    [
        "v",
        "ts",
        "channel_versions",
        "versions_seen",
        "updated_channels",
        "pending_sends",
        "channel_values",
    ]
)


@st.composite
def shaped_records(draw: st.DrawFn) -> tuple[str, str]:
    """Records of (mostly) the right keys with values of any JSON shape, and metadata
    whose counters may be anything: what a buggy writer or a hand edit leaves behind."""
    record = draw(st.dictionaries(record_fields, json_values, max_size=5))
    meta = draw(
        st.dictionaries(
            st.sampled_from(["step", "counters_since_delta_snapshot"]), json_values, max_size=2
        )
    )
    text = json.dumps(record)
    if draw(st.booleans()):  # cut the text short: malformed JSON
        text = text[: draw(st.integers(0, len(text)))]
    return text, json.dumps(meta)


@FUZZ
@given(shaped_records())
def test_decode_tuples_with_shaped_records_raises_only_typed(record: tuple[str, str]) -> None:
    """Any checkpoint row decodes to a tuple whose fields have the documented types, or
    raises CorruptValueError naming it; never a TypeError, KeyError or JSON error."""
    rec, meta = record
    try:
        (tup,) = decode(decode_tuples, [_checkpoint_row("c1", rec, meta)], STRICT)
    except CorruptValueError as exc:
        assert exc.checkpoint_id == "c1"
        return
    cp = tup.checkpoint
    assert all(isinstance(v, str | int | float) for v in cp["channel_versions"].values())
    assert all(isinstance(v, dict) for v in cp["versions_seen"].values())
    assert cp["updated_channels"] is None or all(isinstance(c, str) for c in cp["updated_channels"])
    counters = tup.metadata.get("counters_since_delta_snapshot") or {}
    assert all(isinstance(v, tuple) and len(v) == 2 for v in counters.values())
    # Values kept inline are scalars: anything else in the record was refused above.
    assert all(type(v) in (type(None), bool, int, str) for v in cp["channel_values"].values())


# -------------------------------------------------------------------- crypto
KEY = bytes(range(32))
ENC = EncryptedSerializer(STRICT, keys={"k1": KEY, "k2": bytes(32)}, active_key_id="k1")
CIPHERTEXTS = [ENC.dumps_typed(v) for v in sample_values()]


@st.composite
def forged(draw: st.DrawFn) -> tuple[str, bytes]:
    if draw(st.booleans()):
        return "aesgcm", draw(st.binary(max_size=200))
    _, data = draw(st.sampled_from(CIPHERTEXTS))
    raw = bytearray(data)
    i = draw(st.integers(0, len(raw) - 1))
    op = draw(st.sampled_from(["flip", "cut", "insert"]))
    if op == "flip":
        raw[i] ^= 1 << draw(st.integers(0, 7))
    elif op == "cut":
        del raw[i:]
    else:
        raw[i:i] = draw(st.binary(min_size=1, max_size=3))
    return "aesgcm", bytes(raw)


@FUZZ
@given(forged())
def test_forged_ciphertexts_are_refused(pair: tuple[str, bytes]) -> None:
    """AES-GCM authenticates everything: any change is refused, never decoded."""
    before = set(sys.modules)
    with pytest.raises(DeserializationError):
        load_typed(ENC, pair)
    assert set(sys.modules) == before
