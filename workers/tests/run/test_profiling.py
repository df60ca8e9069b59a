"""The profiling cell against a real sshd and the simulated host, driven in-process: traces after the measured cells,
summarised per rank; a trace over the size limit refused with a clear message while the run still succeeds; traces
past the host's cap a run left on the host."""

from __future__ import annotations

import asyncio
import gzip
import json
import os

import pytest
from django.db import connections

from experiments.models import ProfileTrace, Run
from experiments.tests.factories import make_run
from workers.run import profiling
from workers.run.database import db
from workers.run.session import RunSession
from workers.ssh import HostConnection
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


def _trace_file(directory, name: str, padding_bytes: int) -> int:
    """A gzipped trace of no events with random hex padding (4 bits a character): about `padding_bytes` on disk."""
    body = json.dumps({"traceEvents": [], "padding": os.urandom(padding_bytes).hex()}).encode()
    (directory / name).write_bytes(gzip.compress(body, compresslevel=1))
    return (directory / name).stat().st_size


def test_it_stores_traces_up_to_the_hosts_cap_a_run_and_leaves_the_rest_on_the_host(sshd, tmp_path):
    """Two ranks of 600 KB each under a cap of 1 MiB a run: the first is stored, the second skipped with a warning
    that names it, and stays on the host with the profile's directory."""
    run = make_run(state=Run.State.BENCHMARKING, profile_requested=True)
    run.host.run_trace_cap_mib = 1
    run.host.save(update_fields=["run_trace_cap_mib"])
    run = Run.objects.select_related("host", "config", "experiment__profile").get(pk=run.pk)
    out_dir = tmp_path / "profile-c2"
    out_dir.mkdir()
    names = [f"{profiling.profile_id(run, 2)}-TP-{rank}.trace.json.gz" for rank in (0, 1)]
    sizes = [_trace_file(out_dir, name, 600_000) for name in names]

    async def fetch() -> bool:
        session = RunSession(run)
        session.conn = await HostConnection.open(sshd.access())
        try:
            return await profiling._fetch_traces(session, 2, str(out_dir), steps=6)
        finally:
            await session.conn.close()
            await db(connections.close_all)()

    all_stored = asyncio.run(fetch())

    assert not all_stored and all((out_dir / name).exists() for name in names)
    run.refresh_from_db()
    first, second = run.profile_traces.order_by("rank")
    assert (first.state, bytes(first.trace or b"")) == (ProfileTrace.State.STORED, (out_dir / names[0]).read_bytes())
    assert (second.state, second.trace, second.size_bytes) == (ProfileTrace.State.REFUSED, None, sizes[1])
    assert f"It stays on the host at {out_dir}/{names[1]}" in second.message
    (warning,) = [w for w in run.warnings if w["kind"] == profiling.TRACE_CAP_KIND]
    assert names[1] in warning["message"] and names[0] not in warning["message"] and "1 MiB" in warning["message"]
