"""Schema migrations: find the Alembic scripts, render them as SQL, apply them under a lock.

`setup()` does not hand a connection to Alembic. It asks Alembic (offline mode) for the SQL
that takes the database from its current revision to ours, and runs that SQL through the
saver's own driver (sqlite3, aiosqlite, psycopg sync or async) inside one transaction that
holds a lock, so the sync and async savers share one migration path and several processes
can call `setup()` at once.
"""

from __future__ import annotations

import io
import re
from collections.abc import Generator
from functools import lru_cache
from pathlib import Path
from typing import Any

from checkpointer.errors import SchemaVersionError
from checkpointer.savers.sql.schema import KNOWN_REVISIONS, SCHEMA_REVISION, quote_ident

_STATEMENT_END = re.compile(r";\s*\n\s*\n")


def script_location() -> Path:
    """The Alembic scripts: inside the wheel (`checkpointer/_migrations`) or at the repo root
    (editable install)."""
    package_root = Path(__file__).resolve().parents[2]
    for candidate in (package_root / "_migrations", package_root.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise FileNotFoundError(
        "checkpointer's migration scripts are missing (looked for checkpointer/_migrations "
        "and ./migrations next to the package); reinstall checkpointer"
    )


def alembic_config(dialect_name: str, schema: str | None, **attributes: Any) -> Any:
    """An Alembic Config built in code (no alembic.ini needed)."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(script_location()))
    cfg.attributes["dialect_name"] = dialect_name
    cfg.attributes["schema"] = schema
    cfg.attributes.update(attributes)
    return cfg


@lru_cache(maxsize=32)
def render_upgrade_sql(
    dialect_name: str,
    schema: str | None,
    from_revision: str | None,
    to_revision: str = SCHEMA_REVISION,
) -> str:
    """The SQL script that upgrades from `from_revision` (None: empty database) to
    `to_revision` (default: the revision this code uses)."""
    from alembic import command

    buffer = io.StringIO()
    cfg = alembic_config(dialect_name, schema)
    cfg.output_buffer = buffer
    target = to_revision if from_revision is None else f"{from_revision}:{to_revision}"
    command.upgrade(cfg, target, sql=True)
    return buffer.getvalue()


def split_statements(script: str) -> list[str]:
    """Alembic's offline output ends each statement with `;` and a blank line."""
    return [s.strip() for s in _STATEMENT_END.split(script + "\n\n") if s.strip()]


def upgrade_statements(
    dialect_name: str, schema: str | None, from_revision: str | None
) -> list[str]:
    return split_statements(render_upgrade_sql(dialect_name, schema, from_revision))


def check_revision(found: str | None, *, where: str) -> None:
    """Raise SchemaVersionError unless the database is at the revision this code uses."""
    if found == SCHEMA_REVISION:
        return
    if found is None:
        raise SchemaVersionError(
            f"{where} has no checkpointer schema: call saver.setup() once, or run "
            "`checkpointer migrate --url URL`"
        )
    if found in KNOWN_REVISIONS:
        raise SchemaVersionError(
            f"{where} has checkpointer schema revision {found}, older than this code's "
            f"{SCHEMA_REVISION}: run `checkpointer migrate --url URL` (or saver.setup())"
        )
    raise SchemaVersionError(
        f"{where} has checkpointer schema revision {found!r}, newer than this code "
        f"(which knows {', '.join(KNOWN_REVISIONS)}): upgrade the checkpointer package, "
        "or point it at another database"
    )


def plan_upgrade(
    dialect_name: str, schema: str | None, found: str | None, *, where: str
) -> list[str] | None:
    """Statements to run for a database at `found`, or None when it is current.

    Refuses a database newer than this code: downgrading someone else's data is not ours
    to decide.
    """
    if found == SCHEMA_REVISION:
        return None
    if found is not None and found not in KNOWN_REVISIONS:
        check_revision(found, where=where)
    return upgrade_statements(dialect_name, schema, found)


Setup = Generator[tuple[str, Any], Any, None]


def upgrade_script(url: str, *, schema: str | None = None) -> str:
    """The SQL script that creates this code's schema on an empty database of `url`'s kind
    (a SQLite path or URL, or a `postgresql://` URL), for review or for a DBA to apply.
    Nothing is touched. (Applying it is `checkpointer.savers.migrate.migrate`, which opens
    a saver: an upper layer this module must not import.)"""
    kind, _target = parse_url(url)
    if kind != "postgres":
        return render_upgrade_sql("sqlite", None, None)
    pg_schema = schema or "public"
    script = render_upgrade_sql("postgresql", pg_schema, None)
    return f"CREATE SCHEMA IF NOT EXISTS {quote_ident(pg_schema)};\n\n{script}"


def parse_url(url: str) -> tuple[str, str]:
    """('postgres', conninfo) or ('sqlite', path) for a database URL or a plain path."""
    if url.startswith(("postgresql://", "postgres://")):
        return "postgres", url
    if url.startswith(("postgresql+psycopg://", "postgresql+psycopg2://")):
        return "postgres", "postgresql://" + url.split("://", 1)[1]
    if url.startswith("sqlite:///"):
        return "sqlite", url[len("sqlite:///") :]
    if url.startswith("sqlite://"):
        return "sqlite", url[len("sqlite://") :] or ":memory:"
    if "://" in url:
        raise ValueError(
            f"unsupported database URL {url!r}: use postgresql://... or sqlite:///path"
        )
    return "sqlite", url
