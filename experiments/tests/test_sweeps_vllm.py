"""Sweeps and study spaces over a vLLM base: num_speculative_tokens (the steps list) varied alone, topk and
draft-token lists refused, candidates that stay vLLM configs, and none of SGLang's rules applied. Pure, bar the
last tests: the sweep form and the API's preview, which check the candidates as any vLLM config."""

from __future__ import annotations

from typing import Any

import pytest

from experiments.rules import launch_fields, sweeps
from experiments.rules.sweeps import Sweep, SweepError, build_grid
from experiments.tuning.space import SearchSpace

from .factories import MODELS, make_host

VLLM_BASE: dict[str, Any] = {
    "engine": "vllm",
    "model_path": "/models/kimi-k2.5-sim",
    "speculative_algorithm": "eagle3",
    "speculative_draft_model_path": "/models/kimi-k2.5-sim-eagle3",
    "tp_size": 8,
    "engine_options": {"draft_tensor_parallel_size": 1},
    "extra_args": ["--gpu-memory-utilization", "0.85"],
    "env": {"NCCL_PROTO": "LL"},
}
TOKENS = "num_speculative_tokens"


def _names(grid: sweeps.Grid) -> list[str]:
    return [c["name"] for c in grid.candidates]


def test_it_sweeps_num_speculative_tokens_alone_and_names_candidates_in_vllms_words():
    grid = build_grid(VLLM_BASE, Sweep(steps=(1, 2, 4)))

    assert _names(grid) == [f"{TOKENS} 1", f"{TOKENS} 2", f"{TOKENS} 4"]
    assert [c["speculative_num_steps"] for c in grid.candidates] == [1, 2, 4]
    first = grid.candidates[0]
    # A vLLM config, the base's engine options and launch settings copied; no SGLang-only field set.
    assert first["engine"] == "vllm" and first["engine_options"] == {"draft_tensor_parallel_size": 1}
    assert first["extra_args"] == VLLM_BASE["extra_args"] and first["env"] == {"NCCL_PROTO": "LL"}
    assert "speculative_eagle_topk" not in first and "speculative_num_draft_tokens" not in first
    assert launch_fields.field_conflicts("vllm", first) == []
    assert grid.skipped == [] and "top-1 chain" in grid.notes[0]


@pytest.mark.parametrize(
    "lists, field, fragment",
    [
        ({"topk": (1, 2)}, sweeps.TOPK, "vLLM has no topk setting"),
        ({"topk": (1,)}, sweeps.TOPK, "Leave this list empty"),
        ({"draft_tokens": (3, 4)}, sweeps.DRAFT, "vLLM has no draft tokens setting"),
        ({"steps": ()}, sweeps.STEPS, "at least one value"),
    ],
)
def test_it_refuses_the_lists_vllm_has_no_setting_for_naming_the_list(lists, field, fragment):
    sweep = Sweep(**{"steps": (2,), **lists})

    with pytest.raises(SweepError) as raised:
        build_grid(VLLM_BASE, sweep)

    assert raised.value.field == field and fragment in raised.value.message


@pytest.mark.parametrize("method", ["eagle3", "eagle", "draft_model", "mtp", "ngram"])
def test_it_sweeps_every_vllm_method_that_takes_k(method):
    grid = build_grid({**VLLM_BASE, "speculative_algorithm": method}, Sweep(steps=(3,)))

    assert _names(grid) == [f"{TOKENS} 3"] and grid.candidates[0]["speculative_algorithm"] == method


@pytest.mark.parametrize("method", ["suffix", "", "EAGLE3"])
def test_it_refuses_a_vllm_base_whose_method_takes_no_k(method):
    with pytest.raises(SweepError) as raised:
        build_grid({**VLLM_BASE, "speculative_algorithm": method}, Sweep(steps=(3,)))

    assert raised.value.field == "base" and TOKENS in raised.value.message and "ngram" in raised.value.message


