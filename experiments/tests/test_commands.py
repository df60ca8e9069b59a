"""Management commands, called as an operator would."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command
from django.core.management.base import OutputWrapper

from experiments.models import ApiToken, Run
from experiments.tests.factories import make_experiment, make_measurement, make_profile
from workers.management.commands.demo import DemoProgress

pytestmark = pytest.mark.django_db


def test_it_prints_a_new_token_alone_and_it_authenticates(client, owner):
    out = io.StringIO()

    call_command("create_api_token", "owner", stdout=out)

    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")
    token = text.strip()
    assert token and " " not in token
    assert ApiToken.objects.get().user == owner
    assert client.get("/api/hosts", headers={"Authorization": f"Bearer {token}"}).status_code == 200


def test_it_prints_a_different_token_each_time(owner):
    tokens = set()
    for _ in range(2):
        out = io.StringIO()
        call_command("create_api_token", "owner", "--name", "ci", stdout=out)
        tokens.add(out.getvalue().strip())

    assert len(tokens) == 2
    assert list(ApiToken.objects.values_list("name", flat=True)) == ["ci", "ci"]


def test_it_refuses_an_unknown_user(owner):
    with pytest.raises(CommandError, match="nobody"):
        call_command("create_api_token", "nobody", stdout=io.StringIO())

    assert ApiToken.objects.count() == 0


def test_the_demo_prints_each_runs_progress_once_then_the_verdicts():
    experiment = make_experiment(profile=make_profile(concurrency=[1], passes=3))
    out = io.StringIO()
    progress = DemoProgress(OutputWrapper(out), experiment, "http://127.0.0.1:8000")
    progress.report()
    progress.report()  # nothing changed: nothing printed again
    baseline, candidate = experiment.run_set.order_by("sequence")
    assert out.getvalue().count(": queued") == 2

    Run.objects.filter(pk=baseline.pk).update(state=Run.State.SUCCEEDED)
    progress.report()
    assert out.getvalue().count(": succeeded") == 1 and not progress.done
    for pass_index, (base, cand) in enumerate([(80.0, 90.0), (81.0, 91.0), (82.0, 92.0)]):
        make_measurement(baseline, concurrency=1, output_throughput=base, pass_index=pass_index)
        make_measurement(candidate, concurrency=1, output_throughput=cand, pass_index=pass_index)
    Run.objects.filter(pk=candidate.pk).update(state=Run.State.SUCCEEDED)
    progress.report()

    assert progress.done
    lines = out.getvalue().splitlines()
    verdict = next(line for line in lines if "at concurrency 1:" in line)
    assert verdict.startswith(f"  {candidate.config.name} at concurrency 1: 1.123x [") and verdict.endswith(", faster")
    assert lines[-1] == f"Charts and verdicts: http://127.0.0.1:8000{experiment.get_absolute_url()}"
