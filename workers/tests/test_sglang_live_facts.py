"""Facts read from log lines: live series for the run page, and a benchmark cell's server-side summary."""

from __future__ import annotations

from workers.engines.facts import CaptureProgress, GraphCaptured, Retraction, ServerLimits
from workers.engines.live_facts import KEEP_POINTS, LogFacts, decode_summary, merge_series
from workers.sglang import parse_line
from workers.sglang.adapter import SGLANG

DECODE = (
    "[2026-11-29 10:00:0{s} TP0] Decode batch, #running-req: {r}, #token: 180, token usage: 0.00, accept len: {a}, "
    "accept rate: 0.65, cuda graph: True, gen throughput (token/s): {g}, #queue-req: 0"
)


def test_it_reads_decode_points_custom_metrics_and_progress():
    facts = LogFacts(SGLANG.grammar, {"verify_ms": r"Target verify: (?P<verify_ms>[\d.]+) ms"})
    lines = [
        "Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:01<00:01,  2.00it/s]",
        DECODE.format(s=1, r=1, a=2.05, g=93.1),
        "[2026-11-29 10:00:01 TP0] EAGLE3 profile: step=1 bs=1 draft: 3.00 ms (2 steps) Target verify: 17.10 ms",
    ]

    batch = facts.read(10, lines)

    assert batch.progress == 50
    assert [(p["n"], p["accept_len"], p["gen_throughput"]) for p in batch.decode] == [(11, 2.05, 93.1)]
    assert batch.metrics == {"verify_ms": [[12, 17.1]]}


def test_it_keeps_only_the_newest_points_of_a_flood():
    lines = [DECODE.format(s=1, r=1, a=2.0, g=float(i)) for i in range(KEEP_POINTS + 50)]

    batch = LogFacts(SGLANG.grammar, {}).read(1, lines)
    merged = merge_series({"decode": batch.decode[:10]}, batch)

    assert len(batch.decode) == KEEP_POINTS and batch.decode[-1]["n"] == KEEP_POINTS + 50
    assert len(merged["decode"]) == KEEP_POINTS and merged["decode"][-1]["n"] == KEEP_POINTS + 50


def test_it_summarises_the_servers_decode_lines_of_a_window():
    lines = ["[2026-11-29 10:00:00] Prefill batch, #new-seq: 1", DECODE.format(s=1, r=1, a=2.0, g=90.0),
             DECODE.format(s=2, r=4, a=1.5, g=300.0)]  # fmt: skip

    summary = decode_summary(SGLANG.grammar, 100, lines)

    assert summary == {
        "lines": 2, "idle_lines": 0, "first_line": 101, "last_line": 102, "mean_gen_throughput": 195.0,
        "mean_accept_len": 1.75, "max_running_req": 4,
    }  # fmt: skip
    assert decode_summary(SGLANG.grammar, 1, ["nothing here"]) == {"lines": 0}


# Real (sglang#11948, reference §3.4): the warm-up prefill found nothing running, so the first Decode line's
# interval holds the idle time before it.
WINDOW = """\
[2025-10-22 10:27:56 TP0] Prefill batch. #new-seq: 1, #new-token: 28, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0, 
[2025-10-22 10:27:57 TP0] Decode batch. #running-req: 1, #token: 108, token usage: 0.00, accept len: 2.17, accept rate: 0.54, cuda graph: True, gen throughput (token/s): 0.39, #queue-req: 0, 
[2025-10-22 10:27:57 TP0] Decode batch. #running-req: 1, #token: 186, token usage: 0.00, accept len: 1.95, accept rate: 0.49, cuda graph: True, gen throughput (token/s): 178.86, #queue-req: 0, 
[2025-10-22 10:27:58 TP0] Decode batch. #running-req: 1, #token: 258, token usage: 0.00, accept len: 1.80, accept rate: 0.45, cuda graph: True, gen throughput (token/s): 165.41, #queue-req: 0, 
""".splitlines()  # noqa: E501, W291


def test_it_leaves_the_decode_line_after_an_idle_server_out_of_the_means():
    summary = decode_summary(SGLANG.grammar, 1, WINDOW)

    assert summary["lines"] == 3 and summary["idle_lines"] == 1
    assert summary["mean_gen_throughput"] == round((178.86 + 165.41) / 2, 3)
    assert summary["mean_accept_len"] == round((1.95 + 1.80) / 2, 4)