def test_it_applies_none_of_sglangs_rules_to_a_vllm_base():
    # SGLang would refuse topk above 1 under spec v2 or with trtllm_mha; vLLM has no topk: every K runs as asked.
    base = {**VLLM_BASE, "env": {"SGLANG_ENABLE_SPEC_V2": "1"}}
    sweep = Sweep(steps=(1, 16), flags=(("--max-num-seqs", ("8", "64")),), env=(("NCCL_PROTO", ("LL", "Simple")),))

    grid = build_grid(base, sweep)

    assert len(grid.candidates) == 8 and grid.skipped == []
    assert _names(grid)[:2] == [
        f"{TOKENS} 1 max-num-seqs=8 NCCL_PROTO=LL",
        f"{TOKENS} 1 max-num-seqs=8 NCCL_PROTO=Simple",
    ]
    assert grid.candidates[-1]["extra_args"] == [*VLLM_BASE["extra_args"], "--max-num-seqs", "64"]
    assert build_grid(base, Sweep(steps=(2,), name_prefix="kimi")).candidates[0]["name"] == f"kimi-{TOKENS} 2"


def test_it_keeps_the_sweep_to_the_fields_each_engines_table_has():
    assert sweeps.swept_fields("vllm") == (sweeps.STEPS,)
    assert sweeps.swept_fields("sglang") == (sweeps.STEPS, sweeps.TOPK, sweeps.DRAFT)
    assert sweeps.axis_names("vllm") == {sweeps.STEPS: TOKENS}
    assert sweeps.axis_names("sglang") == {sweeps.STEPS: "steps", sweeps.TOPK: "topk", sweeps.DRAFT: "draft tokens"}
    # An SGLang base is unchanged: its topk list is still required, its rules still applied.
    with pytest.raises(SweepError) as raised:
        build_grid({**VLLM_BASE, "engine": "sglang", "speculative_algorithm": "EAGLE3"}, Sweep(steps=(2,)))
    assert raised.value.field == sweeps.TOPK


# ---- the study's space ----------------------------------------------------------------------------------------


def test_a_vllm_space_searches_k_alone():
    space = SearchSpace.build(VLLM_BASE, Sweep(steps=(1, 2, 3), env=(("NCCL_PROTO", ("LL", "Simple")),)))

    assert set(space.distributions()) == {"steps", "env:NCCL_PROTO"}
    assert space.name_of({"steps": 2, "env:NCCL_PROTO": "Simple"}) == f"{TOKENS} 2 NCCL_PROTO=Simple"
    for name in space.names:  # Optuna's params and the config name round-trip
        assert space.name_of(space.params_of(name)) == name
    assert space.params_of(f"{TOKENS} 3 NCCL_PROTO=LL") == {"steps": 3, "env:NCCL_PROTO": "LL"}


def test_a_vllm_space_is_planned_and_recommended_in_vllms_words():
    from experiments.tuning import plan, recommend

    space = SearchSpace.build(VLLM_BASE, Sweep(steps=(1, 2, 3)))
    settings = plan.Settings(concurrency=(1,), max_launches=20, round_size=3, seed=3)
    history = plan.History()

    first = plan.plan_round(space, history, settings, 0)

    assert sorted(first.candidates) == sorted(space.names)
    for _ in range(3):  # K 2 clearly fastest, every launch
        history.add(plan.BASELINE, {1: 100.0})
        for name, speed in ((f"{TOKENS} 1", 120.0), (f"{TOKENS} 2", 150.0), (f"{TOKENS} 3", 130.0)):
            history.add(name, {1: speed + len(history.samples[plan.BASELINE][1])})
        history.launches += 4
    best = recommend.best_per_concurrency(history, settings)
    (band,) = recommend.bands(best)
    assert band.config == f"{TOKENS} 2" and band.describe().startswith(f"c = 1: {TOKENS} 2, 1.5")
    (winner,) = recommend.band_winners([band], space)
    assert (winner.algorithm, winner.num_steps, winner.topk) == ("eagle3", 2, None)


