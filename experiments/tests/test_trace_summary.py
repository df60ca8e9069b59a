"""The trace reader: a hand-made trace with SGLang's and PyTorch's real event names (CPU spans only, kernels matched
by correlation id), and the simulated host's traces, whose phases must come out as the speed model's numbers."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from experiments.analysis import trace_summary
from experiments.formats import chrome_trace
from simhost import profiler, speed

DATA = Path(__file__).parent / "data"


def _simulated(steps: int, bs: int = 1, count: int = 8, factor: float = 1.0) -> list[dict]:
    cfg = speed.SpecConfig("EAGLE3", steps, 1, steps + 1, overlap=False)
    session = profiler.Session("/tmp/x", "p", "", -1, None, ("CPU", "GPU"), False, False)
    recorded = [profiler._Step("prefill", bs, factor, 64)] + [profiler._Step("decode", bs, factor)] * count
    trace = profiler.build_trace(recorded, cfg, speed.SpeedParams(), 0, 8, session)
    return chrome_trace.events(gzip.compress(json.dumps(trace).encode()))


def test_it_summarises_a_hand_made_trace_with_real_range_names():
    events = chrome_trace.events((DATA / "sglang_eagle3_tiny.trace.json").read_bytes())

    summary = trace_summary.summarise(events)

    assert summary["speculative"] and summary["decode_steps"] == 2 and summary["prefill_forwards"] == 1
    (row,) = summary["by_batch_size"]
    assert row["batch_size"] == 2
    assert row["phases"] == {"draft": 1.5, "verify": 12.2, "draft_extend": 1.0, "other": 0.5}
    assert row["verify_collective_ms"] == 4.0
    assert row["verify_collective_share"] == pytest.approx(4.0 / 12.2, abs=1e-4)
    top = row["top_kernels"]["verify"]
    assert [k["label"] for k in top] == [
        "nvjet_tst_192x128_64x4_2x1_v_bz_coopB_TNT",
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
        "verify_tree_greedy",
    ]
    assert top[1]["family"] == "all-reduce"
    assert [k["label"] for k in row["top_kernels"]["other"]] == ["Memcpy DtoH"]
    assert row["top_kernels"]["draft"][1]["label"] == "at::native::sbtopk::gatherTopK"


@pytest.mark.parametrize("steps", [2, 3])
def test_its_summary_of_a_simulated_trace_is_the_speed_model(steps):
    summary = trace_summary.summarise(_simulated(steps, bs=1, factor=1.02))

    (row,) = summary["by_batch_size"]
    parts = speed.phase_parts(speed.SpeedParams(), speed.SpecConfig("EAGLE3", steps, 1, steps + 1, overlap=False), 1)
    assert row["steps"] == 8
    for phase in ("draft", "verify", "draft_extend", "other"):
        assert row["phases"][phase] == pytest.approx(getattr(parts, phase) * 1.02, rel=1e-3)
    # The all-reduce is 22% of verify bar the jump above 3 tokens, which the attention kernel takes.
    jump = speed.attention_jump_ms(speed.SpeedParams(), steps + 1)
    assert row["verify_collective_share"] == pytest.approx(0.22 * (parts.verify - jump) / parts.verify, abs=1e-3)


def test_it_reads_a_baseline_decode_as_the_target_forward():
    cfg = speed.SpecConfig()
    session = profiler.Session("/tmp/x", "p", "", -1, None, ("GPU",), False, False)
    trace = profiler.build_trace([profiler._Step("decode", 4, 1.0)] * 3, cfg, speed.SpeedParams(), 0, 1, session)

    summary = trace_summary.summarise(trace["traceEvents"])

    assert not summary["speculative"]
    assert summary["by_batch_size"][0]["phases"]["verify"] == pytest.approx(
        speed.iteration_ms(speed.SpeedParams(), cfg, 4)
    )
    assert summary["by_batch_size"][0]["phases"]["draft"] == 0


def test_it_names_verify_as_what_grew_from_two_to_three_steps():
    two, three = (trace_summary.summarise(_simulated(s)) for s in (2, 3))

    change = trace_summary.diff(two, three)

    assert change is not None and change["lead"] == "verify" and change["batch_size"] == 1
    assert change["text"] == "verify 15.6 -> 30.1 ms (+93%): attention 2.5 -> 15.1 ms; draft 3.0 -> 4.5 ms"
    assert trace_summary.diff(two, {"by_batch_size": []}) is None


def test_it_refuses_what_is_not_a_bounded_trace():
    with pytest.raises(chrome_trace.TraceError, match="not JSON"):
        chrome_trace.events(b"nope")
    with pytest.raises(chrome_trace.TraceError, match="unpacks to over 1000 bytes"):
        chrome_trace.events(gzip.compress(b'{"traceEvents": [' + b"{}," * 2000 + b"{}]}"), max_bytes=1000)
    with pytest.raises(chrome_trace.TraceError, match="no traceEvents"):
        chrome_trace.events(b'{"x": 1}')
    assert trace_summary.summarise([])["by_batch_size"] == []
