"""Methods as a sweep and study dimension: each method's candidates over the lists it takes, named after the method,
its draft given or the base's, bad method lists refused with the reason, and a study's space that maps every candidate
to Optuna's parameters and back."""

from __future__ import annotations

from typing import Any

import pytest

from experiments.models import ApiToken
from experiments.rules import sweeps
from experiments.rules.sweeps import MethodChoice, Sweep, SweepError, build_grid, parse_methods
from experiments.tuning.space import SearchSpace

from .factories import MODELS, make_host

BASE: dict[str, Any] = {
    "model_path": "/models/kimi-k2.5-sim",
    "speculative_algorithm": "EAGLE3",
    "speculative_draft_model_path": "/models/kimi-k2.5-sim-eagle3",
    "tp_size": 8,
}
METHODS = (MethodChoice("EAGLE3"), MethodChoice("NGRAM"), MethodChoice("STANDALONE", "/models/small-draft"))


def _names(grid: sweeps.Grid) -> list[str]:
    return [c["name"] for c in grid.candidates]


def test_each_method_varies_the_lists_it_takes_and_is_named_first():
    grid = build_grid(BASE, Sweep(steps=(2, 3), topk=(1,), draft_tokens=(8, 12), methods=METHODS))

    assert _names(grid) == [
        "EAGLE3-s2-k1-d3", "EAGLE3-s3-k1-d4", "NGRAM-d8", "NGRAM-d12", "STANDALONE-s2-k1-d3", "STANDALONE-s3-k1-d4",
    ]  # fmt: skip
    by_name = {c["name"]: c for c in grid.candidates}
    ngram = by_name["NGRAM-d8"]
    # NGRAM's width is its draft tokens; SGLang sets its steps and topk from it (`_handle_ngram`).
    assert (ngram["speculative_algorithm"], ngram["speculative_num_draft_tokens"]) == ("NGRAM", 8)
    assert ngram["speculative_num_steps"] is None and ngram["speculative_eagle_topk"] is None
    assert ngram["speculative_draft_model_path"] is None  # it drafts from the prompt: the base's draft is not its
    # A method given its own draft runs it; one given none keeps the base's.
    assert by_name["STANDALONE-s2-k1-d3"]["speculative_draft_model_path"] == "/models/small-draft"
    assert by_name["EAGLE3-s2-k1-d3"]["speculative_draft_model_path"] == BASE["speculative_draft_model_path"]
    assert any("NGRAM drafts one run" in note for note in grid.notes)
    # Topk 1 collapses the draft-token list for the tree methods: said, as without methods.
    assert any(s.replaced_by == "EAGLE3-s2-k1-d3" for s in grid.skipped)


def test_without_methods_the_grid_is_the_bases_own_as_before():
    assert _names(build_grid(BASE, Sweep(steps=(2, 3), topk=(1,)))) == ["s2-k1-d3", "s3-k1-d4"]


@pytest.mark.parametrize(
    ("typed", "fragment"),
    [
        ("EAGLE3, MEDUSA", "'MEDUSA' is no method of SGLang"),
        ("eagle3", "'eagle3' is no method of SGLang"),  # vLLM's spelling on an SGLang base
        ("NGRAM, NGRAM", "NGRAM is given twice"),
        ("STANDALONE=--trust-remote-code", "is a flag, not a draft path"),
        ("STANDALONE=" + "x" * 600, "a draft path is one line of at most"),
        (", ".join(["EAGLE3=/m/" + str(i) for i in range(9)]), "At most 8 methods"),
        (["EAGLE3", 7], "is not a method"),
        ([{"method": "NGRAM", "draft": "/m/d\n--x"}], "a draft path is one line"),
    ],
)
def test_a_bad_method_list_is_refused_with_the_reason(typed: Any, fragment: str):
    with pytest.raises(SweepError) as refused:
        parse_methods(typed, "methods", "sglang")
    assert fragment in refused.value.message and refused.value.field == "methods"


