"""A tuning study over a vLLM candidate end to end: API -> Celery worker -> real sshd -> simulated host running the
newest vLLM. Its space is num_speculative_tokens alone; its configs are launched as vLLM takes them, and its answer
names vLLM's setting. The smallest study that still answers: one concurrency, one round of the baseline and the one
K the sampler picks, the budget then spent."""

from __future__ import annotations

import pytest

from experiments.models import ApiToken, Host, Run, Study
from experiments.tests.test_end_to_end_study import FAST, TP_SIZE, _runs
from experiments.tests.waiting import until
from simhost.vllm import versions as vllm_versions

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
TOKENS = "num_speculative_tokens"
# Two ranks, as the SGLang baseline's: at the simulated GPUs' real size the Kimi target's weights fill eight, so the
# vLLM base runs on GPUs it fits on (SIMHOST_GPU_MEMORY_MIB), two processes rather than eight on the loaded machine.
VLLM_TP_SIZE = 2


def test_it_tunes_num_speculative_tokens_of_a_vllm_config(client, owner, sim_host: Host, celery_worker_process):
    # The newest vLLM: older ones refuse EAGLE-3 on a Kimi target (see test_end_to_end_engines).
    sim_host.shell_setup += f"\nexport SIMHOST_VLLM_VERSION={vllm_versions.NEWEST}"
    sim_host.save()
    _, token = ApiToken.issue(owner)
    headers = {"Authorization": f"Bearer {token}"}
    models = sim_host.models_root
    target = {"model_path": f"{models}/kimi-k2.5-sim", "tp_size": TP_SIZE, "env": FAST}
    payload = {
        "name": "tune vllm",
        "host": sim_host.name,
        "baseline": {"name": "baseline", **target},
        "sweep": {
            "base": {
                **target,
                "tp_size": VLLM_TP_SIZE,
                "engine": "vllm",
                "speculative_algorithm": "eagle3",
                "speculative_draft_model_path": f"{models}/kimi-k2.5-sim-eagle3",
                "engine_options": {"draft_tensor_parallel_size": 1},
                "env": {**FAST, "SIMHOST_GPU_MEMORY_MIB": "700000"},
            },
            "speculative_num_steps": [1, 3],
        },
        "profile": {"concurrency": [1], "num_prompts": 4, "input_len": 32, "output_len": 32, "passes": 1},
        # The least budget a study takes: one round of the baseline and one K, then a second would pass it.
        "budget": {"launches": 3},
        "round_size": 1,
    }

    response = client.post("/api/studies", payload, content_type="application/json", headers=headers)

    assert response.status_code == 201, response.content
    study = Study.objects.get(pk=response.json()["id"])
    until(lambda: not Study.objects.get(pk=study.pk).is_running, 120, "the study's end", lambda: _runs(study))
    body = client.get(f"/api/studies/{study.pk}", headers=headers).json()
    assert (body["state"], body["stop_reason"]) == ("finished", "budget"), body
    assert body["space"]["steps"] == [1, 3] and body["space"]["topk"] == []

    # Each K launched as vLLM takes it: one speculative JSON, the engine options in it, no SGLang flag.
    assert study.studyconfig_set.count() == 2
    runs = Run.objects.filter(experiment__studyround__study=study).select_related("config")
    assert runs.count() == 2 and all(run.state == Run.State.SUCCEEDED for run in runs), _runs(study)
    for run in runs.exclude(config=study.baseline):
        k = run.config.speculative_num_steps
        assert run.config.name == f"{TOKENS} {k}" and run.config.engine == "vllm"
        assert (
            f'"num_speculative_tokens":{k}' in run.launch_command
            and '"draft_tensor_parallel_size":1' in run.launch_command
        )
        assert "--speculative-num-steps" not in run.launch_command
        assert run.effective_args.get("num_spec_tokens") == k

    # The trials and the answer in vLLM's words.
    (trial,) = [t for t in body["trials"] if not t["is_baseline"]]
    k = trial["values"][TOKENS]
    assert trial["config"] == f"{TOKENS} {k}" and trial["values"] == {TOKENS: k} and trial["state"] == "measured"
    (band,) = body["recommendation"]
    assert (band["low"], band["high"]) == (1, 1) and band["config"] in ("baseline", trial["config"])
    # The winner, or the candidate it is not yet settled against, named as vLLM's setting.
    assert f"{TOKENS} {k}" in band["text"], band
