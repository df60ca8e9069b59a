"""The run lifecycle of a vLLM server on the simulated host (its vLLM personality), through the same phases as SGLang's
and held to the same guarantees: launched in its own process group, ready as vLLM gets ready, verified, benchmarked
and torn down with the GPUs confirmed free, even when its API server died and left `VLLM::EngineCore` holding them
(vllm-interface.md §5: killing the API server alone leaves the engine core and its workers alive)."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from experiments.models import Host, Run, RunEnvironment, ServerConfig
from simhost.vllm import versions as vllm_versions
from workers.tasks import drive_host
from workers.tests.run.simruns import held_gpu_memory, queue_run, wait_for_state

pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("private_queue"),
]


@pytest.fixture
def vllm_host(sim_host: Host) -> Host:
    """The simulated host with the newest vLLM: the one that serves EAGLE-3 on a Kimi target (0.19+)."""
    sim_host.shell_setup += f"\nexport SIMHOST_VLLM_VERSION={vllm_versions.NEWEST}"
    sim_host.save()
    return sim_host


def vllm_config(host: Host, name: str = "vllm", *, env: dict | None = None, tp_size: int = 2, **fields) -> ServerConfig:
    """An unsaved vLLM EAGLE-3 config of the simulated target and draft on two ranks of GPUs the whole target fits on
    (two processes, not eight, on the loaded 2-core machine; at their real size two ranks would run out of memory)."""
    models = host.models_root
    return ServerConfig(
        name=name,
        engine="vllm",
        model_path=f"{models}/kimi-k2.5-sim",
        tp_size=tp_size,
        speculative_algorithm="eagle3",
        speculative_draft_model_path=f"{models}/kimi-k2.5-sim-eagle3",
        speculative_num_steps=2,
        env={"VLLM_LOG_STATS_INTERVAL": "1", "SIMHOST_GPU_MEMORY_MIB": "700000", **(env or {})},
        **fields,
    )


def _drive(run: Run) -> Run:
    drive_host(run.host_id)
    run.refresh_from_db()
    return run


def test_a_vllm_run_succeeds_and_leaves_the_gpus_free(vllm_host, owner):
    config = vllm_config(vllm_host, env={"NCCL_PROTO": "LL"}, expect={"env_propagated": ["NCCL_PROTO"]})

    run = _drive(queue_run(vllm_host, config, owner))

    assert run.state == Run.State.SUCCEEDED, run.failure()
    assert [p["state"] for p in run.phases()] == [str(s) for s in Run.LIFECYCLE]
    # Every process of the group got the variable: the API server, VLLM::EngineCore and each VLLM::Worker_TPr.
    processes = RunEnvironment.objects.get(run=run).processes
    titles = [p["title"] for p in processes]
    assert any("VLLM::EngineCore" in t for t in titles) and sum("VLLM::Worker_TP" in t for t in titles) == 2
    assert all("NCCL_PROTO" in (p["env"] or {}) for p in processes)
    cell = run.measurement_set.get()
    assert cell.completed == 2 and cell.pooled_accept_length and cell.pooled_accept_length > 1.2
    assert run.loading_progress == 100
    assert held_gpu_memory(vllm_host) == ""
    vllm_host.refresh_from_db()
    assert vllm_host.active_run_id is None and not vllm_host.is_dirty


def test_an_engine_core_orphaned_by_its_api_server_is_torn_down_to_free_gpus(vllm_host, owner):
    run = queue_run(vllm_host, vllm_config(vllm_host), owner, num_prompts=64, output_len=128)
    driver = threading.Thread(target=drive_host, args=(vllm_host.pk,))
    driver.start()
    try:
        wait_for_state(run, {Run.State.BENCHMARKING}, timeout=90)
        # The API server dies as a `kill -9` of its pid would: VLLM::EngineCore and its workers live on, holding
        # every GPU (the orphan of reference §5), while nothing answers on the port.
        run.refresh_from_db()
        assert run.remote_pid is not None
        os.kill(run.remote_pid, signal.SIGKILL)
    finally:
        driver.join(timeout=120)
    run.refresh_from_db()

    assert run.is_finished and run.state == Run.State.FAILED, run.failure()
    # The whole group was stopped: nothing of it holds memory, nothing of it runs.
    assert held_gpu_memory(vllm_host) == ""
    vllm_host.refresh_from_db()
    assert not vllm_host.is_dirty and vllm_host.active_run_id is None


def test_a_vllm_server_without_memory_for_its_kv_cache_fails_with_vllms_words(vllm_host, owner):
    # H200s at their real size, the target on all eight: half of each holds the weights and leaves no KV cache.
    config = vllm_config(
        vllm_host, env={"SIMHOST_GPU_MEMORY_MIB": "143771"}, tp_size=8, extra_args=["--gpu-memory-utilization", "0.5"]
    )

    run = _drive(queue_run(vllm_host, config, owner))

    assert run.failure_kind == Run.FailureKind.OOM, run.failure()
    assert "No available memory for the cache blocks" in run.failure_message
    assert held_gpu_memory(vllm_host) == ""
