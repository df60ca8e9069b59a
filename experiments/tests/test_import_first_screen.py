"""An imported experiment's first screen leads with what the import says: the source tool and its version, and per
config the throughput, latency and acceptance of its file, at each concurrency (analysis/imported_summary.py)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest

from experiments.analysis.imported_summary import ImportedRunFacts, imported_summary

from .factories import make_host
from .test_import_bench_serving import C4, STATED, _jsonl
from .test_imports import BASELINE, EAGLE3, _files, _post


def _run(run_id: int, config: str = "llama-8b eagle3", day: int = 1) -> ImportedRunFacts:
    return ImportedRunFacts(run_id, config, "sglang bench_serving", "0.5.23", datetime(2026, 11, day, tzinfo=UTC))


def test_it_says_the_tool_version_and_each_levels_figures():
    cells: list[dict[str, Any]] = [
        {"run_id": 1, "concurrency": 4, "output_throughput": 1234.4, "mean_tpot_ms": 12.34, "mean_ttft_ms": 45.0,
         "accept_length": None, "server_accept_length": 3.1},
        {"run_id": 1, "concurrency": 128, "output_throughput": 20480.0, "mean_tpot_ms": 30.0},
    ]  # fmt: skip

    sentence = imported_summary([_run(1)], cells)

    assert sentence == (
        "Imported from SGLang bench_serving 0.5.23: llama-8b eagle3 1,234 tok/s at c=4 (TPOT 12.3 ms, TTFT 45.0 ms, "
        "server accept length 3.10), 20,480 tok/s at c=128 (TPOT 30.0 ms)."
    )


def test_of_many_nights_it_says_the_latest_and_how_many():
    cells = [{"run_id": n, "concurrency": 1, "output_throughput": 100.0 + n} for n in (1, 2, 3)]

    sentence = imported_summary([_run(1, day=1), _run(3, day=3), _run(2, day=2)], cells)

    assert sentence == (
        "Imported from SGLang bench_serving 0.5.23: llama-8b eagle3 103 tok/s at c=1 (the latest of 3 imported runs, "
        "measured 2026-11-03)."
    )
    assert imported_summary([], cells) is None and imported_summary([_run(9)], cells) is None


def _first_screen(page: str) -> str:
    """The page's content up to its first card: what a reader sees before scrolling."""
    main = page[page.index("<h1>") :]
    return main[: main.index('<section class="card"')] if '<section class="card"' in main else main


@pytest.mark.django_db
def test_an_imported_server_alone_leads_with_the_files_numbers(client, member):
    make_host(name="gpu-8")
    body = _post(client, member, {"host": "gpu-8", "files": [{"name": "c4.jsonl", "content": _jsonl(C4),
                                                              "given": STATED}]}).json()  # fmt: skip
    client.force_login(member)

    first = _first_screen(client.get(f"/experiments/{body['id']}/").content.decode())

    # server_info is null: the file does not say the version; the numbers are the file's, as written.
    said = re.search(r'<p class="headline" id="imported-answer">([^<]*)</p>', first)
    assert said is not None, first
    assert said.group(1) == (
        f"Imported from SGLang bench_serving: llama-8b eagle3 s3 k1 d4 tp2 {C4['output_throughput']:,.0f} tok/s at "
        f"c=4 (TPOT {C4['mean_tpot_ms']:,.1f} ms, TTFT {C4['mean_ttft_ms']:,.1f} ms)."
    )


@pytest.mark.django_db
def test_beside_a_comparison_it_says_where_the_numbers_came_from(client, member):
    make_host(name="gpu-8")
    body = _post(client, member, {"host": "gpu-8", "files": _files(("b.jsonl", BASELINE), ("e.jsonl", EAGLE3))}).json()
    client.force_login(member)

    first = _first_screen(client.get(f"/experiments/{body['id']}/").content.decode())

    assert 'id="headline"' in first and 'id="imported-answer">Imported from SGLang bench_serving 0.5.9: ' in first
    assert "320 tok/s at c=4" in first  # the speculative file's own figure