def test_methods_are_read_as_typed_or_as_json():
    assert parse_methods("EAGLE3,NGRAM\nSTANDALONE = /models/small-draft", "methods", "sglang") == METHODS
    typed = ["EAGLE3", {"method": "NGRAM"}, {"method": "STANDALONE", "draft": "/models/small-draft"}]
    assert parse_methods(typed, "methods", "sglang") == METHODS
    assert parse_methods("eagle3, ngram", "methods", "vllm") == (MethodChoice("eagle3"), MethodChoice("ngram"))


def test_a_vllm_sweep_over_methods_varies_k_where_the_method_takes_it_and_runs_the_others_at_their_defaults():
    base = {**BASE, "engine": "vllm", "speculative_algorithm": "eagle3", "speculative_num_steps": 3}
    grid = build_grid(base, Sweep(steps=(2, 4), methods=(MethodChoice("eagle3"), MethodChoice("suffix"))))
    assert _names(grid) == ["eagle3-num_speculative_tokens 2", "eagle3-num_speculative_tokens 4", "suffix-defaults"]
    assert grid.candidates[-1]["speculative_num_steps"] is None


def test_a_studys_space_over_methods_maps_every_candidate_to_optunas_parameters_and_back():
    space = SearchSpace.build(BASE, Sweep(steps=(2, 3), topk=(1, 2), draft_tokens=(4, 8), methods=METHODS))

    assert {"method", "steps", "topk", "draft_tokens"} <= set(space.distributions())
    for name in space.names:
        assert space.name_of(space.params_of(name)) == name, name
    # A width method ignores the steps and topk Optuna proposes with it: one config per width.
    assert space.name_of({"method": "NGRAM", "steps": 3, "topk": 2, "draft_tokens": 8}) == "NGRAM-d8"


@pytest.mark.django_db
def test_the_api_previews_a_sweep_over_methods_and_names_a_bad_method(client, owner):
    _, token = ApiToken.issue(owner)
    host = make_host()
    base = {
        **BASE,
        "model_path": f"{MODELS}/kimi-k2.5-sim",
        "speculative_draft_model_path": f"{MODELS}/kimi-k2.5-sim-eagle3",
    }
    profile = {
        "concurrency": [1, 16],
        "num_prompts": 32,
        "input_len": 128,
        "output_len": 128,
        "passes": 1,
        "launches": 1,
    }

    def preview(methods: Any):
        sweep = {"base": base, "speculative_num_steps": [2], "speculative_eagle_topk": [1], "methods": methods}
        return client.post(
            "/api/sweeps/preview", {"host": host.name, "sweep": sweep, "profile": profile},
            content_type="application/json", headers={"Authorization": f"Bearer {token}"},
        )  # fmt: skip

    answer = preview(["EAGLE3", {"method": "NGRAM"}])
    assert answer.status_code == 200, answer.content
    assert [c["name"] for c in answer.json()["candidates"]] == ["EAGLE3-s2-k1-d3", "NGRAM-defaults"]
    refused = preview("EAGLE3, LOOKAHEAD")
    assert refused.status_code == 422
    assert "'LOOKAHEAD' is no method of SGLang" in str(refused.json()["errors"])


def test_one_method_with_several_drafts_names_each_candidate_after_its_draft():
    methods = (MethodChoice("EAGLE3", "/models/run-step2000"), MethodChoice("EAGLE3", "/models/run-step4000/"))
    grid = build_grid(BASE, Sweep(steps=(2,), topk=(1,), methods=methods))

    assert _names(grid) == ["EAGLE3 run-step2000-s2-k1-d3", "EAGLE3 run-step4000-s2-k1-d3"]
    assert [c["speculative_draft_model_path"] for c in grid.candidates] == [
        "/models/run-step2000",
        "/models/run-step4000/",
    ]
    space = SearchSpace.build(BASE, Sweep(steps=(2, 3), topk=(1,), methods=methods))
    assert all(space.name_of(space.params_of(name)) == name for name in space.names)


# --- draft checkpoints as a dimension (#53) ---------------------------------------------------------------------

CHECKPOINTS = ("/models/run-step2000-sglang", "/models/run-step4000-sglang", "/models/run-step5000-sglang")


