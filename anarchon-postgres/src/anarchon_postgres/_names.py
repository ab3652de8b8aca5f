"""The quoted names of everything anarchon keeps in one schema, from the `table` option."""

from __future__ import annotations

import attrs
from psycopg import sql

__all__ = ["Names"]


@attrs.frozen
class Names:
    """``<schema>.<table>`` (runs), ``<table>_jobs`` (one row per job: the claim lock and the
    L11 floor), ``<table>_schema`` (the schema version), the control tables ``<table>_pauses``
    (P1) and ``<table>_triggers`` (X1), and the functions ``<table>_claim`` and
    ``<table>_claim_many``."""

    schema: str
    table: str

    @property
    def jobs_table(self) -> str:
        return f"{self.table}_jobs"

    @property
    def version_table(self) -> str:
        return f"{self.table}_schema"

    @property
    def pauses_table(self) -> str:
        return f"{self.table}_pauses"

    @property
    def triggers_table(self) -> str:
        return f"{self.table}_triggers"

    @property
    def members_table(self) -> str:
        return f"{self.table}_members"

    @property
    def control_tables(self) -> tuple[str, ...]:
        """The tables of pause and trigger, and the member list (M1), which a schema made
        before them lacks."""
        return (self.pauses_table, self.triggers_table, self.members_table)

    @property
    def all_tables(self) -> tuple[str, ...]:
        return (*self.tables, *self.control_tables)

    @property
    def function(self) -> str:
        return f"{self.table}_claim"

    @property
    def batch_function(self) -> str:
        return f"{self.table}_claim_many"

    @property
    def functions(self) -> tuple[str, str]:
        return (self.function, self.batch_function)

    @property
    def tables(self) -> tuple[str, str, str]:
        return (self.table, self.jobs_table, self.version_table)

    @property
    def runs(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.table)

    @property
    def jobs(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.jobs_table)

    @property
    def version(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.version_table)

    @property
    def pauses(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.pauses_table)

    @property
    def triggers(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.triggers_table)

    @property
    def members(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.members_table)

    @property
    def claim(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.function)

    @property
    def claim_many(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.batch_function)

    def shown(self, name: str) -> str:
        """How messages name a table: ``schema.table``."""
        return f"{self.schema}.{name}"

    def lock_key(self) -> str:
        """The text hashed into the advisory lock that serializes schema creation."""
        return f"anarchon:{self.schema}.{self.table}"
