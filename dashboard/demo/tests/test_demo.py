"""`manage.py demo`'s terminal output: each run's progress once, then the verdicts."""

from __future__ import annotations

import io
import json
import shlex
import subprocess

import pytest
from django.core.management.base import OutputWrapper

from dashboard.demo.progress import DemoProgress
from experiments.models import Run
from experiments.tests.factories import make_experiment, make_measurement, make_profile

pytestmark = pytest.mark.django_db


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


def test_the_demo_seeds_a_history_whose_drift_the_checks_confirmed_into_one_flag(owner):
    from dashboard.demo.history import NAME, seed_drift_history
    from dashboard.demo.management.commands.demo import demo_experiment_payload
    from experiments.models import Flag, Suspicion
    from experiments.tests.factories import make_host

    host = make_host()
    payload = demo_experiment_payload(host.models_root)
    experiment = seed_drift_history(host, payload["baseline"], payload["profile"], owner)

    assert experiment is not None and experiment.name == NAME
    flag = Flag.objects.get()
    assert flag.direction == "regression" and flag.change == pytest.approx(82.2 / 88.8 - 1, abs=0.01)
    assert sorted(flag.series.values_list("concurrency", flat=True)) == [1, 4]
    assert Suspicion.objects.filter(state=Suspicion.State.CONFIRMED, flag=flag).exists()
    assert not experiment.run_set.exclude(state=Run.State.SUCCEEDED).exists()  # nothing left for the worker
    assert seed_drift_history(host, payload["baseline"], payload["profile"], owner) is None


def test_the_demos_host_runs_the_newest_sglang_profile_so_every_offered_action_is_served(tmp_path):
    """The demo's host, read as a worker reads a host (its shell setup, then the launcher's --help and the probe):
    the newest profile simhost has, whose SGLang knows the adaptive schedule's flags."""
    from dashboard.demo.host import shell_setup
    from experiments.actions.schedules import ADAPTIVE_FLAGS
    from experiments.rules import server_flags
    from simhost import hostsetup, versions
    from workers.hostreads import fingerprint

    probe = " ".join(shlex.quote(word) for word in ["python", "-c", fingerprint.PROBE_SOURCE])
    setup = shell_setup(tmp_path)
    helped = subprocess.run(["bash", "-c", f"{setup}\n{hostsetup.LAUNCHER} --help"], capture_output=True, text=True,
                            timeout=60, check=True)  # fmt: skip
    probed = subprocess.run(["bash", "-c", f"{setup}\n{probe}"], capture_output=True, text=True, timeout=60, check=True)

    version = json.loads(probed.stdout)["packages"]["sglang"]["version"]
    assert version == versions.NEWEST == max(versions.SUPPORTED, key=lambda v: [int(p) for p in v.split(".")])
    assert set(ADAPTIVE_FLAGS) <= set(server_flags.parse_help(helped.stdout))


def test_the_demos_baseline_is_one_config_for_its_history_and_its_experiment(owner, client):
    """The seeded history and the demo experiment submit the same baseline: the configs list shows it once."""
    from dashboard.demo.history import seed_drift_history
    from dashboard.demo.management.commands.demo import demo_experiment_payload
    from experiments.actions.audit import Actor
    from experiments.actions.experiments import do_create_experiment
    from experiments.forms import ExperimentSubmission
    from experiments.tests.factories import make_host

    host = make_host()
    payload = demo_experiment_payload(host.models_root)
    history = seed_drift_history(host, payload["baseline"], payload["profile"], owner)
    submission = ExperimentSubmission(payload["experiment"] | {"host": host.name}, payload["baseline"],
                                      payload["candidates"], payload["profile"])  # fmt: skip
    assert submission.is_valid(), submission.errors
    experiment = do_create_experiment(actor=Actor.command(owner), **submission.experiment_fields())

    assert history is not None and experiment.baseline_id == history.baseline_id
    client.force_login(owner)
    listed = client.get("/configs/").content.decode()
    assert listed.count(f'data-config="{experiment.baseline_id}"') == 1
    assert listed.count("data-config=") == 3  # the baseline and the two candidates
