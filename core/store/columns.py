"""Additive schema changes for databases made by an earlier version.

``metadata.create_all`` creates missing tables but never alters an existing one, so a nullable
column added to a table in ``schema.py`` is added here (``ALTER TABLE ... ADD COLUMN``) when a
database made before it opens. Only nullable columns without a server default qualify: anything
else needs a real migration.
"""

from __future__ import annotations

from sqlalchemy import Connection, MetaData, inspect
from sqlalchemy.schema import CreateColumn


def add_missing_columns(conn: Connection, metadata: MetaData) -> list[str]:
    """Add every nullable column of ``metadata`` that an existing table lacks; returns
    ``table.column`` for each one added."""
    inspector = inspect(conn)
    existing_tables = set(inspector.get_table_names())
    added: list[str] = []
    for table in metadata.sorted_tables:
        if table.name not in existing_tables:
            continue
        present = {c["name"] for c in inspector.get_columns(table.name)}
        for column in table.columns:
            if column.name in present:
                continue
            if not column.nullable or column.primary_key:
                raise RuntimeError(
                    f"{table.name}.{column.name} is missing and is not nullable: "
                    "it needs a migration"
                )
            ddl = CreateColumn(column).compile(dialect=conn.dialect)
            conn.exec_driver_sql(f"ALTER TABLE {table.name} ADD COLUMN {ddl}")
            added.append(f"{table.name}.{column.name}")
    return added
