"""/start_profile and /stop_profile as SGLang answers them, and the traces they leave: per-rank gzipped Chrome traces
named as SGLang names them, whose step spans and kernels follow the speed model."""

from __future__ import annotations

import gzip
import json
import re
import signal
from collections import defaultdict
from pathlib import Path

import aiohttp
import pytest

from simhost import profiler, speed

from .conftest import EAGLE3_2STEP

QUIET = {"SIMHOST_NOISE": "0", "SIMHOST_LAUNCH_NOISE": "0"}


def _read(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


def _spans(trace: dict) -> list[dict]:
    return [e for e in trace["traceEvents"] if e.get("cat") == "gpu_user_annotation"]


def test_it_refuses_bodies_as_fastapi_does():
    with pytest.raises(profiler.ProfileBodyError) as caught:
        profiler.parse_body({"num_steps": "five", "with_stack": "maybe", "activities": ["CPU", 3], "output_dir": 1})
    errors = {tuple(e["loc"]): e for e in caught.value.errors}
    assert errors[("body", "num_steps")]["type"] == "int_parsing"
    assert errors[("body", "with_stack")]["msg"] == "Input should be a valid boolean, unable to interpret input"
    assert errors[("body", "activities", 1)]["type"] == "string_type"
    assert errors[("body", "output_dir")]["type"] == "string_type"
    with pytest.raises(profiler.ProfileBodyError):
        profiler.parse_body(["CPU"])
    assert profiler.parse_body({"num_steps": "5", "record_shapes": "true", "other": 1})["num_steps"] == 5


def test_it_names_files_per_rank_prefix_and_stage():
    session = profiler.Session("/tmp/x", "123.4", "", -1, 4, ("CPU", "GPU"), False, False)
    assert profiler.trace_file_names(session, 2) == {0: ["123.4-TP-0.trace.json.gz"], 1: ["123.4-TP-1.trace.json.gz"]}
    session.prefix, session.by_stage = "nightly", True
    session.steps = [profiler._Step("prefill", 1, 1.0, 32), profiler._Step("decode", 1, 1.0)]
    assert profiler.trace_file_names(session, 1) == {
        0: ["nightly-123.4-TP-0-EXTEND.trace.json.gz", "nightly-123.4-TP-0-DECODE.trace.json.gz"]
    }


@pytest.mark.parametrize("steps", [2, 3])
def test_its_spans_follow_the_speed_model_and_hold_their_kernels(steps):
    cfg = speed.SpecConfig("EAGLE3", steps, 1, steps + 1, overlap=False)
    params = speed.SpeedParams()
    session = profiler.Session("/tmp/x", "p", "", -1, None, ("CPU", "GPU"), False, False)
    trace = profiler.build_trace([profiler._Step("decode", 4, 1.1)] * 3, cfg, params, 0, 8, session)

    by_name: dict[str, float] = defaultdict(float)
    for span in _spans(trace):
        by_name[re.sub(r" bs=\d+", "", span["name"])] += span["dur"] / 1000 / 3
    parts = speed.phase_parts(params, cfg, 4)
    assert by_name["step[DECODE]"] == pytest.approx(parts.draft * 1.1, rel=1e-3)
    assert by_name["step[TARGET_VERIFY]"] == pytest.approx(parts.verify * 1.1, rel=1e-3)
    assert by_name["step[DRAFT_EXTEND]"] == pytest.approx(parts.draft_extend * 1.1, rel=1e-3)
    assert parts.total == pytest.approx(speed.iteration_ms(params, cfg, 4))
    kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]
    for kernel in kernels:  # each kernel lies inside one span of its GPU
        assert any(s["ts"] <= kernel["ts"] and kernel["ts"] + kernel["dur"] <= s["ts"] + s["dur"] + 0.01
                   for s in _spans(trace))  # fmt: skip
    assert any(k["name"].startswith("ncclDevKernel_AllReduce") for k in kernels)


async def test_it_profiles_a_bounded_number_of_steps_and_writes_a_trace_per_rank(launch, tmp_path):
    server = launch("--tp", "2", *EAGLE3_2STEP, env=QUIET)
    server.wait_ready()
    out = tmp_path / "traces"
    async with aiohttp.ClientSession(server.base) as http:
        async with http.post("/stop_profile") as r:
            assert r.status == 500  # nothing to stop
        async with http.post("/start_profile", json={"num_steps": "x"}) as r:
            assert r.status == 422 and (await r.json())["detail"][0]["loc"] == ["body", "num_steps"]
        body = {"output_dir": str(out), "num_steps": 6, "activities": ["CPU", "GPU"], "profile_id": "p1"}
        async with http.post("/start_profile", json=body) as r:
            assert (r.status, await r.text()) == (200, "Start profiling.\n")
        async with http.post("/start_profile", json=body) as r:
            assert r.status == 500  # already profiling
        generate = {"input_ids": list(range(20)), "sampling_params": {"max_new_tokens": 20}}
        async with http.post("/generate", json=generate) as r:
            assert r.status == 200
        server.wait_for(rf"^\[[^]]+ TP1\] Profiling done\. Traces are saved to: {re.escape(str(out))}$", 30)

        # A GET starts one too, and /stop_profile ends it before its (absent) step count.
        async with http.get("/start_profile") as r:
            assert r.status == 200
        async with http.post("/generate", json=generate) as r:
            assert r.status == 200
        async with http.post("/stop_profile") as r:
            assert (r.status, await r.text()) == (200, "Stop profiling. This will take some time.\n")

    assert sorted(p.name for p in out.iterdir()) == ["p1-TP-0.trace.json.gz", "p1-TP-1.trace.json.gz"]
    assert "Profiling is already in progress. Call /stop_profile first." in server.text()
    trace = _read(out / "p1-TP-1.trace.json.gz")
    assert trace["distributedInfo"] == {"backend": "nccl", "rank": 1, "world_size": 2}
    names = [s["name"] for s in _spans(trace)]
    assert names.count("step[TARGET_VERIFY bs=1]") + sum(n.startswith("step[EXTEND") for n in names) == 6
    verify = [s["dur"] for s in _spans(trace) if s["name"] == "step[TARGET_VERIFY bs=1]"]
    cfg = speed.SpecConfig("EAGLE3", 2, 1, 3, overlap=False)
    assert verify[0] / 1000 == pytest.approx(speed.phase_parts(speed.SpeedParams(), cfg, 1).verify, rel=1e-3)
    server.signal_group(signal.SIGTERM)
    assert server.proc.wait(10) == 0
