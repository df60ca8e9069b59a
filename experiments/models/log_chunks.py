"""The stored server log of a run: batches of consecutive lines, numbered from 1 and contiguous per run."""

from __future__ import annotations

from typing import Any, cast

import psycopg
from django.db import connections, models, transaction
from django.db.models import F

from .runs import Run


def _concrete(model: type[models.Model], name: str) -> models.Field:
    field = model._meta.get_field(name)
    assert isinstance(field, models.Field) and field.column
    return field


class LogChunkQuerySet(models.QuerySet["LogChunk"]):
    def append(self, run: Run, first_line: int, lines: list[str], new_offset: int, **fields: Any) -> bool:
        """Store a batch of lines as the run's next chunk and move its log position past them (setting `fields` on
        it too), only if the run's stored lines end right before `first_line` and `run.worker` drives it: True if
        so, False (nothing written) if not. On PostgreSQL one statement in autocommit: a flood's batch is a single
        round trip, where an UPDATE, an INSERT and a COMMIT were three."""
        connection = connections[self.db]
        if connection.vendor != "postgresql":
            with transaction.atomic(using=self.db):
                moved = Run.objects.filter(pk=run.pk, log_lines=first_line - 1, worker=run.worker).update(
                    log_lines=F("log_lines") + len(lines), log_offset=new_offset, **fields
                )
                if moved:
                    self.add(run.pk, first_line, lines)
                return bool(moved)
        quote = connection.ops.quote_name
        run_fields = {name: _concrete(Run, name) for name in ("id", "log_lines", "log_offset", "worker", *fields)}
        column = {name: quote(cast(str, field.column)) for name, field in run_fields.items()}
        values = [run_fields[name].get_db_prep_save(value, connection) for name, value in fields.items()]
        log_lines = column["log_lines"]
        sets = "".join(f", {column[name]} = %s" for name in fields)
        sql = (
            f"WITH moved AS (UPDATE {quote(Run._meta.db_table)} SET {log_lines} = {log_lines} + %s, "
            f"{column['log_offset']} = %s{sets} "
            f"WHERE {column['id']} = %s AND {log_lines} = %s AND {column['worker']} = %s "
            f"RETURNING {column['id']}) "
            f"INSERT INTO {quote(self.model._meta.db_table)} (run_id, first_line, line_count, text) "
            f"SELECT {column['id']}, %s, %s, %s FROM moved"
        )
        params = [len(lines), new_offset, *values, run.pk, first_line - 1, run.worker]
        connection.ensure_connection()
        # Django's error classes (a lost connection is its OperationalError, which the worker's retries know), as
        # its own cursors raise them; the text as a bound parameter, as in `add`.
        with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
            cursor.execute(sql, (*params, first_line, len(lines), "\n".join(lines)))
            return cursor.rowcount == 1

    def add(self, run_id: int, first_line: int, lines: list[str]) -> None:
        """Store a batch of lines as one chunk. On PostgreSQL the text travels as a bound parameter: Django's
        cursors bind on the client, escaping a flood's 2 MB batch in Python and making the server parse it back
        out of the SQL text, which took half of each batch's store (21 -> 11 ms for 10,000 lines)."""
        text = "\n".join(lines)
        connection = connections[self.db]
        if connection.vendor != "postgresql":
            self.create(run_id=run_id, first_line=first_line, line_count=len(lines), text=text)
            return
        connection.ensure_connection()
        table = connection.ops.quote_name(self.model._meta.db_table)
        with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
            cursor.execute(
                f"INSERT INTO {table} (run_id, first_line, line_count, text) VALUES (%s, %s, %s, %s)",
                (run_id, first_line, len(lines), text),
            )

    def contains_text(self, run_id: int, text: str) -> bool:
        """Whether a stored line of the run's log contains `text` (case-sensitive: an expectation is exact)."""
        return self.filter(run_id=run_id, text__contains=text).exists()

    def first_line_containing(self, run_id: int, text: str, *, within: int) -> str | None:
        """The first stored line of the run's log, among its first `within`, that contains `text` (case-sensitive)."""
        chunks = self.filter(run_id=run_id, first_line__lte=within, text__contains=text).order_by("first_line")
        chunk = chunks.values_list("text", flat=True).first()
        return next((line for line in (chunk or "").split("\n") if text in line), None)

    def lines(self, run_id: int, *, after: int, limit: int, containing: str | None = None) -> list[dict[str, Any]]:
        """Numbered lines after line `after` (1-based), at most `limit`; with `containing`, only lines that
        contain it, case-insensitively (the database narrows to the chunks that have a match)."""
        chunks = self.filter(run_id=run_id).annotate(last=F("first_line") + F("line_count") - 1).filter(last__gt=after)
        if containing:
            chunks = chunks.filter(text__icontains=containing)
            wanted = containing.casefold()
        else:
            chunks = chunks.filter(first_line__lte=after + limit)
        out: list[dict[str, Any]] = []
        for first_line, text in chunks.order_by("first_line").values_list("first_line", "text").iterator():
            for i, line in enumerate(text.split("\n")):
                n = first_line + i
                if n <= after or (containing and wanted not in line.casefold()):
                    continue
                out.append({"n": n, "text": line})
                if len(out) >= limit:
                    return out
        return out


class LogChunk(models.Model):
    """A batch of consecutive server log lines; line numbers are 1-based and contiguous per run."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE)
    first_line = models.PositiveIntegerField()
    line_count = models.PositiveIntegerField()
    # PostgreSQL compresses (TOAST) values this large by itself; a 10,000-line chunk shrinks several times.
    text = models.TextField()

    objects = LogChunkQuerySet.as_manager()

    class Meta:
        ordering = ["run_id", "first_line"]
        constraints = [models.UniqueConstraint(fields=["run", "first_line"], name="logchunk_first_line_unique")]

    def __str__(self) -> str:
        return f"run {self.run_id} lines {self.first_line}-{self.last_line}"

    @property
    def last_line(self) -> int:
        return self.first_line + self.line_count - 1

    def lines(self) -> list[str]:
        return self.text.split("\n")
