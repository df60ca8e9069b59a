"""Facts read from log lines: live series for the run page, and a benchmark cell's server-side summary."""

from __future__ import annotations

from workers.sglang.live_facts import KEEP_POINTS, LogFacts, decode_summary, merge_series

DECODE = (
    "[2026-11-29 10:00:0{s} TP0] Decode batch, #running-req: {r}, #token: 180, token usage: 0.00, accept len: {a}, "
    "accept rate: 0.65, cuda graph: True, gen throughput (token/s): {g}, #queue-req: 0"
)


def test_it_reads_decode_points_custom_metrics_and_progress():
    facts = LogFacts({"verify_ms": r"Target verify: (?P<verify_ms>[\d.]+) ms"})
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

    batch = LogFacts({}).read(1, lines)
    merged = merge_series({"decode": batch.decode[:10]}, batch)

    assert len(batch.decode) == KEEP_POINTS and batch.decode[-1]["n"] == KEEP_POINTS + 50
    assert len(merged["decode"]) == KEEP_POINTS and merged["decode"][-1]["n"] == KEEP_POINTS + 50


def test_it_summarises_the_servers_decode_lines_of_a_window():
    lines = ["[2026-11-29 10:00:00] Prefill batch, #new-seq: 1", DECODE.format(s=1, r=1, a=2.0, g=90.0),
             DECODE.format(s=2, r=4, a=1.5, g=300.0)]  # fmt: skip

    summary = decode_summary(100, lines)

    assert summary == {
        "lines": 2, "first_line": 101, "last_line": 102, "mean_gen_throughput": 195.0, "mean_accept_len": 1.75,
        "max_running_req": 4,
    }  # fmt: skip
    assert decode_summary(1, ["nothing here"]) == {"lines": 0}
