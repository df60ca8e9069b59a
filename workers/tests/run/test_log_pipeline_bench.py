"""bench/log_pipeline.py completes: a flood of more than one default-sized batch reaches the websocket whole.

The bench once lost every batch after the first (the tail's end cancelled a flush between storing a batch and
broadcasting it) and nobody noticed until a person ran it; here it runs with each suite, on the test database.
"""

from __future__ import annotations

import re
import sys

import pytest
from django.conf import settings

from simhost.hostsetup import REPO

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_it_delivers_a_flood_of_several_batches_to_the_websocket(server_process, tmp_path):
    lines = 2 * settings.SPECDASH_LOG_BATCH_LINES + 123  # two full batches and a remainder flushed at the end
    log_path = tmp_path / "bench.log"
    bench = server_process([sys.executable, str(REPO / "bench" / "log_pipeline.py"), "--lines", str(lines)], log_path)

    exit_code = bench.wait(timeout=240)
    output = log_path.read_text()

    assert exit_code == 0, output[-3000:]
    assert re.search(rf"log file: {lines:,} lines", output), output
    received = re.search(r"received by the websocket: +[\d.]+ s +([\d,]+) lines/s", output)
    assert received and int(received[1].replace(",", "")) > 0, output
    assert "ratio to the physical limit:" in output
