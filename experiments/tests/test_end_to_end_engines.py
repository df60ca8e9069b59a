"""Two engines in one experiment, end to end on the simulated host: an SGLang baseline, an SGLang EAGLE-3 candidate
and a vLLM EAGLE-3 candidate (same model, draft and prompts), launched, verified, benchmarked and torn down each by
its own engine's rules, and compared by the one comparison like any candidates."""

from __future__ import annotations

import pytest

from experiments.models import ApiToken, Host, LogChunk, Measurement, Run
from experiments.tests.test_end_to_end import FAST, _eagle, _explain, _fast, _wait_for_experiment
from simhost.vllm import versions as vllm_versions

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


# Two ranks, not eight: each rank is a process the loaded 2-core machine runs at every launch, and nothing here
# depends on how many there are. A simulated GPU the whole target fits on lets vLLM load it on two (its real weights
# would not fit: at the default size two ranks run out of memory, as vLLM would).
TP_SIZE = 2
BIG_GPU = {"SIMHOST_GPU_MEMORY_MIB": "700000"}


def _vllm_eagle(models: str, name: str, tokens: int) -> dict:
    return {
        "name": name,
        "engine": "vllm",
        "model_path": f"{models}/kimi-k2.5-sim",
        "tp_size": TP_SIZE,
        "speculative_algorithm": "eagle3",
        "speculative_draft_model_path": f"{models}/kimi-k2.5-sim-eagle3",
        "speculative_num_steps": tokens,
        "engine_options": {"draft_tensor_parallel_size": TP_SIZE},
        # Each request's acceptance in its response (vLLM 0.30+): the token-weighted figure, as SGLang's meta_info.
        "extra_args": ["--per-request-spec-decode-metrics", "summary"],
        # vLLM's stats every second (10 s by default): the SpecDecoding lines the run reads live.
        "env": {"NCCL_PROTO": "LL", "VLLM_LOG_STATS_INTERVAL": "1", **FAST, **BIG_GPU},
        "expect": {"env_propagated": ["NCCL_PROTO"]},
    }


def test_an_sglang_and_a_vllm_candidate_are_measured_and_compared_against_one_baseline(
    client, owner, sim_host: Host, celery_worker_process
):
    # The newest vLLM: 0.11 (simhost's default) refuses EAGLE-3 on a Kimi target (its eagle3 gate lists llama, qwen,
    # minicpm and gpt_oss only; kimi_k2 joins in 0.19).
    sim_host.shell_setup += f"\nexport SIMHOST_VLLM_VERSION={vllm_versions.NEWEST}"
    sim_host.save()
    _, raw_token = ApiToken.issue(owner)
    headers = {"Authorization": f"Bearer {raw_token}"}
    models = sim_host.models_root
    payload = {
        "name": "sglang vs vllm",
        "host": sim_host.name,
        "baseline": {"name": "baseline", "model_path": f"{models}/kimi-k2.5-sim", "tp_size": TP_SIZE, "env": FAST},
        "candidates": [
            {**_fast(_eagle(models, "sglang-eagle3", 2)), "tp_size": TP_SIZE},
            _vllm_eagle(models, "vllm-eagle3", 2),
        ],
        "profile": {
            "concurrency": [1],
            "num_prompts": 4,
            "input_len": 128,
            "output_len": 64,
            "passes": 2,
            "launches": 1,
            "stall_timeout_s": 60,
            "readiness_timeout_s": 120,
        },
    }

    response = client.post("/api/experiments", payload, content_type="application/json", headers=headers)

    assert response.status_code == 201, response.content
    created = response.json()
    body = _wait_for_experiment(client, headers, created["id"], timeout=300)
    assert body["status"] == "finished", _explain(body)
    runs = {r["config"]: Run.objects.get(pk=r["id"]) for r in body["runs"]}
    vllm_run = runs["vllm-eagle3"]
    assert vllm_run.config.engine == "vllm" and vllm_run.config.engine_options == {
        "draft_tensor_parallel_size": TP_SIZE
    }

    # Launched as vLLM takes it: the model positional, the speculative settings one JSON, no SGLang flag.
    command = vllm_run.launch_command
    assert "simhost.vllm_serve" in command and "--speculative-config" in command
    assert '"method":"eagle3"' in command and '"num_speculative_tokens":2' in command
    assert "--speculative-algorithm" not in command and "--model-path" not in command
    # Verified against what the engine says it runs (its engine config line), every process given the variable.
    assert vllm_run.effective_args.get("num_spec_tokens") == 2
    assert vllm_run.effective_args.get("method") == "eagle3"
    log = "\n".join(c.text for c in LogChunk.objects.filter(run=vllm_run).order_by("first_line"))
    assert "Application startup complete." in log and "SpecDecoding metrics:" in log

    # Measured by the vLLM backend: acceptance from vLLM's own counters, the server's SpecDecoding lines read live.
    for m in Measurement.objects.filter(run=vllm_run):
        assert m.completed == 4 and m.failed == 0 and m.output_throughput > 0
        assert m.pooled_accept_length is not None and 1.5 < m.pooled_accept_length <= 3
        assert m.accept_length == pytest.approx(m.pooled_accept_length, rel=0.01)
    assert any(point.get("accept_len") for point in (vllm_run.live_facts or {}).get("decode", []))

    # One comparison for both: each candidate against the one baseline, with its interval.
    rows = {r["candidate"]: r for r in body["comparison"]}
    assert set(rows) == {"sglang-eagle3", "vllm-eagle3"}
    for row in rows.values():
        assert row["speedup"] > 0 and row["ci_low"] is not None and row["ci_high"] is not None

    # The deployment view says which engine wins at each concurrency, from the same comparison.
    engine_line = [s for s in body["deployment"]["headlines"] if s.startswith("Fastest by engine")]
    assert len(engine_line) == 1 and ("(vLLM)" in engine_line[0] or "(SGLang)" in engine_line[0]), body["deployment"]
    fastest = max(rows.values(), key=lambda r: r["speedup"])["candidate"]
    assert f"c=1: {fastest} " in engine_line[0]

    # Both torn down: no simulated GPU memory held, the host released.
    sim_host.refresh_from_db()
    assert not sim_host.is_dirty and sim_host.active_run_id is None