def test_it_leaves_decode_lines_without_running_requests_out_of_the_means():
    lines = [DECODE.format(s=1, r=4, a=2.0, g=300.0), DECODE.format(s=2, r=0, a=1.0, g=2.0),
             DECODE.format(s=3, r=4, a=2.0, g=310.0)]  # fmt: skip

    summary = decode_summary(SGLANG.grammar, 1, lines)

    assert (summary["idle_lines"], summary["mean_gen_throughput"]) == (1, 305.0)


def test_it_keeps_idle_lines_when_there_is_nothing_else():
    summary = decode_summary(SGLANG.grammar, 1, WINDOW[:2])

    assert (summary["lines"], summary["idle_lines"], summary["mean_gen_throughput"]) == (1, 1, 0.39)


def _bar(done: int, total: int) -> str:
    return f"Loading safetensors checkpoint shards: {done * 100 // total:3d}% Completed | {done}/{total} [00:01<00:00]"


def test_it_reads_the_draft_models_shards_apart_so_progress_never_goes_back():
    facts = LogFacts(SGLANG.grammar, {})
    target = facts.read(1, [_bar(0, 4), _bar(4, 4), "[2026-02-23 10:00:08 TP1] Load weight end. elapsed=2.10 s",
                            _bar(2, 4)])  # fmt: skip
    # The draft's bar, in a later batch: it restarts at 0.
    draft = facts.read(5, ["[2026-02-23 10:00:08 TP0] Load weight end. elapsed=2.10 s", _bar(0, 1), _bar(1, 1)])

    assert (target.progress, target.draft_progress) == (100, None)
    assert (draft.progress, draft.draft_progress) == (None, 100)
    assert merge_series({}, draft)["server"]["draft_loading_progress"] == 100


def test_it_knows_the_target_was_loaded_before_a_reattach():
    batch = LogFacts(SGLANG.grammar, {}, target_progress=100).read(1, [_bar(0, 1)])

    assert (batch.progress, batch.draft_progress) == (None, 0)


# Real lines: reference §3.2 (2025-08-08 paste, sglang#10088, era C 2026-07-21) and §3.5 (0.5.9's f-string).
LINES_WORTH_READING = [
    ("Capturing batches (bs=1 avail_mem=1.72 GB): 100%|█████████████████████| 4/4 [00:18<00:00,  4.57s/it]",
     CaptureProgress(100, 4, 4)),
    ("[2025-08-08 03:34:56] Capture cuda graph end. Time elapsed: 18.28 s. mem usage=0.11 GB. avail mem=1.70 GB.",
     GraphCaptured("target", 18.28)),
    ("[2025-09-05 20:50:29 TP6] Capture draft cuda graph end. Time elapsed: 62.67 s. mem usage=0.21 GB. "
     "avail mem=15.31 GB.",
     GraphCaptured("draft", 62.67)),
    ("[2026-07-21 08:22:00 TP0] Capture target verify CUDA graph end. elapsed=4.56 s, mem usage=0.38 GB, "
     "avail mem=7.39 GB.",
     GraphCaptured("target", 4.56)),
    ("[2026-07-21 08:22:02 TP0] Capture draft extend CUDA graph end. elapsed=0.74 s, mem usage=0.14 GB, "
     "avail mem=6.87 GB.",
     GraphCaptured("draft", 0.74)),
    ("[2025-08-08 03:34:57] max_total_num_tokens=104273, chunked_prefill_size=2048, max_prefill_tokens=16384, "
     "max_running_requests=2048, context_len=40960, available_gpu_mem=1.70 GB", ServerLimits(104273, 2048, 40960)),
    ("[2026-02-23 10:01:00 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 2, #new_tokens_gained: 512, "
     "#new_token_ratio: 0.7000 -> 0.9000", Retraction(2, "KV cache pool is full. Retract requests. #retracted_reqs: 2, "
     "#new_tokens_gained: 512, #new_token_ratio: 0.7000 -> 0.9000")),
]  # fmt: skip


def test_it_reads_the_lines_worth_reading():
    for line, fact in LINES_WORTH_READING:
        assert parse_line(line) == fact, line


