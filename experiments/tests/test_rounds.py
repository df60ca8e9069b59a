"""A round's candidates are skipped when its baseline fails; one check of every config before the first launch."""

from __future__ import annotations

import pytest

from experiments.actions.audit import Actor
from experiments.actions.runs import (
    do_advance_run,
    do_cancel_run,
    do_claim_config_check,
    do_fail_config_in_preflight,
)
from experiments.models import Run

from .factories import make_eagle_config, make_experiment, make_measurement, make_profile

pytestmark = pytest.mark.django_db


def _two_launches(**fields):
    candidates = [make_eagle_config(steps=2), make_eagle_config(steps=3)]
    return make_experiment(candidates=candidates, profile=make_profile(launches=2), **fields)


def _runs(experiment, launch):
    return list(experiment.run_set.filter(launch_index=launch).order_by("sequence"))


def test_it_skips_the_candidates_of_a_round_whose_baseline_failed():
    experiment = _two_launches()
    baseline, *candidates = _runs(experiment, 0)

    do_advance_run(baseline, Run.State.FAILED)

    for run in candidates:
        run.refresh_from_db()
        assert run.state == Run.State.CANCELLED
        assert f"the baseline run {baseline.pk} of launch 1 failed" in run.cancel_reason
        assert run.finished_at is not None and run.timeline[-1]["state"] == Run.State.CANCELLED
    # The next round has its own baseline launch: it still runs, and so do its candidates.
    assert {r.state for r in _runs(experiment, 1)} == {Run.State.QUEUED}


def test_it_skips_them_when_a_queued_baseline_is_cancelled(owner):
    experiment = _two_launches(created_by=owner)
    baseline, *candidates = _runs(experiment, 0)

    do_cancel_run(baseline, Actor(owner))

    assert all(Run.objects.get(pk=r.pk).state == Run.State.CANCELLED for r in candidates)
    assert "was cancelled" in Run.objects.get(pk=candidates[0].pk).cancel_reason


def test_it_runs_them_anyway_when_the_experiment_asks_to():
    experiment = _two_launches(run_candidates_without_baseline=True)
    baseline, *candidates = _runs(experiment, 0)

    do_advance_run(baseline, Run.State.FAILED)

    assert all(Run.objects.get(pk=r.pk).state == Run.State.QUEUED for r in candidates)


def test_a_baseline_measured_before_its_teardown_failed_keeps_its_round():
    experiment = _two_launches()
    baseline, *candidates = _runs(experiment, 0)
    make_measurement(baseline, concurrency=1, output_throughput=80.0)

    do_advance_run(baseline, Run.State.FAILED)

    assert all(Run.objects.get(pk=r.pk).state == Run.State.QUEUED for r in candidates)


def test_a_failed_candidate_does_not_skip_anything():
    experiment = _two_launches()
    _, first, second = _runs(experiment, 0)

    do_advance_run(first, Run.State.FAILED)

    assert Run.objects.get(pk=second.pk).state == Run.State.QUEUED


def test_one_run_claims_the_check_of_every_other_config_of_its_experiment():
    experiment = _two_launches()
    baseline = _runs(experiment, 0)[0]

    others = do_claim_config_check(baseline)

    assert others == experiment.ordered_candidates()
    assert do_claim_config_check(_runs(experiment, 1)[0]) is None  # checked once per experiment


def test_it_fails_every_queued_run_of_a_config_that_cannot_launch():
    experiment = _two_launches()
    bad = experiment.ordered_candidates()[1]

    failed = do_fail_config_in_preflight(experiment.pk, bad.pk, "The draft's context is too short.")

    assert failed == 2
    for run in experiment.run_set.filter(config=bad):
        assert run.state == Run.State.FAILED and run.failure_kind == Run.FailureKind.PREFLIGHT
        assert run.failure_message == "Checked before the experiment's first launch: The draft's context is too short."
        assert [e["state"] for e in run.timeline] == ["queued", "preflight", "failed"]
    assert experiment.run_set.filter(state=Run.State.QUEUED).count() == 4