# ---- the form and the API's preview -------------------------------------------------------------------------

API_BASE = {
    **VLLM_BASE,
    "model_path": f"{MODELS}/kimi-k2.5-sim",
    "speculative_draft_model_path": f"{MODELS}/kimi-k2.5-sim-eagle3",
}
PROFILE = {"concurrency": [1], "num_prompts": 4, "input_len": 32, "output_len": 32, "passes": 1, "launches": 1}


@pytest.fixture
def preview(client, owner):
    from experiments.models import ApiToken

    _, token = ApiToken.issue(owner)
    host = make_host()

    def post(**sweep: Any):
        body = {"host": host.name, "sweep": {"base": API_BASE, **sweep}, "profile": PROFILE}
        headers = {"Authorization": f"Bearer {token}"}
        return client.post("/api/sweeps/preview", body, content_type="application/json", headers=headers)

    return post


@pytest.mark.django_db
def test_the_api_previews_a_vllm_sweep_as_vllm_configs(preview):
    response = preview(speculative_num_steps=[1, 3], extra_args={"--max-num-seqs": [16]})

    assert response.status_code == 200, response.content
    body = response.json()
    assert [c["name"] for c in body["candidates"]] == [f"{TOKENS} 1 max-num-seqs=16", f"{TOKENS} 3 max-num-seqs=16"]
    assert all(c["engine"] == "vllm" and c["engine_options"] == API_BASE["engine_options"] for c in body["candidates"])
    assert body["configs"] == 3 and body["skipped"] == []


@pytest.mark.django_db
def test_the_api_refuses_a_vllm_sweeps_topk_list_at_the_list(preview):
    response = preview(speculative_num_steps=[2], speculative_eagle_topk=[1, 4])

    assert response.status_code == 409, response.content
    (message,) = response.json()["errors"]["sweep.speculative_eagle_topk"]
    assert message.startswith("vLLM has no topk setting: it drafts a top-1 chain of num_speculative_tokens tokens")


@pytest.mark.django_db
def test_the_api_checks_a_vllm_sweeps_varied_flags_against_vllms_list(preview):
    sglang_flag = preview(speculative_num_steps=[2], extra_args={"--mem-fraction-static": ["0.8"]})
    managed = preview(speculative_num_steps=[2], extra_args={"--speculative-config": ["{}"]})

    assert sglang_flag.status_code == 403 and "sweep.extra_args" in sglang_flag.json()["errors"]
    assert managed.status_code == 403 and "sweep.extra_args" in managed.json()["errors"]


@pytest.mark.django_db
def test_it_starts_a_vllm_study_from_the_pages_vllm_example(client, member):
    from django.urls import reverse

    from experiments.models import Study

    from .test_studies import _page_data

    make_host(models_root=MODELS, gpu_inventory=[{"index": i} for i in range(8)], vllm_launcher="vllm serve")
    client.force_login(member)
    blank = client.get(reverse("study_new"), {"engine": "vllm"})
    assert blank.context["sweep_form"].initial == {"speculative_num_steps": "1, 2, 3"}
    data = {**_page_data(blank), "experiment-name": "vllm from the page", "profile-concurrency": "1, 8"}

    response = client.post(reverse("study_new"), data)

    assert response.status_code == 302, response.context and response.context["errors"]
    study = Study.objects.get()
    assert study.space["steps"] == [1, 2, 3] and study.space["topk"] == [] and study.base["engine"] == "vllm"
    configs = {c.name: c.config for c in study.studyconfig_set.select_related("config")}
    assert sorted(configs) == [f"{TOKENS} 1", f"{TOKENS} 2", f"{TOKENS} 3"]
    k2 = configs[f"{TOKENS} 2"]
    assert (k2.engine, k2.speculative_algorithm, k2.speculative_num_steps) == ("vllm", "eagle3", 2)
    assert k2.speculative_eagle_topk is None and k2.speculative_num_draft_tokens is None
