"""Acceptance over history: a speculative config's accept length is a series of its own, suspected, confirmed and
flagged by the same rule as its throughput, sharing its confirming launches."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.utils import timezone

from experiments.models import AuditEvent, Flag, Run, RunEnvironment, Suspicion

from .factories import finish_run, make_config, make_eagle_config, make_experiment, make_host, make_profile, make_run

pytestmark = pytest.mark.django_db


def _stable(level: float, count: int, seed: int, noise: float) -> list[float]:
    rng = random.Random(seed)
    return [level * (1 + rng.gauss(0, noise)) for _ in range(count)]


def _history(config, throughput: list[float], accept: list[float], *, host=None, sglang=None) -> list[Run]:
    """One finished experiment per value of the same config and profile, at concurrency 1 and 4 (the same
    acceptance at both), each checked as it lands; `sglang` names the SGLang version each run saw."""
    host = host or make_host()
    start = timezone.now() - timedelta(days=30)
    runs = []
    for i, (tok_s, accept_length) in enumerate(zip(throughput, accept, strict=True)):
        experiment = make_experiment(host=host, baseline=config, candidates=[], profile=make_profile(), with_runs=False)
        run = make_run(experiment=experiment)
        if sglang is not None:
            packages = {"sglang": {"version": sglang[i]}}
            RunEnvironment.objects.create(run=run, fingerprint={"packages": packages}, read_at=timezone.now())
        finish_run(
            run,
            {1: tok_s, 4: 4 * tok_s},
            accept_lengths={1: accept_length, 4: accept_length},
            at=start + timedelta(hours=i),
        )
        runs.append(run)
    return runs


def _confirming_run(suspicion: Suspicion) -> Run:
    return suspicion.confirming_runs.filter(config__content_hash=suspicion.config_hash, state=Run.State.QUEUED).get()


def test_an_acceptance_drop_after_an_sglang_upgrade_is_one_suspicion_one_confirming_launch_one_flag(client, owner):
    config = make_eagle_config()
    throughput = _stable(94.0, 13, seed=2, noise=0.004)  # the speed held (the draft got cheaper, say)
    accept = [*_stable(2.9, 12, seed=3, noise=0.01), 2.4]
    runs = _history(config, throughput, accept, sglang=["0.5.9"] * 12 + ["0.5.10"])

    suspicion = Suspicion.objects.get()
    assert not Flag.objects.exists()  # a suspicion tells nobody
    assert sorted(suspicion.series.values_list("metric", "concurrency")) == [("acceptance", 1), ("acceptance", 4)]
    confirming = _confirming_run(suspicion)
    assert suspicion.confirmations == 1

    finish_run(confirming, {1: 94.1, 4: 376.2}, accept_lengths={1: 2.41, 4: 2.41})

    flag = Flag.objects.get()
    assert flag.metric == Flag.Metric.ACCEPTANCE and flag.direction == "regression"
    assert flag.run == runs[12] and flag.confirmed_by == confirming
    assert flag.change == pytest.approx(2.405 / 2.9 - 1, abs=0.01)
    assert sorted(flag.series.values_list("concurrency", flat=True)) == [1, 4]
    assert flag.message.startswith("Accept length fell in 2 series") and "tokens/step" in flag.message
    assert "tok/s" not in flag.message
    assert Run.objects.filter(confirms=suspicion, config=config).count() == 1  # one launch, no second queued
    suspicion.refresh_from_db()
    assert suspicion.state == Suspicion.State.CONFIRMED and suspicion.flag == flag
    assert AuditEvent.objects.get(action=AuditEvent.Action.FLAG).detail["metric"] == "acceptance"

    # The API says which metric, beside the environment diff that explains it.
    client.force_login(owner)
    data = client.get(f"/api/experiments/{runs[12].experiment_id}").json()
    (flagged,) = data["flags"]
    assert flagged["metric"] == "acceptance" and flagged["kind"] == "confirmed"
    assert flagged["environment_change"]["before"] == runs[11].pk
    assert "0.5.9" in flagged["environment_change"]["summary"] and "0.5.10" in flagged["environment_change"]["summary"]
    assert {row["metric"] for row in data["suspicions"][0]["series"]} == {"acceptance"}
    page = client.get(flag.get_absolute_url()).content.decode()
    assert "of accept length" in page and "Before (tokens/step)" in page and 'id="flag-environment-diff"' in page


def test_one_confirming_launch_serves_a_throughput_and_an_acceptance_suspicion_of_the_same_run():
    config = make_eagle_config()
    throughput = [*_stable(94.0, 12, seed=5, noise=0.005), 86.0]
    accept = [*_stable(2.9, 12, seed=6, noise=0.01), 2.5]
    _history(config, throughput, accept)

    suspicion = Suspicion.objects.get()
    metrics = sorted(set(suspicion.series.values_list("metric", flat=True)))
    assert metrics == ["acceptance", "throughput"] and suspicion.confirmations == 1
    confirming = _confirming_run(suspicion)

    finish_run(confirming, {1: 86.2, 4: 344.0}, accept_lengths={1: 2.49, 4: 2.49})

    flags = {flag.metric: flag for flag in Flag.objects.all()}
    assert sorted(flags) == ["acceptance", "throughput"]  # a flag is about one metric
    assert all(flag.confirmed_by == confirming for flag in flags.values())
    assert "Throughput fell" in flags["throughput"].message and "Accept length fell" in flags["acceptance"].message
    assert Run.objects.filter(confirms=suspicion).count() == 1 and Suspicion.objects.count() == 1
    suspicion.refresh_from_db()
    assert suspicion.state == Suspicion.State.CONFIRMED


def test_a_baseline_has_no_acceptance_series_and_a_noisy_acceptance_value_is_dismissed():
    baseline = make_config(name="baseline")
    _history(baseline, _stable(88.8, 12, seed=7, noise=0.004), [*[1.0] * 11, 0.5])
    assert not Suspicion.objects.exists()  # no speculation, no acceptance history (whatever the cells say)

    config = make_eagle_config()
    _history(config, _stable(94.0, 13, seed=8, noise=0.004), [*_stable(2.9, 12, seed=9, noise=0.01), 2.6])
    suspicion = Suspicion.objects.get()
    finish_run(_confirming_run(suspicion), {1: 94.0, 4: 376.0}, accept_lengths={1: 2.9, 4: 2.91})

    suspicion.refresh_from_db()
    assert suspicion.state == Suspicion.State.DISMISSED and not Flag.objects.exists()


def test_the_history_page_draws_the_acceptance_series_of_a_speculative_config(owner_client):
    config = make_eagle_config()
    runs = _history(config, _stable(94.0, 10, seed=2, noise=0.004), _stable(2.9, 10, seed=3, noise=0.01))
    key = runs[0].experiment.profile.series_key

    figure = owner_client.get(f"/history/{runs[0].host_id}/{config.content_hash}/{key}/figure.json").json()

    names = [trace["name"] for trace in figure["data"]]
    assert names == ["c=1", "c=4", "c=1 accept length", "c=4 accept length"]
    accept = figure["data"][2]
    assert accept["y"][0] == pytest.approx(runs[0].measurement_set.get(concurrency=1, pass_index=0).accept_length)
    assert "tokens/step" in accept["hovertemplate"] and accept["yaxis"] == "y3"
    baseline_runs = _history(make_config(name="plain"), [88.0] * 3, [1.0] * 3, host=runs[0].host)
    plain = baseline_runs[0].config.content_hash
    figure = owner_client.get(f"/history/{runs[0].host_id}/{plain}/{key}/figure.json").json()
    assert [trace["name"] for trace in figure["data"]] == ["c=1", "c=4"]


def _categories(code: float, chat: float) -> dict:
    """Per-category figures whose accepted-drafts histograms (300 verify steps, at most 2 drafts accepted) give
    these accept lengths, to the 1/150 a whole count allows."""

    def histogram(length: float) -> list[int]:
        none = round((880 - 300 * length) / 2)  # (none + 2 * 20 + 3 * (280 - none)) / 300 = length
        return [none, 20, 280 - none]

    return {name: {"accepted_drafts_histogram": histogram(length)} for name, length in (("code", code), ("chat", chat))}


def test_a_prompt_category_whose_acceptance_dropped_is_its_own_series_in_the_flag():
    config = make_eagle_config()
    throughput = _stable(94.0, 14, seed=2, noise=0.004)
    code = [*_stable(2.9, 12, seed=3, noise=0.01), 2.4]
    chat = _stable(2.6, 13, seed=4, noise=0.01)
    host, start = make_host(), timezone.now() - timedelta(days=30)
    for i in range(13):
        experiment = make_experiment(host=host, baseline=config, candidates=[], profile=make_profile(), with_runs=False)
        cells = {1: {"position_acceptance_by_category": _categories(code[i], chat[i])}}
        finish_run(make_run(experiment=experiment), {1: throughput[i]}, accept_lengths={1: 2.7}, cell_fields=cells,
                   at=start + timedelta(hours=i))  # fmt: skip

    suspicion = Suspicion.objects.get()
    assert list(suspicion.series.values_list("metric", "category")) == [("acceptance", "code")]
    confirming = _confirming_run(suspicion)
    finish_run(confirming, {1: throughput[13]}, accept_lengths={1: 2.7}, cell_fields={1: {
        "position_acceptance_by_category": _categories(2.41, 2.6)}})  # fmt: skip

    flag = Flag.objects.get()
    assert flag.metric == "acceptance" and list(flag.series.values_list("category", flat=True)) == ["code"]
    assert "c=1 (code): 2.9" in flag.message and "-> 2.4" in flag.message
