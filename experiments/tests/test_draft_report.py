"""The draft's report card: per draft checkpoint what it serves against what its training said, the checkpoint to
ship read from the one comparison, the silently broken one called out, on its page and in the API."""

from __future__ import annotations

import json
import random

import pytest
from django.utils import timezone

from experiments.actions import dispatch
from experiments.analysis import draft_report, draft_training, judge
from experiments.analysis.comparison import Sample
from experiments.analysis.verdicts import Winner
from experiments.models import PromptResults, Run, Study, StudyConfig, StudyRound

from .factories import (
    make_config,
    make_eagle_config,
    make_experiment,
    make_host,
    make_measurement,
    make_profile,
    make_run,
)

TRAINED = "/models/kimi-k2.5-sim-eagle3-sf"  # named as the simulated host's run
# tok/s per launch at c = 1 and c = 8.
SPEEDS = {
    "base": {1: [100, 101, 99, 100], 8: [600, 605, 595, 600]},
    "sf-step2000-s3": {1: [128, 130, 129, 127], 8: [640, 650, 645, 642]},
    "sf-step4000-s3": {1: [150, 152, 149, 151], 8: [700, 706, 698, 702]},
    "sf-step4000-s2": {1: [140, 141, 139, 140], 8: [690, 692, 688, 690]},
    "sf-step5000-s3": {1: [90, 91, 89, 90], 8: [560, 562, 558, 560]},
    "other-s3": {1: [110, 111, 109, 110], 8: [610, 612, 608, 611]},
}


def _training_json() -> list[dict]:
    """The host's answer as `training_directory_json` gives it: steps 2000, 4000 (best) and 5000 (latest) exported."""
    checkpoints = []
    for step, acc in ((1000, 0.434), (2000, 0.5456), (4000, 0.6448), (5000, 0.6386)):
        exported = step != 1000
        checkpoints.append(
            {
                "step": step,
                "is_latest": step == 5000,
                "is_best": step == 4000,
                "exported": exported,
                "draft_paths": [f"{TRAINED}-step{step}-sglang/"] if exported else [],  # a trailing slash as written
                "metrics": {"eval/per_position_acc": [acc] * 3, "eval/simulated_acc_len": acc + acc**2 + acc**3},
                "simulated_acc_len": acc + acc**2 + acc**3,
                "served_definition": 1 + acc + acc**2 + acc**3,
            }
        )
    return [{"path": "/train", "runs": [{"run_id": "sf", "checkpoints": checkpoints}], "refusal": None}]


