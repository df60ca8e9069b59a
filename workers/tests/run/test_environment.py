"""What a run ran on, read on the simulated host: the fingerprint before the launch, the host's default environment
merged under the config's and received by every server process, and the GPUs' telemetry with a throttling fault."""

from __future__ import annotations

import pytest

from experiments.actions.audit import Actor
from experiments.actions.experiments import do_create_experiment
from experiments.models import BenchmarkProfile, GpuSample, LogChunk, Run, RunEnvironment, ServerMetricSample
from workers.tasks import drive_host
from workers.tests.run.simruns import SMALL_PROFILE, held_gpu_memory, queue_run, sim_config

pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("private_queue"),
]


def test_it_fingerprints_the_host_and_records_the_environment_every_process_received(sim_host, owner):
    sim_host.default_env = {"NCCL_PROTO": "Simple", "NCCL_IB_HCA": "mlx5_0", "HF_TOKEN": "hf_secret"}
    sim_host.save(update_fields=["default_env"])
    config = sim_config(
        sim_host,
        env={"NCCL_PROTO": "LL", "SIMHOST_SGLANG_VERSION": "0.5.10", "SIMHOST_THROTTLE_AFTER_S": "0"},
        expect={"env_propagated": ["NCCL_PROTO", "NCCL_IB_HCA"]},
    )

    drive_host(queue_run(sim_host, config, owner).host_id)
    run = Run.objects.get(config__name=config.name, host=sim_host)

    assert run.state == Run.State.SUCCEEDED, run.failure()
    environment = RunEnvironment.objects.get(run=run)
    fingerprint = environment.fingerprint
    assert environment.read_error == "" and fingerprint["problems"] == []
    assert fingerprint["packages"]["sglang"]["version"] == "0.5.10"  # what the server imitates, from the config env
    assert fingerprint["packages"]["torch"]["cuda"] == "12.8" and fingerprint["packages"]["nccl"]["version"]
    assert fingerprint["driver"] == "580.159.04" and fingerprint["cuda_driver"] == "13.0"
    assert fingerprint["gpu_summary"].startswith("8 x NVIDIA H200, 143771 MiB, 700 W limit")
    # The config's NCCL_PROTO wins over the host's; the host's other variables reach the server as well.
    assert environment.launch_env["NCCL_PROTO"] == "LL" and environment.launch_env["NCCL_IB_HCA"] == "mlx5_0"
    assert environment.host_env_names == ["HF_TOKEN", "NCCL_IB_HCA"]
    assert "NCCL_IB_HCA=mlx5_0" in run.launch_command
    server_env = environment.server_env
    assert server_env is not None
    assert server_env["NCCL_PROTO"] == "LL" and server_env["HF_TOKEN"] == "(hidden)"
    assert "PATH" not in server_env  # the login's environment is not the experiment's
    assert len(environment.processes) >= 3  # the launcher and one scheduler per TP rank
    # Sampled from the launch to the teardown; the throttled engine's GPUs report it.
    samples = GpuSample.objects.of_run(run)
    assert samples.filter(gpu=0).count() >= 2
    assert samples.filter(gpu=0, reasons=0x60, sm_mhz__lt=1980).exists()
    # The server's gauges during the cell (the launch enabled /metrics: the config did not), on the same clock.
    cell = run.measurement_set.get()
    server_samples = list(ServerMetricSample.objects.of_run(run))
    assert server_samples and "--enable-metrics" in run.launch_command
    cell_start = cell.created_at.timestamp() - cell.duration_s - 1.0
    assert all(cell_start <= s.at.timestamp() <= cell.created_at.timestamp() for s in server_samples)
    assert held_gpu_memory(sim_host) == ""


