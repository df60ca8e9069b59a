"""The profiling cell against a real sshd and the simulated host, driven in-process: traces after the measured cells,
summarised per rank; a trace over the size limit refused with a clear message while the run still succeeds."""

from __future__ import annotations

import pytest

from experiments.models import ProfileTrace, Run
from workers.tasks import drive_host
from workers.tests.run.simruns import held_gpu_memory, queue_run, sim_config

pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("private_queue"),
]


def _profiled_run(sim_host, owner) -> Run:
    run = queue_run(sim_host, sim_config(sim_host, speculative=True), owner, concurrency=[2], num_prompts=4)
    run.profile_requested = True
    run.save(update_fields=["profile_requested"])
    drive_host(run.host_id)
    run.refresh_from_db()
    return run


def test_it_profiles_after_the_measured_cells_and_stores_each_ranks_summary(sim_host, owner, settings):
    settings.SPECDASH_PROFILE_STEPS = 12

    run = _profiled_run(sim_host, owner)

    assert run.state == Run.State.SUCCEEDED, run.failure()
    assert run.measurement_set.count() == 1 and not [w for w in run.warnings if w["kind"] == "profile"]
    traces = list(run.profile_traces.order_by("rank"))
    assert [(t.rank, t.state, t.concurrency) for t in traces] == [(0, "stored", 2), (1, "stored", 2)]
    assert traces[0].file_name == f"specdash-run{run.pk}-c2-TP-0.trace.json.gz"
    data = traces[0].trace
    assert data is not None and bytes(data)[:2] == b"\x1f\x8b" and traces[0].size_bytes == len(bytes(data))
    summary = traces[0].summary
    assert summary["speculative"] and summary["decode_steps"] >= 1
    assert {r["batch_size"] for r in summary["by_batch_size"]} <= {1, 2}
    log = "\n".join(c.text for c in run.logchunk_set.order_by("first_line"))
    assert log.count("Profiling starts. Traces will be saved to:") == 2  # one profile (one concurrency), two ranks
    assert "Profiling done. Traces are saved to:" in log
    assert held_gpu_memory(sim_host) == ""


def test_it_refuses_a_trace_over_the_size_limit_and_the_run_still_succeeds(sim_host, owner, settings):
    settings.SPECDASH_PROFILE_STEPS = 6
    settings.SPECDASH_PROFILE_TRACE_MAX_BYTES = 1000

    run = _profiled_run(sim_host, owner)

    assert run.state == Run.State.SUCCEEDED, run.failure()
    traces = list(run.profile_traces.order_by("rank"))
    assert [t.state for t in traces] == [ProfileTrace.State.REFUSED] * 2
    assert traces[0].trace is None and traces[0].size_bytes > 1000
    assert "over the 1,000-byte limit (SPECDASH_PROFILE_TRACE_MAX_BYTES); it was not fetched" in traces[0].message
    assert any(w["kind"] == "profile" and "over the 1,000-byte limit" in w["message"] for w in run.warnings)