def _requests(mean: float, n: int = 40) -> dict[str, list[float]]:
    rng = random.Random(int(mean * 1000))
    # Every draft token rejected is exactly 1.0 per request (the bonus token alone).
    values = [mean + rng.uniform(-0.1, 0.1) if mean > 1 else 1.0 for _ in range(n)]
    return {"chat": values[: n // 2], "code": values[n // 2 :]}


SERVED = {
    "sf-step2000-s3": 2.01,
    "sf-step4000-s3": 2.33,
    "sf-step4000-s2": 2.06,
    "sf-step5000-s3": 1.0,
    "other-s3": 1.5,
}


def _candidates() -> list[draft_report.DraftCandidate]:
    out = []
    for name in SERVED:
        steps = 2 if name.endswith("s2") else 3
        path = "/models/other-draft" if name.startswith("other") else f"{TRAINED}-{name.rsplit('-', 1)[0][3:]}-sglang"
        served = {1: SERVED[name], 8: SERVED[name]}
        out.append(
            draft_report.DraftCandidate(
                name, path, "EAGLE3", steps, 1, steps + 1, _requests(SERVED[name]), (1,), served
            )
        )
    return out


def _comparison(**gates):
    samples = [
        Sample(name, level, launch, 0, value, SERVED.get(name))
        for name, levels in SPEEDS.items()
        for level, values in levels.items()
        for launch, value in enumerate(values)
    ]
    return judge(samples, baseline="base", candidates=list(SERVED), passes_per_launch=1, **gates)


def _build(comparison, training=None, **extra):
    return draft_report.build(
        _candidates(),
        draft_training.training_checkpoints(_training_json() if training is None else training),
        rows=comparison.rows,
        winners=comparison.winners(),
        may_win=comparison.may_win,
        reasons=comparison.reasons,
        **extra,
    )


def test_it_ships_the_checkpoint_the_comparison_makes_the_winner_beside_its_training_figure() -> None:
    comparison = _comparison()
    report = _build(comparison)

    labels = [card.label for card in report.checkpoints]
    assert labels == ["step2000", "step4000", "step5000", "other-draft"]
    step4000 = report.checkpoints[1]
    assert [c.candidate.name for c in step4000.candidates] == ["sf-step4000-s3", "sf-step4000-s2"]
    winner = comparison.winners()[1]
    assert winner.candidate == "sf-step4000-s3" and step4000.wins_at == (1, 8)
    quoted = step4000.candidates[0]
    # Training on the served definition at the candidate's depth: 1 + p + p^2 + p^3 at 3 steps, 1 + p + p^2 at 2.
    p = 0.6448
    assert quoted.training == pytest.approx(1 + p + p**2 + p**3)
    assert step4000.candidates[1].training == pytest.approx(1 + p + p**2)
    assert report.answer is not None and report.answer.startswith(
        f"Ship step4000: served accept length {quoted.served:.2f} against {quoted.training:.2f} in training, "
        f"{comparison.said(winner.row)} at c = 1"
    )
    # Every cell is the comparison's own row.
    for card in report.checkpoints:
        for candidate in card.candidates:
            for cell in candidate.cells.values():
                assert cell.row in comparison.rows and cell.said == comparison.said(cell.row)
    assert step4000.candidates[0].by_category.keys() == {"chat", "code"}


def test_a_checkpoint_that_serves_far_below_its_training_is_called_out_with_the_likely_causes() -> None:
    report = _build(_comparison())
    cards = {card.label: card for card in report.checkpoints}
    assert cards["step5000"].callout == (
        f"step5000 serves accept length 1.00 against {1 + 0.6386 + 0.6386**2 + 0.6386**3:.2f} in training: likely "
        f"causes — {draft_report.LIKELY_CAUSES}."
    )
    assert "the serving loader skipped its weights" in report.callouts[0] and len(report.callouts) == 1
    # Close to its training figure, or without one: never called out.
    assert cards["step2000"].callout is None and cards["step4000"].callout is None
    assert cards["other-draft"].callout is None
    # Training stopped helping at step 4000: step 5000 serves less.
    assert report.plateau is not None and report.plateau.startswith("Training stopped helping after step4000")


def test_the_rule_counts_the_served_figures_interval_and_a_figure_just_above_it_is_not_flagged() -> None:
    trained = draft_training.training_checkpoints(_training_json())[3]  # step 5000: 2.31 on the served definition
    figure, _ = trained.accept_length(3)
    assert figure is not None
    just_above = draft_report.CandidateCard(_candidates()[0], 0.76 * figure, None, None, 1, {}, figure, "", {})
    within_interval = draft_report.CandidateCard(
        _candidates()[0], 0.70 * figure, 0.60 * figure, 0.80 * figure, 40, {}, figure, "", {}
    )
    below = draft_report.CandidateCard(
        _candidates()[0], 0.70 * figure, 0.69 * figure, 0.71 * figure, 40, {}, figure, "", {}
    )
    assert not just_above.far_below and not within_interval.far_below and below.far_below


def test_the_winner_comes_from_the_comparison_never_from_a_gated_candidates_higher_speedup() -> None:
    # step 2000 is made the fastest by far, but its outputs differ from the baseline's: the comparison gates it out.
    SPEEDS["sf-step2000-s3"] = {1: [300, 301, 299, 300], 8: [900, 905, 895, 900]}
    try:
        comparison = _comparison(outputs_differ=["sf-step2000-s3"])
        report = _build(comparison)
    finally:
        SPEEDS["sf-step2000-s3"] = {1: [128, 130, 129, 127], 8: [640, 650, 645, 642]}
    step2000 = report.checkpoints[0]
    assert step2000.best[1].row.speedup > report.checkpoints[1].best[1].row.speedup
    assert not step2000.best[1].wins and not step2000.best[1].may_win
    assert any("outputs differ" in reason for reason in step2000.best[1].reasons)
    assert report.answer is not None and report.answer.startswith("Ship step4000:")


def test_a_draft_outside_any_training_directory_is_shown_as_such_and_without_training_the_served_figures_stand() -> (
    None
):
    report = _build(_comparison())
    other = report.checkpoints[-1]
    assert other.training is None and other.provenance == draft_report.NOT_FROM_TRAINING
    assert other.candidates[0].training is None and other.candidates[0].served == pytest.approx(1.5, abs=0.1)

    alone = _build(_comparison(), training=[], training_note="the host could not be reached")
    assert alone.training_note == "the host could not be reached"
    assert all(card.training is None for card in alone.checkpoints) and alone.callouts == []
    assert alone.answer is not None and alone.answer.startswith(
        "Ship kimi-k2.5-sim-eagle3-sf-step4000-sglang: served accept length 2.3"
    )
    assert "in training" not in alone.answer


def test_no_checkpoint_is_shipped_when_none_is_settled_faster() -> None:
    samples = [Sample("base", 1, i, 0, v) for i, v in enumerate([100, 110, 90])]
    samples += [Sample("sf-step4000-s3", 1, i, 0, v, 2.3) for i, v in enumerate([104, 120, 92])]
    comparison = judge(samples, baseline="base", candidates=["sf-step4000-s3"], passes_per_launch=1)
    report = draft_report.build(
        [c for c in _candidates() if c.name == "sf-step4000-s3"],
        draft_training.training_checkpoints(_training_json()),
        rows=comparison.rows,
        winners=comparison.winners(),
        may_win=comparison.may_win,
        reasons=comparison.reasons,
    )
    assert report.answer is not None and report.answer.startswith(
        "No checkpoint to ship yet: none is settled faster than the baseline; the closest, step4000 (sf-step4000-s3)"
    )


def test_a_collapsed_checkpoint_is_never_shipped_even_when_faster() -> None:
    SPEEDS["sf-step5000-s3"] = {1: [400, 401, 399, 400], 8: [900, 901, 899, 900]}
    try:
        comparison = _comparison()
    finally:
        SPEEDS["sf-step5000-s3"] = {1: [90, 91, 89, 90], 8: [560, 562, 558, 560]}
    report = _build(comparison)
    assert comparison.collapsed(next(r for r in comparison.rows if r.candidate == "sf-step5000-s3")) == 1.0
    assert report.answer is not None and report.answer.startswith("Ship step4000:")


def test_the_training_listing_is_checked_not_trusted() -> None:
    odd = [
        {"path": "/t", "runs": [{"run_id": "r", "checkpoints": [
            {"step": "12", "draft_paths": ["/a"]},
            {"step": True, "draft_paths": ["/b"]},
            {"step": 7, "draft_paths": "/c", "simulated_acc_len": "1.2", "metrics": {"eval/per_position_acc": ["x"]}},
        ]}]},
        "not a directory",
        {"runs": "nope"},
    ]  # fmt: skip
    checkpoints = draft_training.training_checkpoints(odd)
    assert [(c.step, c.draft_paths, c.simulated_acc_len, c.per_position_acc) for c in checkpoints] == [
        (7, (), None, ())
    ]
    assert checkpoints[0].accept_length(3) == (None, "no eval/simulated_acc_len recorded")


# ---- the read, the API and the page ------------------------------------------------------------------------------


def measured_experiment(host_dirs=("/train",), weird_name: str = "sf-step4000-s3", host=None, models=TRAINED):
    """An experiment on a host with a training directory: the baseline and five draft candidates, three launches
    each, with their cells' accept lengths and their first cells' per-request rows (`models`: where the drafts
    exported from the training run lie)."""
    host = host or make_host(draft_training_dirs=list(host_dirs))
    base = make_config(name="base")
    configs = []
    for name in SERVED:
        steps = 2 if name.endswith("s2") else 3
        path = "/models/other-draft" if name.startswith("other") else f"{models}-{name.rsplit('-', 1)[0][3:]}-sglang"
        shown = weird_name if name == "sf-step4000-s3" else name
        configs.append(make_eagle_config(steps, name=shown, speculative_draft_model_path=path))
    experiment = make_experiment(host=host, baseline=base, candidates=configs, with_runs=False)
    for launch in range(3):
        for config in (base, *configs):
            key = "sf-step4000-s3" if config.name == weird_name else config.name
            run = make_run(experiment=experiment, config=config, state=Run.State.SUCCEEDED, launch_index=launch)
            for level in (1, 8):
                served = SERVED.get(key)
                make_measurement(
                    run, concurrency=level, output_throughput=SPEEDS[key][level][launch],
                    accept_length=served, mean_request_accept_length=served,
                    accepted_drafts_histogram=[10, 20, 30, 40] if served else None,
                )  # fmt: skip
            if key in SERVED:
                rows = [
                    {"index": i, "category": category, "ok": True, "output_len": 64, "accept_length": value,
                     "output_ids": list(range(64))}
                    for category, values in _requests(SERVED[key]).items()
                    for i, value in enumerate(values)
                ]  # fmt: skip
                PromptResults.objects.create(run=run, pass_index=0, concurrency=1, requests=rows)
    return experiment


@pytest.fixture
def training(monkeypatch):
    """The host boundary: the worker's answer to `read_draft_checkpoints`, and the hosts it was asked about."""
    asked: list[int] = []

    def read(host):
        asked.append(host.pk)
        return _training_json()

    monkeypatch.setattr(dispatch, "read_draft_checkpoints", read)
    return asked


@pytest.mark.django_db
def test_the_api_and_the_page_show_each_checkpoint_against_its_training_and_the_experiments_winner(
    member, client, training
) -> None:
    experiment = measured_experiment()
    client.force_login(member)

    data = client.get(f"/api/experiments/{experiment.pk}/drafts").json()
    report = client.get(f"/api/experiments/{experiment.pk}").json()
    assert training == [experiment.host_id]
    assert data["training_note"] is None
    by_label = {c["label"]: c for c in data["checkpoints"]}
    assert list(by_label) == ["step2000", "step4000", "step5000", "other-draft"]
    assert by_label["other-draft"]["provenance"] == draft_report.NOT_FROM_TRAINING
    assert by_label["step4000"]["training"]["is_best"] and by_label["step5000"]["training"]["is_latest"]
    s3 = by_label["step4000"]["candidates"][0]
    assert s3["candidate"] == "sf-step4000-s3" and s3["requests"] == 120
    assert s3["served_accept_length"] == pytest.approx(2.33, abs=0.05)
    assert s3["training_accept_length"] == pytest.approx(1 + 0.6448 + 0.6448**2 + 0.6448**3, abs=1e-3)
    assert {c["category"] for c in s3["served_by_category"]} == {"chat", "code"}
    assert [c["concurrency"] for c in s3["served_by_concurrency"]] == [1, 8]
    assert s3["position_acceptance"][0]["rates"] == pytest.approx([0.9, 0.7, 0.4])
    # One answer: every cell is the experiment's own comparison row, and the winner is its winner.
    rows = {(r["candidate"], r["concurrency"]): r for r in report["comparison"]}
    for checkpoint in data["checkpoints"]:
        for candidate in checkpoint["candidates"]:
            for cell in candidate["cells"]:
                row = rows[cell["candidate"], cell["concurrency"]]
                assert (cell["speedup"], cell["ci_low"], cell["ci_high"], cell["verdict"]) == (
                    row["speedup"], row["ci_low"], row["ci_high"], row["verdict"]
                )  # fmt: skip
    assert data["answer"].startswith("Ship step4000: served accept length 2.3")
    assert data["callouts"] == [by_label["step5000"]["callout"]] and "serving loader skipped" in data["callouts"][0]
    assert by_label["step5000"]["candidates"][0]["far_below_training"]

    page = client.get(f"/experiments/{experiment.pk}/drafts/")
    text = page.content.decode().replace("&#x27;", "'")
    assert page.status_code == 200 and data["answer"] in text and data["callouts"][0] in text
    assert 'id="drafts-chart"' in text and 'id="drafts-figure"' in text
    assert f'href="/experiments/{experiment.pk}/drafts/"' in client.get(experiment.get_absolute_url()).content.decode()


@pytest.mark.django_db
def test_without_training_figures_the_card_shows_the_served_ones_with_the_reason(
    viewer, member, client, training, monkeypatch
) -> None:
    experiment = measured_experiment()
    client.force_login(viewer)
    data = client.get(f"/api/experiments/{experiment.pk}/drafts").json()
    assert training == []  # a viewer's page asks no worker
    assert "members and up" in data["training_note"] and data["callouts"] == []
    assert data["answer"].startswith("Ship kimi-k2.5-sim-eagle3-sf-step4000-sglang: served accept length 2.3")

    def fails(host):
        raise dispatch.HostProbeFailed("No worker answered within 60 s; is a Celery worker running?", 504)

    monkeypatch.setattr(dispatch, "read_draft_checkpoints", fails)
    client.force_login(member)
    page = client.get(f"/experiments/{experiment.pk}/drafts/")
    assert page.status_code == 200
    assert "could not be read (No worker answered within 60 s" in page.content.decode()

    bare = measured_experiment(host_dirs=())
    monkeypatch.setattr(dispatch, "read_draft_checkpoints", lambda host: pytest.fail("the worker was asked"))
    data = client.get(f"/api/experiments/{bare.pk}/drafts").json()
    assert "has no draft training directories set" in data["training_note"]


@pytest.mark.django_db
def test_names_are_escaped_on_the_page_and_in_the_figure(member, client, training) -> None:
    name = "<img src=x onerror=alert(1)>%{x}"
    experiment = measured_experiment(weird_name=name)
    client.force_login(member)
    text = client.get(f"/experiments/{experiment.pk}/drafts/").content.decode()
    assert name not in text and "&lt;img src=x onerror=alert(1)&gt;" in text
    figure = json.loads(text.split('id="drafts-figure" type="application/json">')[1].split("</script>")[0])
    hovers = json.dumps(figure["data"])
    assert "<img" not in hovers and "&lt;img" in hovers and "&#37;{x}" in hovers


@pytest.mark.django_db
def test_the_study_card_reads_its_rows_and_recommendation(owner, client, training) -> None:
    study = make_study_with_rounds(owner)
    client.force_login(owner)
    data = client.get(f"/api/studies/{study.pk}/drafts").json()
    by_label = {c["label"]: c for c in data["checkpoints"]}
    assert list(by_label) == ["step2000", "step4000", "step5000"]
    assert [c["candidate"] for c in by_label["step4000"]["candidates"]] == [
        "EAGLE3 kimi-k2.5-sim-eagle3-sf-step4000-sglang-s2-k1-d3",
        "EAGLE3 kimi-k2.5-sim-eagle3-sf-step4000-sglang-s3-k1-d4",
    ]
    assert data["answer"].startswith("Ship step4000: ")
    assert data["callouts"] and data["callouts"][0].startswith("step5000 serves accept length 1.00")
    page = client.get(f"/studies/{study.pk}/drafts/")
    assert page.status_code == 200 and 'id="drafts-answer"' in page.content.decode()
    assert f'href="/studies/{study.pk}/drafts/"' in client.get(f"/studies/{study.pk}/").content.decode()


STEPS = (2000, 4000, 5000)
STUDY_SPEEDS = {(2000, 2): 125, (2000, 3): 130, (4000, 2): 140, (4000, 3): 150, (5000, 2): 90, (5000, 3): 91}
STUDY_SERVED = {(2000, 2): 1.85, (2000, 3): 2.01, (4000, 2): 2.06, (4000, 3): 2.33, (5000, 2): 1.0, (5000, 3): 1.0}


def make_study_with_rounds(owner) -> Study:
    """A study of three checkpoints x two step counts, named as its sweep names them, over three rounds of one
    launch each."""
    host = make_host(draft_training_dirs=["/train"])
    base = make_config(name="base")
    profile = make_profile(concurrency=[1])
    study = Study.objects.create(
        name="which checkpoint", host=host, baseline=base, profile=profile, max_launches=40,
        base={"model_path": "/models/kimi-k2.5-sim", "tp_size": 8, "speculative_algorithm": "EAGLE3"},
        space={"steps": [2, 3], "topk": [1], "methods": [["EAGLE3", f"{TRAINED}-step{n}-sglang"] for n in STEPS]},
        created_by=owner,
    )  # fmt: skip
    configs = {}
    for (step, steps), _ in STUDY_SPEEDS.items():
        name = f"EAGLE3 kimi-k2.5-sim-eagle3-sf-step{step}-sglang-s{steps}-k1-d{steps + 1}"
        config = make_eagle_config(
            steps, name=f"c-{step}-{steps}", speculative_draft_model_path=f"{TRAINED}-step{step}-sglang"
        )
        StudyConfig.objects.create(study=study, name=name, config=config)
        configs[step, steps] = config
    for index in range(3):
        experiment = make_experiment(host=host, baseline=base, candidates=list(configs.values()), profile=profile,
                                     with_runs=False)  # fmt: skip
        StudyRound.objects.create(study=study, index=index, experiment=experiment)
        run = make_run(experiment=experiment, config=base, state=Run.State.SUCCEEDED, started_at=timezone.now())
        make_measurement(run, concurrency=1, output_throughput=100 + index)
        for key, config in configs.items():
            run = make_run(experiment=experiment, config=config, state=Run.State.SUCCEEDED, started_at=timezone.now())
            served = STUDY_SERVED[key]
            make_measurement(run, concurrency=1, output_throughput=STUDY_SPEEDS[key] + index, accept_length=served,
                             mean_request_accept_length=served)  # fmt: skip
            rows = [{"index": i, "category": "chat", "ok": True, "accept_length": value}
                    for i, value in enumerate(_requests(served)["chat"])]  # fmt: skip
            PromptResults.objects.create(run=run, pass_index=0, concurrency=1, requests=rows)
    return study


def test_where_the_last_checkpoint_still_served_more_training_may_still_help() -> None:
    comparison = _comparison()
    kept = [c for c in _candidates() if c.name in ("sf-step2000-s3", "sf-step4000-s3")]
    report = draft_report.build(
        kept,
        draft_training.training_checkpoints(_training_json()),
        rows=comparison.rows,
        winners=comparison.winners(),
        may_win=comparison.may_win,
        reasons=comparison.reasons,
    )
    assert report.plateau is not None
    assert report.plateau.startswith("Served accept length still rose at the last step measured (step4000, 2.3")


def test_no_checkpoint_is_shipped_when_another_method_wins_or_the_leader_may_not_win() -> None:
    SPEEDS["ngram"] = {1: [400, 401, 399, 400], 8: [900, 901, 899, 900]}
    try:
        samples = [
            Sample(name, level, launch, 0, value, SERVED.get(name))
            for name, levels in SPEEDS.items()
            for level, values in levels.items()
            for launch, value in enumerate(values)
        ]
        comparison = judge(
            samples, baseline="base", candidates=[*SERVED, "ngram"], passes_per_launch=1, speculative=list(SERVED)
        )
    finally:
        del SPEEDS["ngram"]
    report = _build(comparison)
    assert report.answer == "No checkpoint to ship: ngram, which serves no draft checkpoint, wins at c = 1."

    # A study's recommendation reads no collapse: a leader whose acceptance collapsed is named, never shipped.
    collapsed = _comparison()
    row = next(r for r in collapsed.rows if r.candidate == "sf-step5000-s3" and r.concurrency == 1)
    report = draft_report.build(
        _candidates(),
        draft_training.training_checkpoints(_training_json()),
        rows=collapsed.rows,
        winners={1: Winner(1, "sf-step5000-s3", row, True)},
        may_win=collapsed.may_win,
        reasons=collapsed.reasons,
    )
    assert report.answer is not None and report.answer.startswith(
        "No checkpoint to ship: step5000 (sf-step5000-s3) leads at c = 1 but may not win: its acceptance collapsed"
    )


@pytest.mark.django_db
def test_the_read_runs_a_fixed_number_of_queries_whatever_the_checkpoints(member, client, training) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client.force_login(member)
    counts = []
    for weird_name in ("a", "b"):
        experiment = measured_experiment(weird_name=weird_name)
        if weird_name == "b":  # more checkpoints: two more drafts outside any training directory
            for position, path in enumerate(("/models/x", "/models/y"), start=10):
                config = make_eagle_config(3, speculative_draft_model_path=path)
                experiment.candidate_set.create(config=config, position=position)
                run = make_run(experiment=experiment, config=config, state=Run.State.SUCCEEDED)
                make_measurement(run, concurrency=1, output_throughput=120, mean_request_accept_length=1.8)
                PromptResults.objects.create(
                    run=run, pass_index=0, concurrency=1, requests=[{"ok": True, "accept_length": 1.8}]
                )
        with CaptureQueriesContext(connection) as queries:
            data = client.get(f"/api/experiments/{experiment.pk}/drafts").json()
        counts.append(len(queries))
    assert len(data["checkpoints"]) == 6
    assert counts[0] == counts[1], counts


def test_before_anything_is_compared_there_is_no_answer() -> None:
    report = draft_report.build(
        _candidates(), draft_training.training_checkpoints(_training_json()), rows=[], winners={},
        may_win=lambda row: True, reasons=lambda row: [],
    )  # fmt: skip
    assert report.answer is None and [card.label for card in report.checkpoints][:1] == ["step2000"]