def test_it_flags_a_throttled_run_on_the_comparison_and_says_what_changed(sim_host, owner, owner_client, settings):
    settings.SPECDASH_TELEMETRY_MS = 200  # several samples inside each short benchmark cell
    baseline = sim_config(sim_host, "eagle3", speculative=True)
    # The same server on a GPU that throttles from its first step (and a newer SGLang): slower clocks, fewer tok/s.
    throttled = sim_config(
        sim_host,
        "eagle3-hot",
        speculative=True,
        env={"SIMHOST_THROTTLE_AFTER_S": "0", "SIMHOST_THROTTLE_FACTOR": "1.5", "SIMHOST_SGLANG_VERSION": "0.5.10"},
    )
    profile = BenchmarkProfile(name="p", **{**SMALL_PROFILE, "num_prompts": 4, "output_len": 64})
    experiment = do_create_experiment(
        actor=Actor(owner), name="hot", host=sim_host, baseline=baseline, candidates=[throttled], profile=profile
    )

    drive_host(sim_host.pk)
    drive_host(sim_host.pk)

    cool, hot = experiment.run_set.select_related("config").order_by("sequence")
    assert (cool.state, hot.state) == (Run.State.SUCCEEDED, Run.State.SUCCEEDED), (cool.failure(), hot.failure())
    speed = {r.pk: r.measurement_set.get().output_throughput for r in (cool, hot)}
    assert speed[hot.pk] < 0.8 * speed[cool.pk]  # the fault costs throughput, not only reported clocks
    # The comparison says which run was throttled, why, and that its clocks differed from the other's.
    data = owner_client.get(f"/api/experiments/{experiment.pk}").json()
    warnings = data["reproducibility"]["telemetry_warnings"]
    assert any(
        w.startswith(f"Run {hot.pk} (eagle3-hot) was throttled while benchmarking: SW thermal") for w in warnings
    )
    slower = f"Run {hot.pk} (eagle3-hot) ran its GPUs at a median SM clock of 1320 MHz, below the 1980 MHz of "
    assert f"{slower}Run {cool.pk} (eagle3)" in " ".join(warnings)
    assert not any(w.startswith(f"Run {cool.pk} ") for w in warnings)
    assert data["reproducibility"]["machine_differences"] == [
        {"run": hot.pk, "against": cool.pk, "text": "SGLang 0.5.9 -> 0.5.10"}
    ]
    page = owner_client.get(f"/experiments/{experiment.pk}/").content.decode()
    assert f"Run {hot.pk} (eagle3-hot) was throttled while benchmarking" in page
    # The diff of the two runs, in words, through the API and the page.
    diff = owner_client.get(f"/api/runs/{cool.pk}/diff/{hot.pk}").json()
    assert diff["env_source"] == "server"
    assert diff["summary"].startswith(
        "SGLang 0.5.9 -> 0.5.10, SIMHOST_SGLANG_VERSION unset -> 0.5.10, SIMHOST_THROTTLE_AFTER_S unset -> 0"
    )
    assert diff["summary"].endswith("; PyTorch, CUDA (PyTorch), NCCL, driver, GPUs same")
    assert "SGLang 0.5.9 -&gt; 0.5.10" in owner_client.get(f"/runs/{cool.pk}/diff/?with={hot.pk}").content.decode()
    # The servers' own warnings, each with the log line it came from, on the run and in the API.
    run_warnings = {w["kind"]: w for w in owner_client.get(f"/api/runs/{hot.pk}").json()["warnings"]}
    assert {"max_running_reset", "overlap_disabled"} <= run_warnings.keys()
    reset = run_warnings["max_running_reset"]
    assert "Max running requests is reset to 48" in reset["text"]
    assert LogChunk.objects.lines(hot.pk, after=reset["line"] - 1, limit=1)[0]["text"] == reset["text"]
    run_page = owner_client.get(f"/runs/{hot.pk}/").content.decode()
    assert f'href="#L{reset["line"]}"' in run_page and 'id="telemetry-chart"' in run_page
    assert 'id="throttle-warning"' in run_page and "SGLANG_VERSION" in run_page