def test_draft_checkpoints_run_the_bases_method_with_each_and_name_each_candidate_after_its_checkpoint():
    choices = sweeps.with_drafts((), CHECKPOINTS, "EAGLE3", "sglang")
    assert choices == tuple(MethodChoice("EAGLE3", path) for path in CHECKPOINTS)
    grid = build_grid(BASE, Sweep(steps=(2, 3), topk=(1,), methods=choices))
    assert len(grid.candidates) == 6
    assert _names(grid)[:2] == ["EAGLE3 run-step2000-sglang-s2-k1-d3", "EAGLE3 run-step2000-sglang-s3-k1-d4"]
    space = SearchSpace.build(BASE, Sweep(steps=(2, 3), topk=(1,), methods=choices))
    assert all(space.name_of(space.params_of(name)) == name for name in space.names)


def test_with_methods_only_those_that_take_a_draft_run_each_checkpoint():
    choices = sweeps.with_drafts((MethodChoice("EAGLE3"), MethodChoice("NGRAM")), CHECKPOINTS[:2], "EAGLE3", "sglang")
    assert choices == (
        MethodChoice("EAGLE3", CHECKPOINTS[0]),
        MethodChoice("EAGLE3", CHECKPOINTS[1]),
        MethodChoice("NGRAM"),
    )


@pytest.mark.parametrize(
    ("typed", "fragment"),
    [
        ("/m/a\n/m/a", "is given twice"),
        ("--trust-remote-code", "is a flag, not a draft path"),
        ([3], "A draft path is one line"),
        (["/m/x\r--y"], "A draft path is one line"),
        ("\n".join(f"/m/{i}" for i in range(9)), "At most 8 drafts"),
    ],
)
def test_a_bad_draft_list_is_refused_with_the_reason(typed: Any, fragment: str):
    with pytest.raises(SweepError) as refused:
        sweeps.parse_drafts(typed, "drafts")
    assert fragment in refused.value.message


@pytest.mark.django_db
def test_the_api_previews_a_sweep_over_draft_checkpoints_each_checked_as_a_draft(client, owner):
    _, token = ApiToken.issue(owner)
    host = make_host()
    base = {
        **BASE,
        "model_path": f"{MODELS}/kimi-k2.5-sim",
        "speculative_draft_model_path": f"{MODELS}/kimi-k2.5-sim-eagle3",
    }
    profile = {"concurrency": [1], "num_prompts": 8, "input_len": 128, "output_len": 128, "passes": 1, "launches": 1}
    drafts = [f"{MODELS}/kimi-k2.5-sim-eagle3-sf-step2000-sglang", f"{MODELS}/kimi-k2.5-sim-eagle3-sf-step4000-sglang"]
    sweep = {"base": base, "speculative_num_steps": [2, 3], "speculative_eagle_topk": [1], "drafts": drafts}
    answer = client.post(
        "/api/sweeps/preview", {"host": host.name, "sweep": sweep, "profile": profile},
        content_type="application/json", headers={"Authorization": f"Bearer {token}"},
    )  # fmt: skip
    assert answer.status_code == 200, answer.content
    candidates = answer.json()["candidates"]
    assert [c["name"] for c in candidates] == [
        f"EAGLE3 kimi-k2.5-sim-eagle3-sf-step{step}-sglang-s{steps}-k1-d{steps + 1}"
        for step in (2000, 4000)
        for steps in (2, 3)
    ]
    # A checkpoint outside the host's models root is refused at submission, as any draft path is.
    study = {
        "name": "which checkpoint", "host": host.name,
        "baseline": {"name": "baseline", "model_path": base["model_path"], "tp_size": 8},
        "sweep": {**sweep, "drafts": [drafts[0], "/etc/passwd-draft"]}, "profile": profile, "budget": {"launches": 4},
    }  # fmt: skip
    refused = client.post(
        "/api/studies", study, content_type="application/json", headers={"Authorization": f"Bearer {token}"}
    )
    assert refused.status_code in (403, 404, 409, 422) and "/etc/passwd-draft" in refused.content.decode(), (
        refused.content
    )
