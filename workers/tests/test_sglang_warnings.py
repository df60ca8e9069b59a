"""The warnings a server log carries, read from the lines of every era the reference quotes, each with its line."""

from __future__ import annotations

import pytest

from workers.engines.live_facts import LogFacts
from workers.sglang.adapter import SGLANG
from workers.sglang.warnings import find_warning

LINES = [
    # 0.5.7-0.5.10, printed bare before logging is configured (reference §1.3)
    ("Overlap scheduler is disabled when spec v2 is off or using unsupported speculative algorithm. You can set env "
     "SGLANG_ENABLE_SPEC_V2=True to enable the experimental overlap scheduler. ", "overlap_disabled"),
    ("Overlap scheduler is disabled because of using eagle speculative decoding.", "overlap_disabled"),
    ("Max running requests is reset to 48 for speculative decoding. You can override this by explicitly setting "
     "--max-running-requests.", "max_running_reset"),
    ("Spec v2 is enabled for eagle/eagle3 speculative decoding and overlap schedule is turned on.", "spec_v2"),
    ("[2026-05-23 10:00:00] Spec v1 is used for eagle/eagle3/standalone speculative decoding because "
     "SGLANG_ENABLE_SPEC_V2=False.", "spec_v2"),
    ("[2026-02-23 10:00:30 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 2, #new_tokens_gained: "
     "512, #new_token_ratio: 0.4000 -> 0.5000", "kv_retraction"),
    ("[2026-07-21 08:21:00] \x1b[1;33m'--cuda-graph-max-bs' is deprecated and will be removed in a future release. "
     "Use '--cuda-graph-max-bs-decode' instead.\x1b[0m", "deprecation"),
    ("[2025-02-07 12:25:39] Endpoint '/get_model_info' is deprecated and will be removed in a future version. "
     "Please use '/model_info' instead.", "deprecation"),
    ("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1",
     "spec_params_adjusted"),
]  # fmt: skip


@pytest.mark.parametrize(("line", "kind"), LINES)
def test_it_recognises_each_warning_whatever_its_era(line, kind):
    found = find_warning(line)
    assert found is not None and found.kind == kind
    assert "\x1b" not in found.message


@pytest.mark.parametrize(
    "line",
    [
        "[2026-02-23 10:00:24] Decode batch, #running-req: 1, #token: 47, token usage: 0.00, cuda graph: True, "
        "gen throughput (token/s): 2.18, #queue-req: 0",
        "[2026-02-23 10:00:12] Capture cuda graph end. Time elapsed: 3.41 s. mem usage=0.50 GB. avail mem=47.00 GB.",
        "[2026-02-23 10:00:24] The server is fired up and ready to roll!",
    ],
)
def test_it_finds_no_warning_in_ordinary_lines(line):
    assert find_warning(line) is None


def test_it_reports_each_warning_once_with_its_line_and_judges_graph_capture_against_the_batch_limit():
    facts = LogFacts(SGLANG.grammar, {})
    lines = [
        "Max running requests is reset to 48 for speculative decoding. You can override this by explicitly setting "
        "--max-running-requests.",
        "[2026-02-23 10:00:05] max_total_num_tokens=200000, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        "max_running_requests=48, context_len=262144, available_gpu_mem=50.00 GB",
        "[2026-02-23 10:00:09] Capture cuda graph bs [1, 2, 3, 4, 5, 6, 7, 8]",
        "[2026-02-23 10:00:30] KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_tokens_gained: 1, "
        "#new_token_ratio: 0.1 -> 0.2",
        "[2026-02-23 10:00:31] KV cache pool is full. Retract requests. #retracted_reqs: 4, #new_tokens_gained: 9, "
        "#new_token_ratio: 0.2 -> 0.3",
    ]

    batch = facts.read(10, lines)

    found = [(w.kind, n) for w, n, _ in batch.server_warnings]
    assert found == [("max_running_reset", 10), ("cuda_graph_limit", 12), ("kv_retraction", 13)]
    graph = batch.server_warnings[1]
    assert "up to 8, below the 48 requests the server runs at once" in graph[0].message and graph[2] == lines[2]
    assert facts.read(20, lines[3:]).server_warnings == []  # already reported


def test_it_judges_graph_capture_by_the_concurrency_the_run_benchmarks():
    limits = (
        "[2026-02-23 10:00:05] max_total_num_tokens=900000, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        "max_running_requests=2048, context_len=262144, available_gpu_mem=50.00 GB"
    )
    capture = "[2026-02-23 10:00:09] Capture cuda graph bs [1, 2, 4, 8, 16, 32, 64, 128, 256]"

    quiet = LogFacts(SGLANG.grammar, {}, max_concurrency=64).read(1, [limits, capture, "x"])
    loud = LogFacts(SGLANG.grammar, {}, max_concurrency=512).read(1, [limits, capture, "x"])

    assert quiet.server_warnings == []  # a baseline's default: graphs to 256, the server may run 2048
    [(warning, n, _)] = loud.server_warnings
    assert n == 2 and "up to 256, below the concurrency 512 this run benchmarks" in warning.message


def test_it_says_nothing_of_graphs_that_cover_every_batch_the_server_runs():
    facts = LogFacts(SGLANG.grammar, {})
    batch = facts.read(
        1,
        [
            "[2026-02-23 10:00:05] max_total_num_tokens=200000, chunked_prefill_size=8192, max_prefill_tokens=16384, "
            "max_running_requests=8, context_len=262144, available_gpu_mem=50.00 GB",
            "[2026-02-23 10:00:09] Capture cuda graph bs [1, 2, 3, 4, 5, 6, 7, 8]",
            "[2026-02-23 10:00:10] Capture cuda graph end. Time elapsed: 3.41 s. mem usage=0.50 GB. "
            "avail mem=47.00 GB.",
        ],
    )
    assert batch.server_warnings == []
