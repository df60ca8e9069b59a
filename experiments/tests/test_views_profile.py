"""A run's profile on its page and in the API: who may press Profile this run, who may download a trace, and what a
refused trace says."""

from __future__ import annotations

import gzip

import pytest

from experiments.models import Experiment, ProfileTrace, Run

from .factories import make_run

pytestmark = pytest.mark.django_db


def _stored(run: Run) -> ProfileTrace:
    return ProfileTrace.objects.create(
        run=run, concurrency=1, rank=0, file_name="p-TP-0.trace.json.gz", state=ProfileTrace.State.STORED,
        size_bytes=30, steps=4, trace=gzip.compress(b'{"traceEvents": []}'),
        summary={"speculative": True, "decode_steps": 4, "by_batch_size": [
            {"batch_size": 1, "steps": 4, "step_ms": 21.1,
             "phases": {"draft": 3.0, "verify": 15.6, "draft_extend": 1.5, "other": 1.0},
             "top_kernels": {"verify": [{"name": "fused_moe_kernel", "label": "fused_moe_kernel", "ms": 2.8}]},
             "verify_collective_ms": 3.4, "verify_collective_share": 0.22, "families": {}}]},
    )  # fmt: skip


def test_it_shows_the_summary_and_serves_the_trace_to_a_reader(client, viewer):
    run = make_run(state=Run.State.SUCCEEDED, profile_requested=True)
    trace = _stored(run)
    client.force_login(viewer)

    html = client.get(f"/runs/{run.pk}/").content.decode()
    download = client.get(f"/runs/{run.pk}/traces/{trace.pk}.trace.json.gz")

    assert "<td>15.60</td>" in html and "fused_moe_kernel" in html and "3.40 ms (22%)" in html
    assert 'id="profile-run"' not in html  # a viewer may not queue launches
    assert "Open in Perfetto" in html and "never to a server" in html  # handed over in the browser, not uploaded
    assert download.status_code == 200 and gzip.decompress(download.content) == b'{"traceEvents": []}'
    assert download["Content-Disposition"] == f'attachment; filename="run-{run.pk}-p-TP-0.trace.json.gz"'


def test_it_forbids_an_outsider_the_trace(client, outsider):
    run = make_run(state=Run.State.SUCCEEDED)
    trace = _stored(run)
    client.force_login(outsider)

    assert client.get(f"/runs/{run.pk}/traces/{trace.pk}.trace.json.gz").status_code == 403


def test_it_says_why_a_trace_was_refused(owner_client):
    run = make_run(state=Run.State.SUCCEEDED, profile_requested=True)
    ProfileTrace.objects.create(run=run, concurrency=1, rank=0, state=ProfileTrace.State.REFUSED, size_bytes=9000,
                                message="The trace x is 9,000 bytes, over the 1,000-byte limit")  # fmt: skip

    html = owner_client.get(f"/runs/{run.pk}/").content.decode()
    api = owner_client.get(f"/api/runs/{run.pk}").json()

    assert "over the 1,000-byte limit" in html and "Download the trace" not in html
    assert api["profile_traces"][0]["state"] == "refused" and api["profile_traces"][0]["download_url"] is None


def test_it_queues_a_profiled_launch_of_a_finished_runs_config_for_a_member(client, member):
    run = make_run(state=Run.State.SUCCEEDED)
    client.force_login(member)

    response = client.post(f"/runs/{run.pk}/profile/")

    experiment = Experiment.objects.exclude(pk=run.experiment_id).get()
    assert response.status_code == 302 and response["Location"] == experiment.get_absolute_url()
    (queued,) = experiment.run_set.all()
    assert queued.config_id == run.config_id and queued.profile_requested and queued.state == Run.State.QUEUED
    assert experiment.profile_id == run.experiment.profile_id and experiment.host_id == run.host_id
    assert client.get(f"/runs/{run.pk}/profile/").status_code == 405


def test_it_refuses_to_profile_for_a_viewer_or_an_unfinished_run(client, viewer, member):
    finished, live = make_run(state=Run.State.SUCCEEDED), make_run(state=Run.State.BENCHMARKING)
    client.force_login(viewer)
    assert client.post(f"/runs/{finished.pk}/profile/").status_code == 403
    client.force_login(member)
    client.post(f"/runs/{live.pk}/profile/")
    assert not Run.objects.filter(profile_requested=True).exists()
