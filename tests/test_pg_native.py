"""Long statements converted to PostgreSQL's `$n` form (`savers/sql/pg_native.py`) run
exactly as psycopg runs them with its own `%` placeholders: the same rows for any mix of
named parameters (repeated or not), literal `%`, and text. Statements psycopg keeps its
own conversion of, or with other placeholders, are left to psycopg."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from checkpointer.savers.sql.pg_native import PSYCOPG_CACHED_BYTES, native
from tests.conftest import PG_URL, require_postgres
from tests.test_fuzz import example_settings

NAMES = ("a", "b", "thread_id", "x_1")
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=6)
LONG = "/*" + "p" * PSYCOPG_CACHED_BYTES + "*/ "
"""A comment that makes a statement longer than psycopg keeps the conversion of."""


@pytest.fixture(scope="module")
def conn() -> Iterator[psycopg.Connection[Any]]:
    require_postgres()
    with psycopg.connect(PG_URL, autocommit=True) as connection:
        yield connection


@st.composite
def statements(draw: Any) -> tuple[str, dict[str, str]]:
    """A long `SELECT` of a few columns, each a named parameter (names repeat) or a string
    literal holding `%%` (psycopg's literal `%` when a statement has parameters)."""
    columns = []
    for _ in range(draw(st.integers(1, 6))):
        if draw(st.booleans()):
            columns.append(f"%({draw(st.sampled_from(NAMES))})s::text")
        else:
            literal = draw(TEXT).replace("%", "%%").replace("'", "''")
            columns.append(f"'{draw(st.sampled_from(['', '%%', 'x%%y']))}{literal}'")
    params = {name: draw(TEXT) for name in NAMES}
    return LONG + "SELECT " + ", ".join(columns), params


@example_settings(60)
@given(statement=statements())
def test_a_converted_statement_returns_what_psycopg_returns(
    conn: psycopg.Connection[Any], statement: tuple[str, dict[str, str]]
) -> None:
    sql, params = statement
    want = conn.execute(sql, params).fetchall()
    converted = native(sql, params)
    assert converted is not None
    with psycopg.RawCursor(conn) as cur:
        got = cur.execute(*converted).fetchall()
    assert got == want


def test_a_name_used_twice_is_one_parameter() -> None:
    converted = native(LONG + "SELECT %(a)s, %(b)s, %(a)s, '100%%'", {"b": 2, "a": 1, "c": 3})
    assert converted == ((LONG + "SELECT $1, $2, $1, '100%'").encode(), [1, 2])


def test_statements_psycopg_handles_well_are_left_to_it() -> None:
    assert native("SELECT %(a)s", {"a": 1}) is None  # short: psycopg keeps its conversion
    assert native(LONG + "SELECT %(a)b", {"a": b"x"}) is None  # binary parameters
    assert native(LONG + "SELECT %s", (1,)) is None  # positional
    assert native(LONG + "SELECT 1 %", {"a": 1}) is None
    many = {f"p{i}": i for i in range(60)}
    sql = "SELECT " + ", ".join(f"%(p{i})s" for i in range(60))
    want = "SELECT " + ", ".join(f"${i + 1}" for i in range(60))
    assert native(sql, many) == (want.encode(), list(range(60)))  # 60 parameters: converted


def test_a_missing_parameter_is_psycopgs_error() -> None:
    with pytest.raises(psycopg.ProgrammingError, match="parameter missing: b"):
        native(LONG + "SELECT %(a)s, %(b)s", {"a": 1})
