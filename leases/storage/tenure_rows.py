"""The SQL of tenures (leases.models.Tenure) on the lease hot path: a new tenure's INSERT, and the
UPDATE of a resource's open tenure (its newest, if not ended), compiled once per connection and per
set of columns, run on the lease transaction's driver cursor, as statements.py does for the lease row
and its history event. The UPDATE that ends a tenure also sets its length class (Tenure.length_class)
from the row's began_at and the end passed in, as migration 0020 classed the tenures before it: with a
millisecond's margin (a class one too high is still right), the length computed by the engine."""

from __future__ import annotations

from engines import postgres
from leases.models.tenure import LONG_CLASS
from leases.storage import statements

APPEND = "+"  # a column name ending so is appended to (``fingerprints``), not replaced


class TenureRows:
    def __init__(self, model):
        self.model = model
        self.inserts = statements.RowInsert(model)

    def insert(self, conn, cursor, **columns) -> None:
        values = self.inserts.start(conn, **columns)
        self.inserts.insert(values, conn=conn, cursor=cursor)

    def _compile_update(self, columns: tuple[str, ...], conn):
        q = conn.ops.quote_name
        table = q(self.model._meta.db_table)
        sets, fields = [], []
        for name in columns:
            column = name.rstrip(APPEND)
            fields.append(self.model._meta.get_field(column))
            sets.append(f"{q(column)} = {q(column)} || %s" if name.endswith(APPEND) else f"{q(column)} = %s")
        if "ended_at" in columns:  # k when held at most 4**k s (less a millisecond); else None (long)
            seconds = (f"EXTRACT(EPOCH FROM (%s - {q('began_at')}))" if postgres.in_use(conn)
                       else f"(julianday(%s) - julianday({q('began_at')})) * 86400.0")
            ladder = " ".join(f"WHEN {seconds} <= {4 ** k - 0.001} THEN {k}" for k in range(LONG_CLASS))
            sets.append(f"{q('length_class')} = CASE {ladder} ELSE NULL END")
        newest = (f"SELECT {q('id')} FROM {table} WHERE {q('blob')} = %s AND {q('container')} = %s "
                  f"AND {q('account')} = %s ORDER BY {q('began_at')} DESC, {q('id')} DESC LIMIT 1")
        sql = (f"UPDATE {table} SET {', '.join(sets)} WHERE {q('id')} = ({newest}) "
               f"AND {q('generation')} = %s AND {q('ended_at')} IS NULL")
        return statements.native_sql(sql, conn), statements.value_preparers(fields, conn)

    def update_open(self, conn, cursor, *, account: str, container: str, blob: str, generation: int,
                    **columns) -> int:
        """Set ``columns`` on the resource's open tenure of ``generation`` (none: nothing);
        a name ending in ``+`` appends. Returns the rows changed (0 or 1)."""
        names = tuple(columns)
        sql, preparers = statements.compiled(conn, ("tenure-update", self.model, names),
                                             lambda c: self._compile_update(names, c))
        values = statements.prepared_values(preparers, list(columns.values()), conn)
        if "ended_at" in columns:  # the end again, once for each class's comparison
            values += [values[names.index("ended_at")]] * LONG_CLASS
        cursor.execute(sql, [*values, blob, container, account, generation])
        return cursor.rowcount
