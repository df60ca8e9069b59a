"""The spine, end to end: API submission -> Celery worker -> SSH (real sshd) -> simulated SGLang host -> results."""

from __future__ import annotations

import pytest

from experiments.models import ApiToken, Experiment, Host, LogChunk, Measurement, Run
from experiments.tests.waiting import until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
# A simulated GPU twice as fast: the verdicts below are ratios on its own clock, which the speed factor leaves as they
# are, and the benchmarks take half the time.
FAST = {"SIMHOST_SPEED": "2"}


def _eagle(models: str, name: str, steps: int) -> dict:
    return {
        "name": name,
        "model_path": f"{models}/kimi-k2.5-sim",
        "tp_size": 8,
        "speculative_algorithm": "EAGLE3",
        "speculative_draft_model_path": f"{models}/kimi-k2.5-sim-eagle3",
        "speculative_num_steps": steps,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": steps + 1,
        "env": {"NCCL_PROTO": "LL"},
        "extra_args": ["--enable-metrics"],  # the pooled accept length, from the server's counters
        "expect": {"env_propagated": ["NCCL_PROTO"]},
    }


def _fast(config: dict) -> dict:
    return {**config, "env": {**config.get("env", {}), **FAST}}


def _explain(body: dict) -> str:
    """Why runs failed, with their log tails: an integration failure must be diagnosable from CI output."""
    out = []
    for r in body["runs"]:
        if r["state"] != "succeeded":
            tail = "\n".join(c.text for c in LogChunk.objects.filter(run_id=r["id"]).order_by("-first_line")[:3][::-1])
            out.append(f"{r['config']}: {r['state']} {r['failure']}\n--- log tail ---\n{tail[-3000:]}")
    return "\n\n".join(out)


def _wait_for_experiment(client, headers, experiment_id: int, timeout: float) -> dict:
    """The experiment's API body once it has ended. Polled by its status alone: the whole body (comparisons,
    verdicts) costs the test's process a hundred times the CPU, five times a second, on the cores the run needs."""

    def ended() -> dict | None:
        if Experiment.objects.get(pk=experiment_id).status not in ("finished", "failed"):
            return None
        body = client.get(f"/api/experiments/{experiment_id}", headers=headers).json()
        return body if body["status"] in ("finished", "failed") else None

    return until(ended, timeout, f"experiment {experiment_id} ended",
                 lambda: str(client.get(f"/api/experiments/{experiment_id}", headers=headers).json()))  # fmt: skip


def test_it_runs_an_experiment_end_to_end_and_eagle3_two_steps_beats_baseline_at_c1(
    client, owner, sim_host: Host, celery_worker_process
):
    _, raw_token = ApiToken.issue(owner)
    headers = {"Authorization": f"Bearer {raw_token}"}
    models = sim_host.models_root
    payload = {
        "name": "eagle3 2 vs 3 steps",
        "host": sim_host.name,
        "baseline": {
            "name": "baseline",
            "model_path": f"{models}/kimi-k2.5-sim",
            "tp_size": 8,
            "env": FAST,
            "extra_args": ["--enable-metrics"],
        },
        "candidates": [_fast(_eagle(models, "eagle3-2step", 2)), _fast(_eagle(models, "eagle3-3step", 3))],
        "profile": {
            "concurrency": [1, 4],
            "num_prompts": 4,
            "input_len": 128,
            "output_len": 64,
            "seed": 1,
            "passes": 1,
            "launches": 1,
            "stall_timeout_s": 60,
            "readiness_timeout_s": 120,
        },
    }

    response = client.post("/api/experiments", payload, content_type="application/json", headers=headers)

    assert response.status_code == 201, response.content
    created = response.json()
    assert [r["config"] for r in created["runs"]] == ["baseline", "eagle3-2step", "eagle3-3step"]
    body = _wait_for_experiment(client, headers, created["id"], timeout=240)
    runs = {r["config"]: r for r in body["runs"]}
    assert body["status"] == "finished", _explain(body)
    assert all(r["state"] == "succeeded" for r in runs.values())

    # Every cell was measured and stored.
    assert Measurement.objects.filter(run__experiment_id=created["id"]).count() == 3 * 2
    for m in Measurement.objects.filter(run__experiment_id=created["id"]):
        assert m.completed == 4 and m.failed == 0
        assert m.output_throughput > 0 and m.mean_ttft_ms is not None
        # The steady-state window, from the client on the host: inside the cell (its tail left out).
        assert m.steady_state_window_s is not None and 0 < m.steady_state_window_s <= m.duration_s
        assert (m.steady_state_accept_length is None) == (m.run.config.name == "baseline")
    speculative = Measurement.objects.filter(run__experiment_id=created["id"], run__config__name="eagle3-2step")
    assert all(m.accept_length and m.accept_length > 1.5 for m in speculative)
    # The server's own counters (reset by /flush_cache before each cell) agree with the requests' meta_info.
    for m in speculative:
        assert m.server_accept_length == pytest.approx(m.accept_length, rel=0.1)
        # Acceptance three ways: the counters over exactly the cell's requests equal their token-weighted figure.
        assert m.pooled_accept_length == pytest.approx(m.accept_length, rel=0.01)
        assert m.mean_request_accept_length is not None
        # Per draft position, from each request's accepted-drafts histogram (2 steps: drafts 1 and 2).
        histogram, rates = m.accepted_drafts_histogram or [], m.position_acceptance or []
        assert len(histogram) == 3 and len(rates) == 2 and 1 >= rates[0] >= rates[1] > 0
        assert m.server_decode["lines"] >= 1 and m.server_decode["mean_accept_len"] > 1.5

    # The comparison covers every candidate at every concurrency, and says what DESIGN.md's speed model says:
    # 2 steps pays at c=1, 3 steps does not. The verdict is read on the simulated GPU's own clock (the server's
    # mean end-to-end latency of the same prompts, from its histogram), which a loaded test machine cannot
    # stretch: the client's wall clock on a starved 2-core machine moved a 13% speedup to 4%.
    rows = {(r["candidate"], r["concurrency"]): r for r in body["comparison"]}
    assert set(rows) == {(name, c) for name in ("eagle3-2step", "eagle3-3step") for c in (1, 4)}
    assert all(r["speedup"] > 0 for r in rows.values())
    server_latency: dict[tuple[str, int], float] = {}
    for m in Measurement.objects.filter(run__experiment_id=created["id"]).select_related("run__config"):
        assert m.server_mean_e2e_latency_ms and m.server_mean_e2e_latency_ms > 0, (m.run.config.name, m.concurrency)
        server_latency[(m.run.config.name, m.concurrency)] = m.server_mean_e2e_latency_ms

    def server_speedup(candidate: str, concurrency: int) -> float:
        return server_latency[("baseline", concurrency)] / server_latency[(candidate, concurrency)]

    assert server_speedup("eagle3-2step", 1) > 1.05, server_latency
    assert server_speedup("eagle3-3step", 1) < 0.9, server_latency
    assert server_speedup("eagle3-3step", 4) < 1.0, server_latency

    # The log was stored with contiguous line numbers and shows the server's life.
    run = Run.objects.get(pk=runs["eagle3-2step"]["id"])
    chunks = list(LogChunk.objects.filter(run=run).order_by("first_line"))
    expected_first = 1
    for chunk in chunks:
        assert chunk.first_line == expected_first
        expected_first += chunk.line_count
    text = "\n".join(c.text for c in chunks)
    assert "The server is fired up and ready to roll!" in text
    assert "Decode batch" in text
    assert [p["state"] for p in runs["eagle3-2step"]["phases"]][-3:] == ["benchmarking", "teardown", "succeeded"]

    # Teardown left no simulated GPU memory held and released the host.
    sim_host.refresh_from_db()
    assert not sim_host.is_dirty and sim_host.active_run_id is None