def test_it_keeps_the_server_facts_on_the_run():
    batch = LogFacts(SGLANG.grammar, {}).read(
        1, [line for line, _ in LINES_WORTH_READING] + [LINES_WORTH_READING[-1][0]]
    )

    server = merge_series({"server": {"retractions": 1}}, batch)["server"]

    assert server["limits"] == {"max_total_num_tokens": 104273, "max_running_requests": 2048, "context_len": 40960}
    assert server["capture_progress"] == 100 and server["retractions"] == 3
    assert server["graphs_captured"] == [["target", 18.28], ["draft", 62.67], ["target", 4.56], ["draft", 0.74]]


def test_a_traceback_storm_is_read_whole_however_often_its_lines_repeat():
    """Repeated lines are read once (a cache), which must change nothing of what each batch says."""
    crash = [
        "[2026-11-29 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sglang/srt/managers/scheduler.py", line 1061, in event_loop_normal',
        "AttributeError: 'NoneType' object has no attribute 'shape'",
        "[2026-11-29 10:00:00 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1",
    ]
    facts = LogFacts(SGLANG.grammar, {})

    first = facts.read(1, crash * 2500)
    again = facts.read(10_001, crash * 2500)

    for batch in (first, again):
        assert batch.failure is not None and batch.failure.kind == "crashed"
        assert batch.server_facts["retractions"] == 2500
    # A warning is reported once per run, however many lines carry it.
    assert [w.kind for w, _, _ in first.server_warnings] == ["kv_retraction"] and again.server_warnings == []


def test_a_batch_read_without_its_series_leaves_its_last_points_to_the_next_that_reads_one():
    facts = LogFacts(SGLANG.grammar, {"verify_ms": r"Target verify: (?P<verify_ms>[\d.]+) ms"})
    flood = [DECODE.format(s=0, r=n, a=3.1, g=90.0) for n in range(1, 401)]

    skipped = facts.read(1, [*flood, "Target verify: 19.5 ms"], series=False)
    read = facts.read(402, [DECODE.format(s=1, r=402, a=3.1, g=90.0), "Shard loading 50%", "Target verify: 30.1 ms"])

    assert (skipped.decode, skipped.metrics, skipped.has_series) == ([], {}, False)
    assert [point["running_req"] for point in read.decode] == [*range(102, 401), 402]  # the last KEEP_POINTS of both
    assert read.metrics == {"verify_ms": [[401, 19.5], [404, 30.1]]}
    assert facts.read(405, ["x"]).decode == []  # read once


def test_it_reads_what_the_target_and_its_drafter_weigh_per_gpu_the_most_any_rank_took() -> None:
    facts = LogFacts(SGLANG.grammar, {})
    lines = [
        "[2026-02-23 10:00:08 TP0] Load weight end. elapsed=2.10 s, type=X, avail mem=123.40 GB, mem usage=15.10 GB.",
        "[2026-02-23 10:00:08 TP1] Load weight end. elapsed=2.10 s, type=X, avail mem=123.40 GB, mem usage=15.30 GB.",
        "[2026-02-23 10:00:13 TP1] Load weight end. elapsed=0.50 s, type=Y, avail mem=46.10 GB, mem usage=0.90 GB.",
    ]
    first = facts.read(1, lines)
    assert first.server_facts["weights_gib"] == {"target": 15.3, "draft": 0.9}
    assert "weights_loaded" in first.milestones and facts.target_loaded
    later = facts.read(4, ["[2026-02-23 10:00:13 TP0] Load weight end. elapsed=0.5 s, type=Y, mem usage=1.10 GB."])
    stored = merge_series(merge_series({}, first), later)
    assert stored["server"]["weights_gib"] == {"target": 15.3, "draft": 1.1}


def test_it_reads_a_vllm_servers_weights_as_one_figure_for_target_and_drafter() -> None:
    from workers.vllm.adapter import VLLM

    facts = LogFacts(VLLM.grammar, {})
    batch = facts.read(
        1,
        [
            "(EngineCore_DP0 pid=8) INFO 10-26 12:30:10 [gpu_model_runner.py:2653] "
            "Model loading took 61.5437 GiB and 6.8 seconds"
        ],
    )
    assert batch.server_facts["weights_gib"] == {"all": 61.5437}
