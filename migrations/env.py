"""Alembic environment for checkpointer's schema.

Configured in code (no alembic.ini): `checkpointer.savers.sql.migration` builds the Config and
passes, in `config.attributes`:
- `schema`: the PostgreSQL schema holding the tables (None on SQLite);
- `dialect_name`: for offline rendering (`migrate(..., sql=True)`, and `setup()`, which
  renders the SQL and runs it through the saver's own driver);
- `connection`: an optional SQLAlchemy connection for online runs (tests, plain `alembic`).
"""

from __future__ import annotations

from alembic import context

from checkpointer.savers.sql.schema import VERSION_TABLE, build_metadata

config = context.config
schema = config.attributes.get("schema")


def run_offline() -> None:
    dialect_name = config.attributes.get("dialect_name", "sqlite")
    context.configure(
        dialect_name=dialect_name,
        target_metadata=build_metadata(dialect_name, schema),
        literal_binds=True,
        version_table=VERSION_TABLE,
        version_table_schema=schema,
        transactional_ddl=False,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes["connection"]
    context.configure(
        connection=connection,
        target_metadata=build_metadata(connection.dialect.name, schema),
        version_table=VERSION_TABLE,
        version_table_schema=schema,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