def test_a_sweep_fails_its_bad_candidates_in_preflight_before_any_benchmark(
    client, owner, sim_host: Host, celery_worker_process
):
    # A 2x2 sweep (steps x --context-length) on a draft that holds 131072 positions: the two candidates that ask
    # for the target's full 262144 cannot launch. The submission cannot know (the host's models were never listed);
    # the first run's preflight reads every config's models and fails those two before the baseline's benchmark.
    _, raw_token = ApiToken.issue(owner)
    headers = {"Authorization": f"Bearer {raw_token}"}
    models = sim_host.models_root
    target = {"model_path": f"{models}/kimi-k2.5-sim", "tp_size": 8, "env": FAST}
    payload = {
        "name": "steps x context",
        "host": sim_host.name,
        "baseline": {"name": "baseline", **target},
        "sweep": {
            "base": {
                **target,
                "speculative_algorithm": "EAGLE3",
                "speculative_draft_model_path": f"{models}/kimi-k2.5-sim-eagle3-ctx131k",
            },
            "speculative_num_steps": [2, 3],
            "speculative_eagle_topk": [1],
            "extra_args": {"--context-length": [8192, 262144]},
        },
        # The default passes and launches: they must give a verdict by themselves.
        "profile": {
            "concurrency": [1],
            "num_prompts": 4,
            "input_len": 32,
            "output_len": 32,
            "readiness_timeout_s": 120,
        },
    }

    response = client.post("/api/experiments", payload, content_type="application/json", headers=headers)

    assert response.status_code == 201, response.content
    created = response.json()
    assert len(created["runs"]) == 5
    body = _wait_for_experiment(client, headers, created["id"], timeout=300)
    runs = {r["config"]: r for r in body["runs"]}
    bad = [r for name, r in runs.items() if "262144" in name]
    good = [r for name, r in runs.items() if name != "baseline" and "262144" not in name]
    assert len(bad) == 2 and len(good) == 2, list(runs)
    assert runs["baseline"]["state"] == "succeeded" and all(r["state"] == "succeeded" for r in good), _explain(body)
    baseline_benchmark = next(p["at"] for p in runs["baseline"]["phases"] if p["state"] == "benchmarking")
    for run in bad:
        assert run["state"] == "failed" and run["failure"]["kind"] == "preflight"
        assert run["failure"]["message"].startswith("Checked before the experiment's first launch: The draft")
        assert run["phases"][-1]["at"] < baseline_benchmark  # failed in seconds, not after the baseline's benchmark
        assert not Measurement.objects.filter(run_id=run["id"]).exists()
    # Every valid cell has a verdict with an interval.
    rows = body["comparison"]
    assert sorted(r["candidate"] for r in rows) == sorted(r["config"] for r in good)
    assert all(r["ci_low"] is not None and r["verdict"] in ("faster", "slower", "inconclusive") for r in rows)
