"""How a run's log is stored: a flood's batches are large rows, compressed by PostgreSQL."""

from __future__ import annotations

import pytest
from django.db import connection

from experiments.actions.runs import do_append_log
from experiments.models import LogChunk, Run
from experiments.tests.factories import make_run

pytestmark = pytest.mark.django_db


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the column's compression is PostgreSQL's")
def test_it_compresses_a_floods_batch_with_lz4_and_reads_the_same_lines_back():
    """pglz compressed a 10,000-line batch at a fraction of the log path's speed; lz4 is several times faster."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'")
        if not cursor.fetchone()[0]:
            pytest.skip("this PostgreSQL was built without lz4")
    run = make_run(state=Run.State.BENCHMARKING, worker="w")
    lines = [f"[2026-11-29 10:00:00 TP0] Decode batch [{n}], #running-req: 4, accept len: 2.05" for n in range(10000)]

    do_append_log(run, 1, lines, 700_000)

    chunk = LogChunk.objects.get(run=run)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_column_compression(text) FROM experiments_logchunk WHERE id = %s", [chunk.pk])
        assert cursor.fetchone()[0] == "lz4"
    assert chunk.lines() == lines
    assert LogChunk.objects.lines(run.pk, after=9998, limit=5) == [
        {"n": 9999, "text": lines[9998]},
        {"n": 10000, "text": lines[9999]},
    ]
