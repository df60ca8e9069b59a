"""Confirm before alerting, one flag per change: suspicions, their confirming runs, and the flags they become."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.utils import timezone

from experiments.actions.runs import do_advance_run
from experiments.models import AuditEvent, Flag, FlagSeries, Run, SuspectSeries, Suspicion

from .factories import finish_run, make_config, make_experiment, make_history, make_host, make_profile, make_run

pytestmark = pytest.mark.django_db


def _stable(level: float, count: int, seed: int, noise: float = 0.005) -> list[float]:
    rng = random.Random(seed)
    return [level * (1 + rng.gauss(0, noise)) for _ in range(count)]


def _confirming_run(suspicion: Suspicion) -> Run:
    return suspicion.confirming_runs.filter(config__content_hash=suspicion.config_hash, state=Run.State.QUEUED).get()


def test_it_queues_a_confirming_run_for_a_suspected_change_and_raises_no_flag_yet():
    runs = make_history([*_stable(88.8, 10, seed=7), 82.2], concurrencies=(1, 4))

    assert not Flag.objects.exists()
    suspicion = Suspicion.objects.get()
    assert suspicion.state == Suspicion.State.AWAITING and suspicion.run == runs[-1]
    assert sorted(suspicion.series.values_list("concurrency", flat=True)) == [1, 4]
    confirming = _confirming_run(suspicion)
    assert confirming.experiment == runs[-1].experiment and confirming.host == runs[-1].host
    assert suspicion.confirmations == 1
    rerun = AuditEvent.objects.get(action=AuditEvent.Action.RERUN)
    assert rerun.via == "analysis" and rerun.detail["reason"] == f"confirm suspicion {suspicion.pk}"
    assert AuditEvent.objects.filter(action=AuditEvent.Action.SUSPECT, target_id=suspicion.pk).exists()


def test_a_confirmed_drift_from_88_8_to_82_2_is_one_flag_across_its_concurrency_levels():
    runs = make_history([*_stable(88.8, 10, seed=7), 82.2], concurrencies=(1, 4))
    suspicion = Suspicion.objects.get()
    confirming = finish_run(_confirming_run(suspicion), {1: 82.3, 4: 82.3 * 4})

    flag = Flag.objects.get()
    assert flag.kind == "confirmed" and flag.direction == "regression" and flag.metric == Flag.Metric.THROUGHPUT
    assert flag.change == pytest.approx(-0.074, abs=0.01)
    assert flag.run == runs[10] and flag.confirmed_by == confirming
    assert (flag.changed_after, flag.changed_by) == (runs[9].finished_at, runs[10].finished_at)
    held = list(flag.series.order_by("concurrency"))
    assert [s.concurrency for s in held] == [1, 4]
    assert held[1].baseline_mean == pytest.approx(4 * 88.8, rel=0.01)
    assert held[1].new_mean == pytest.approx(4 * 82.25, rel=0.01)
    assert all(s.confirmed_by == confirming and s.last_before_run == runs[9] for s in held)
    suspicion.refresh_from_db()
    assert suspicion.state == Suspicion.State.CONFIRMED and suspicion.flag == flag
    assert AuditEvent.objects.filter(action=AuditEvent.Action.FLAG, target_id=flag.pk, via="analysis").exists()

    # Later results at the new level are its new normal: no second flag, no new suspicion.
    make_history(_stable(82.2, 6, seed=8), host=flag.host, config=flag.config, concurrencies=(1, 4))
    assert Flag.objects.count() == 1 and Suspicion.objects.count() == 1


def test_a_single_noisy_result_is_suspected_then_dismissed_by_its_confirmation():
    runs = make_history([*_stable(88.8, 12, seed=3), 80.0])
    suspicion = Suspicion.objects.get()

    finish_run(_confirming_run(suspicion), {1: 88.7})

    suspicion.refresh_from_db()
    assert suspicion.state == Suspicion.State.DISMISSED and suspicion.flag is None
    assert not Flag.objects.exists()
    row = suspicion.series.get()
    assert row.state == SuspectSeries.State.DISMISSED and row.after[0][1] == pytest.approx(88.7)
    # The next ordinary result is checked again as usual and is quiet.
    make_history([88.8], host=runs[0].host, config=runs[0].config)
    assert not Flag.objects.exists() and Suspicion.objects.count() == 1


def test_an_ordinary_result_also_weighs_a_suspicion_whose_confirmation_has_not_run():
    runs = make_history([*_stable(88.8, 10, seed=7), 82.2, 82.1])

    flag = Flag.objects.get()
    assert flag.confirmed_by == runs[-1]  # the later ordinary result, not the queued confirming run
    assert _confirming_run(Suspicion.objects.get()).state == Run.State.QUEUED


def test_configs_of_one_host_that_moved_at_the_same_point_raise_one_flag():
    host, profile = make_host(), make_profile()
    baseline, candidate = make_config(name="baseline"), make_config(name="other", tp_size=4)
    start = timezone.now() - timedelta(days=30)
    levels = {baseline: 88.8, candidate: 120.0}
    noise = random.Random(11)
    for day in range(12):
        experiment = make_experiment(
            host=host, baseline=baseline, candidates=[candidate], profile=profile, with_runs=False
        )
        drop = 0.92 if day >= 10 else 1.0  # a driver update before day 10 slowed the whole host
        for i, config in enumerate((baseline, candidate)):
            run = make_run(experiment=experiment, config=config)
            value = levels[config] * drop * (1 + noise.gauss(0, 0.004))
            finish_run(run, {1: value}, at=start + timedelta(days=day, minutes=i))

    flags = list(Flag.objects.all())
    assert len(flags) == 1, [str(f) for f in flags]
    assert sorted(FlagSeries.objects.values_list("config__name", flat=True)) == ["baseline", "other"]
    assert "2 series" in flags[0].message


def test_a_change_that_does_not_hold_raises_nothing_over_a_long_stable_life():
    make_history(_stable(100.0, 60, seed=5, noise=0.02))

    assert not Flag.objects.exists()
    assert Suspicion.objects.filter(state=Suspicion.State.AWAITING).count() <= 1


def test_the_experiment_page_marks_the_run_queued_to_confirm(owner_client):
    runs = make_history([*_stable(88.8, 10, seed=7), 82.2])

    page = owner_client.get(f"/experiments/{runs[-1].experiment_id}/").content.decode()

    assert page.count("queued to confirm a suspected change") == 1


def test_a_launch_already_queued_serves_as_the_confirmation():
    runs = make_history(_stable(88.8, 10, seed=7))
    experiment = make_experiment(host=runs[0].host, baseline=runs[0].config, candidates=[], with_runs=False)
    suspected, queued = make_run(experiment=experiment), make_run(experiment=experiment)

    finish_run(suspected, {1: 82.2})

    suspicion = Suspicion.objects.get()
    assert suspicion.confirmations == 0 and not suspicion.confirming_runs.exists()
    assert Run.objects.filter(experiment=experiment).count() == 2
    finish_run(queued, {1: 82.4})
    assert Flag.objects.get().confirmed_by == queued


def test_a_confirming_run_that_fails_is_replaced_by_another():
    make_history([*_stable(88.8, 10, seed=7), 82.2], concurrencies=(1, 4))
    suspicion = Suspicion.objects.get()
    failed = _confirming_run(suspicion)

    do_advance_run(failed, Run.State.FAILED)

    suspicion.refresh_from_db()
    assert suspicion.state == Suspicion.State.AWAITING and suspicion.confirmations == 2
    replacement = _confirming_run(suspicion)
    assert replacement.pk != failed.pk and replacement.confirms_id == suspicion.pk
    finish_run(replacement, {1: 82.3, 4: 82.3 * 4})
    assert Flag.objects.get().confirmed_by == replacement
