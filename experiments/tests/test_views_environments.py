"""What a run ran on, on its page and in the API: the fingerprint, the environment launched and received, the GPU
telemetry and the server's metrics beside the benchmark cells; the diff of two runs; the diff beside a regression
flag."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from experiments.charts.telemetry import server_metrics_figure
from experiments.models import Flag, GpuSample, Run, RunEnvironment, ServerMetricSample
from experiments.reads.environments import run_server_metrics

from .factories import make_history, make_measurement, make_run

pytestmark = pytest.mark.django_db

HOSTILE = '<script>alert("x")</script>'


def _fingerprint(sglang: str = "0.5.9", driver: str = "580.159.04") -> dict[str, Any]:
    return {
        "kernel": "6.8.0",
        "driver": driver,
        "cuda_driver": "13.0",
        "gpu_summary": "8 x NVIDIA H200, 143771 MiB, 700 W limit, max SM 1980 MHz, persistence Enabled",
        "python": "3.12.3",
        "packages": {"sglang": {"version": sglang}, "torch": {"version": "2.9.1", "cuda": "12.8"}},
        "problems": [],
    }


def _environment(run: Run, *, sglang: str = "0.5.9", env: dict[str, str] | None = None) -> RunEnvironment:
    env = env if env is not None else {"NCCL_PROTO": "LL"}
    return RunEnvironment.objects.create(
        run=run,
        fingerprint=_fingerprint(sglang),
        read_at=timezone.now(),
        launch_env={**env, "HF_TOKEN": "hf_secret"},
        host_env_names=["HF_TOKEN"],
        processes=[
            {"pid": 100, "title": "python -m sglang.launch_server", "env": {**env, "HF_TOKEN": "(hidden)"}},
            {"pid": 101, "title": "sglang::scheduler_TP0", "env": {"HF_TOKEN": "(hidden)"}},
            {"pid": 102, "title": "sglang::scheduler_TP1", "env": None},
        ],
        processes_read_at=timezone.now(),
    )


def test_it_shows_the_fingerprint_and_the_environment_launched_and_received(client, viewer):
    run = make_run(state=Run.State.SUCCEEDED, remote_pid=100)
    _environment(run, env={"NCCL_PROTO": "LL", "NCCL_ALGO": HOSTILE})
    client.force_login(viewer)

    page = client.get(f"/runs/{run.pk}/").content.decode()

    assert "<th>SGLang</th><td><code>0.5.9</code></td>" in page
    assert 'data-name="NCCL_PROTO"' in page and "hf_secret" not in page
    assert HOSTILE not in page and "&lt;script&gt;" in page  # a config's value is text, never markup
    assert "pid 102" in page  # the blank environ: unreadable, not empty
    assert "NCCL_PROTO: LL in pid 100; unset in pid 101" in page  # the scheduler did not receive it

    data = client.get(f"/api/runs/{run.pk}/environment").json()
    assert data["environment"]["server_env"]["NCCL_PROTO"] == "LL"
    assert data["environment"]["launch_env"]["HF_TOKEN"] == "(hidden)"
    assert data["environment"]["unreadable_pids"] == [102]


def test_it_diffs_two_runs_for_a_viewer_and_refuses_an_outsider(client, viewer, outsider):
    before, after = make_run(state=Run.State.SUCCEEDED), make_run(state=Run.State.SUCCEEDED)
    _environment(before)
    _environment(after, sglang="0.5.10", env={"NCCL_PROTO": "Simple"})
    client.force_login(viewer)

    page = client.get(f"/runs/{before.pk}/diff/?with={after.pk}").content.decode()
    data = client.get(f"/api/runs/{before.pk}/diff/{after.pk}").json()

    expected = "SGLang 0.5.9 -&gt; 0.5.10, NCCL_PROTO LL -&gt; Simple; PyTorch, CUDA (PyTorch), driver, GPUs same"
    assert expected in page
    assert data["summary"] == expected.replace("&gt;", ">")
    assert [c["what"] for c in data["changes"]] == ["SGLang", "NCCL_PROTO"]
    assert client.get(f"/runs/{before.pk}/diff/?with=x").status_code == 404
    client.force_login(outsider)
    assert client.get(f"/runs/{before.pk}/diff/?with={after.pk}").status_code == 403


def test_it_shows_beside_a_flag_the_diff_against_the_last_run_before_the_change(owner_client):
    runs = make_history([88.8, 88.9, 88.7, 88.8, 88.6, 88.9, 88.8, 88.7, 88.8, 82.2, 82.3, 82.1])
    flag = Flag.objects.get()
    index = runs.index(flag.run)
    for run in runs:
        _environment(run, sglang="0.5.10" if runs.index(run) >= index else "0.5.9")

    page = owner_client.get(f"/flags/{flag.pk}/").content.decode()
    data = owner_client.get(f"/api/runs/{flag.run_id}/diff-before").json()

    assert data["before"] == runs[index - 1].pk and data["after"] == flag.run_id
    assert data["summary"].startswith("SGLang 0.5.9 -> 0.5.10")
    assert 'id="flag-environment-diff"' in page and "SGLang 0.5.9 -&gt; 0.5.10" in page
    assert owner_client.get(f"/api/runs/{runs[0].pk}/diff-before").status_code == 404


def test_it_charts_the_telemetry_beside_the_cells_and_names_a_throttled_run(client, viewer):
    run = make_run(state=Run.State.SUCCEEDED)
    measurement = make_measurement(run, concurrency=1, output_throughput=60.0)
    end = measurement.created_at
    for i in range(6):
        throttled = i >= 3
        GpuSample.objects.create(
            run=run,
            at=end - timedelta(seconds=5 - i),
            gpu=0,
            sm_mhz=1320 if throttled else 1980,
            mem_mhz=3201,
            temperature_c=89 if throttled else 55,
            power_w=450.0,
            utilization_pct=97,
            memory_used_mib=120000,
            reasons=0x60 if throttled else 0,
        )
    measurement.duration_s = 10
    measurement.save(update_fields=["duration_s"])
    client.force_login(viewer)

    page = client.get(f"/runs/{run.pk}/").content.decode()
    data = client.get(f"/api/runs/{run.pk}/environment").json()["telemetry"]

    assert 'id="telemetry-chart"' in page and 'id="telemetry-figure"' in page
    assert "was throttled while benchmarking: SW thermal slowdown, HW thermal slowdown in 3 of 6 samples" in page
    assert data["summary"]["throttled_samples"] == 3 and len(data["samples"]) == 6
    assert data["cells"][0]["label"] == "c=1 p1"


def _server_samples(run: Run, end, *, speculative: bool = True) -> None:
    for i in range(8):
        ServerMetricSample.objects.create(
            run=run,
            at=end - timedelta(seconds=4 - 0.25 * i),
            num_running_reqs=min(i, 4),
            num_queue_reqs=max(i - 4, 0),
            num_used_tokens=100.0 * i,
            token_usage=0.05 * i,
            gen_throughput=300.0,
            spec_accept_length=(2.0 + 0.1 * i) if speculative else 0.0,
            spec_accept_rate=0.6 if speculative else 0.0,
            spec_num_steps=2.0 if speculative else None,
            spec_num_draft_tokens=3.0 if speculative else None,
        )


def test_it_charts_the_servers_metrics_on_the_cells_time_axis_folded_and_serves_them(client, viewer, outsider):
    run = make_run(state=Run.State.SUCCEEDED)
    measurement = make_measurement(run, concurrency=4, output_throughput=300.0)
    _server_samples(run, measurement.created_at)
    client.force_login(viewer)

    page = client.get(f"/runs/{run.pk}/").content.decode()
    data = client.get(f"/api/runs/{run.pk}/server-metrics").json()

    assert '<details class="card" id="server-metrics">' in page and 'id="server-metrics-figure"' in page
    summary = page[page.index('id="server-metrics-summary"') :].split("</span>")[0]
    assert "8 samples" in summary and "up to 4 running, 3 queued" in summary and "up to 35 %" in summary
    assert "median accept length 2.35" in summary
    assert data["fields"][:3] == ["t", "num_running_reqs", "num_queue_reqs"] and len(data["samples"]) == 8
    first = dict(zip(data["fields"], data["samples"][0], strict=True))
    assert first["t"] == pytest.approx(measurement.created_at.timestamp() - 4)
    assert first["spec_num_steps"] == 2.0 and data["summary"]["max_running_reqs"] == 4.0
    assert data["cells"][0]["label"] == "c=4 p1"
    client.force_login(outsider)
    assert client.get(f"/api/runs/{run.pk}/server-metrics").status_code == 403


def test_a_baseline_is_charted_without_speculative_panels_and_a_run_without_samples_without_a_chart(client, viewer):
    baseline, unsampled = make_run(state=Run.State.SUCCEEDED), make_run(state=Run.State.SUCCEEDED)
    _server_samples(
        baseline, make_measurement(baseline, concurrency=1, output_throughput=80.0).created_at, speculative=False
    )
    client.force_login(viewer)

    figure = server_metrics_figure(run_server_metrics(baseline), [])
    page = client.get(f"/runs/{unsampled.pk}/").content.decode()

    titles = [v["title"]["text"] for k, v in figure["layout"].items() if k.startswith("yaxis")]
    assert titles == ["Requests", "KV use (%)", "tok/s"]
    assert {t["name"] for t in figure["data"]} == {"running", "queued", "token usage", "throughput"}
    assert 'id="server-metrics"' not in page
    assert client.get(f"/api/runs/{unsampled.pk}/server-metrics").json()["samples"] == []


def test_it_shows_on_the_comparison_what_the_servers_warned_and_diffs_two_experiments(client, viewer):
    before, after = make_run(state=Run.State.SUCCEEDED), make_run(state=Run.State.SUCCEEDED)
    _environment(before)
    _environment(after, sglang="0.5.10")
    line = "Max running requests is reset to 48 for speculative decoding. You can override this by ..."
    after.warnings = [
        {"kind": "max_running_reset", "message": "Max running requests was reset to 48", "at": "x", "line": 7,
         "text": line}
    ]  # fmt: skip
    after.save(update_fields=["warnings"])
    client.force_login(viewer)

    page = client.get(after.experiment.get_absolute_url()).content.decode()
    diff = client.get(f"/experiments/{before.experiment_id}/diff/?with={after.experiment_id}").content.decode()
    data = client.get(f"/api/experiments/{before.experiment_id}/diff/{after.experiment_id}").json()

    assert f'href="/runs/{after.pk}/#L7"' in page and line in page and "log line 7" in page
    assert "SGLang 0.5.9 -&gt; 0.5.10" in diff
    assert data["before_experiment"] == before.experiment_id and data["summary"].startswith("SGLang 0.5.9 -> 0.5.10")
