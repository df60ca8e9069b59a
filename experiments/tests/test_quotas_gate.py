"""One gate for every launch: the only function that creates queued runs checks the quotas as part of itself, so
every API operation that can queue answers 429 over quota, with the same refusal (the limit, what was asked, who can
raise it), and queues nothing; every page that can queue shows it, never a 500. A maintainer's re-run of a member's
experiment counts against the member, as the usage does."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.urls import reverse

from experiments.models import Experiment, Run, Study
from experiments.tests import sources

from .factories import (
    MODELS,
    make_config,
    make_eagle_config,
    make_experiment,
    make_host,
    make_measurement,
    small_submission,
)
from .test_adaptive_schedules import _finished_study
from .test_headroom import REAL, _real, _source
from .test_studies import BODY, _page_data

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("private_queue")]

CONTEXT_ERROR = (
    "ValueError: Warning: Target model's context_length (262144) is greater than the derived context_length "
    "(131072). This may lead to incorrect model outputs or CUDA errors."
)
# The refusal of a member with no launch left, whatever the operation: the limit, what it asks, what is pending, and
# who can raise it.
REFUSAL = re.compile(
    r"0 pending runs allowed for you \(the default, SPECDASH_QUOTA_LAUNCHES_PER_USER\); this asks \d+ launch(es)? of "
    r"\d+ configs?, \d+ runs? \(\d+ pending\)\. An admin can raise your limit on /team/\."
)


# What each operation needs first (made by an admin or the factories, before the member's limit drops to 0), and
# its request (path, body), by the operation as the schema names it.
Setup = Callable[[Any, Any, Any], tuple[str, dict | None]]


def _failed_run(member) -> Run:
    """A member's failed run with a remedy (a context length the draft's config refuses)."""
    candidate = make_eagle_config(name="eagle3")
    experiment = make_experiment(candidates=[candidate], created_by=member)
    failed = experiment.run_set.get(config=candidate)
    Run.objects.filter(pk=failed.pk).update(
        state=Run.State.FAILED, failure_kind=Run.FailureKind.CONTEXT_LENGTH, failure_message=CONTEXT_ERROR
    )
    return failed


def _finished_run(member) -> Run:
    run = make_experiment(created_by=member).run_set.first()
    assert run is not None
    Run.objects.filter(pk=run.pk).update(state=Run.State.SUCCEEDED)
    return run


def _measured_experiment() -> Experiment:
    """Two speculative candidates, each fastest at one of two concurrencies: a schedule can be built from it."""
    host = make_host()
    fast, slow = make_eagle_config(2, name="s2"), make_eagle_config(1, name="s1")
    experiment = make_experiment(host=host, candidates=[fast, slow], with_runs=False)
    experiment.profile.concurrency = [1, 8]
    experiment.profile.save()
    truth = {experiment.baseline.name: {1: 80.0, 8: 460.0}, "s2": {1: 92.0, 8: 400.0}, "s1": {1: 85.0, 8: 470.0}}
    for launch in range(2):
        for config in (experiment.baseline, fast, slow):
            run = Run.objects.create(experiment=experiment, config=config, host=host, launch_index=launch,
                                     sequence=Run.objects.filter(experiment=experiment).count(),
                                     state=Run.State.SUCCEEDED)  # fmt: skip
            for level, tok_s in truth[config.name].items():
                make_measurement(run, concurrency=level, output_throughput=tok_s * (1 + 0.003 * (-1) ** launch))
    return experiment


QUEUEING: dict[str, Setup] = {
    "POST /api/experiments": lambda api, owner, member: ("/api/experiments", small_submission(make_host(), 1)),
    "POST /api/experiments/{experiment_id}/rerun": lambda api, owner, member: (
        f"/api/experiments/{make_experiment(created_by=member, with_runs=False).pk}/rerun",
        {"launches": 1},
    ),
    "POST /api/runs/{run_id}/remedy": lambda api, owner, member: (
        f"/api/runs/{_failed_run(member).pk}/remedy",
        {"remedy": "context-length"},
    ),
    "POST /api/runs/{run_id}/profile": lambda api, owner, member: (
        f"/api/runs/{_finished_run(member).pk}/profile",
        None,
    ),
    "POST /api/experiments/{experiment_id}/headroom": lambda api, owner, member: (
        f"/api/experiments/{_source().pk}/headroom",
        {"config": REAL},
    ),
    "POST /api/studies": lambda api, owner, member: ("/api/studies", {**BODY, "host": make_host().name}),
    "POST /api/studies/{study_id}/confirm": lambda api, owner, member: (
        f"/api/studies/{_finished_study(api, owner).pk}/confirm?band=0",
        None,
    ),
    "POST /api/studies/{study_id}/schedule": lambda api, owner, member: (
        f"/api/studies/{_finished_study(api, owner).pk}/schedule",
        None,
    ),
    "POST /api/experiments/{experiment_id}/adaptive-schedule": lambda api, owner, member: (
        f"/api/experiments/{_measured_experiment().pk}/adaptive-schedule",
        None,
    ),
}


@pytest.mark.parametrize("operation", QUEUEING)
def test_every_api_operation_that_queues_answers_429_with_the_same_refusal_and_queues_nothing(
    operation, api, owner, member, settings
):
    path, body = QUEUEING[operation](api, owner, member)
    settings.SPECDASH_QUOTA_LAUNCHES_PER_USER = 0
    before = (Run.objects.count(), Experiment.objects.count(), Study.objects.count())

    response = api(member, "post", path, body)

    assert response.status_code == 429, response.content
    assert response.json()["detail"] == "over quota"
    [message] = response.json()["errors"]["quota"]
    assert REFUSAL.fullmatch(message), message
    assert (Run.objects.count(), Experiment.objects.count(), Study.objects.count()) == before


def test_the_schema_documents_429_on_exactly_the_operations_tested_above(client, viewer):
    client.force_login(viewer)
    schema = client.get("/api/openapi.json").json()

    documented = {
        f"{method.upper()} {path}"
        for path, methods in schema["paths"].items()
        for method, operation in methods.items()
        if "429" in {str(status) for status in operation.get("responses", {})}
    }

    assert documented == set(QUEUEING)


# The pages.


def _page(client, member, url: str, data: dict | None = None):
    client.force_login(member)
    return client.post(url, data or {}, follow=True)


def test_every_page_that_queues_shows_the_refusal_and_never_a_500(client, api, owner, member, settings):
    rerun = make_experiment(created_by=member, with_runs=False)
    failed, finished, source = _failed_run(member), _finished_run(member), _source()
    study = _finished_study(api, owner)
    measured = _measured_experiment()
    settings.SPECDASH_QUOTA_LAUNCHES_PER_USER = 0
    runs = Run.objects.count()

    pages = {
        "rerun": _page(client, member, reverse("rerun_experiment", args=[rerun.pk]), {"launches": 1}),
        "remedy": _page(client, member, reverse("rerun_with_remedy", args=[failed.pk]), {"remedy": "context-length"}),
        "profile": _page(client, member, reverse("profile_run", args=[finished.pk])),
        "headroom": _page(client, member, f"/experiments/{source.pk}/headroom/new/", {"config": _real(source).pk}),
        "confirmation": _page(client, member, reverse("confirm_recommendation", args=[study.pk, 0])),
        "study verification": _page(client, member, reverse("build_study_schedule", args=[study.pk])),
        "experiment verification": _page(client, member, reverse("build_experiment_schedule", args=[measured.pk])),
    }

    for name, page in pages.items():
        assert page.status_code == 200, name
        assert REFUSAL.search(page.content.decode()), name
    assert Run.objects.count() == runs


def test_the_study_form_shows_the_refusal_at_its_budget(client, member, settings):
    make_host(models_root=MODELS, gpu_inventory=[{"index": i} for i in range(8)])
    client.force_login(member)
    blank = client.get(reverse("study_new"))
    data = {**_page_data(blank), "experiment-name": "over", "profile-concurrency": "1, 8"}
    settings.SPECDASH_QUOTA_GPU_HOURS_PER_USER_PER_DAY = 10

    page = client.post(reverse("study_new"), data)

    assert page.status_code == 400 and not Study.objects.exists() and not Run.objects.exists()
    message = page.context["errors"]["max_launches"][0]
    assert message.startswith("10.0 GPU-hours a day allowed for you") and "this study's budget asks up to" in message
    field = page.content.decode().replace("&#x27;", "'").split('for="id_study-max_launches"')[1]
    assert message in field.split("</label>")[0]


# Who is counted.


def test_a_maintainers_rerun_of_a_members_experiment_counts_against_the_member(api, member, maintainer, settings):
    settings.SPECDASH_QUOTA_LAUNCHES_PER_USER = 3
    experiment = make_experiment(created_by=member, candidates=[make_config()])  # 2 pending, the member's
    own = make_experiment(created_by=maintainer, candidates=[])  # 1 pending, the maintainer's

    refused = api(maintainer, "post", f"/api/experiments/{experiment.pk}/rerun", {"launches": 1})
    allowed = api(maintainer, "post", f"/api/experiments/{own.pk}/rerun", {"launches": 2})

    assert refused.status_code == 429
    assert refused.json()["errors"]["quota"] == [
        "3 pending runs allowed for member (the default, SPECDASH_QUOTA_LAUNCHES_PER_USER); this asks 1 launch of 2 "
        "configs, 2 runs (2 pending). An admin can raise member's limit on /team/."
    ]
    assert allowed.status_code == 201  # the maintainer's own 1 + 2: within their limit, the member's not counted


def test_an_admin_and_a_command_are_not_held_but_an_admins_experiment_re_run_by_a_maintainer_is_held_by_the_host(
    api, owner, maintainer, settings
):
    settings.SPECDASH_QUOTA_LAUNCHES_PER_HOST = 2
    experiment = make_experiment(created_by=owner, candidates=[])  # one pending on its host

    by_admin = api(owner, "post", f"/api/experiments/{experiment.pk}/rerun", {"launches": 3})
    by_maintainer = api(maintainer, "post", f"/api/experiments/{experiment.pk}/rerun", {"launches": 1})

    assert by_admin.status_code == 201
    assert by_maintainer.status_code == 429
    assert by_maintainer.json()["errors"]["quota"][0].startswith("2 pending runs allowed on host ")


# By construction: nothing but `queue_runs` makes a queued run.

ROOT = Path(__file__).resolve().parents[2]
CREATES = {"create", "bulk_create", "get_or_create", "update_or_create"}
# Where a Run row may be made other than by queue_runs, and why.
OTHER_MAKERS = {
    ("experiments/actions/imports.py", "_file_runs"),  # runs measured elsewhere: stored succeeded, never queued
    ("dashboard/demo/history.py", "_queued_run"),  # the demo's past, written by its command (an operator)
}


def run_makers(source: str) -> set[str]:
    """The functions of a module that make Run rows (Run(...), Run.objects.create and kin, <x>.run_set.create, an
    update back to QUEUED) or call the quota check, each as "function: what"."""
    found = set()

    class Visitor(ast.NodeVisitor):
        def __init__(self) -> None:
            self.function = "<module>"

        def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
            outer, self.function = self.function, node.name
            self.generic_visit(node)
            self.function = outer

        def visit_Call(self, node: ast.Call) -> None:
            text = ast.unparse(node.func)
            if text == "Run" or (
                isinstance(node.func, ast.Attribute)
                and node.func.attr in CREATES
                and (text.startswith("Run.") or ".run_set." in f"{text}.")
            ):
                found.add(f"{self.function}: makes runs")
            if text.endswith("check_launch_quota"):
                found.add(f"{self.function}: checks the quota")
            if text.endswith(".update") and any(
                k.arg == "state" and "QUEUED" in ast.unparse(k.value) for k in node.keywords
            ):
                found.add(f"{self.function}: queues runs again")
            self.generic_visit(node)

    Visitor().visit(sources.parse(source))
    return found


def test_only_queue_runs_makes_queued_runs_and_it_checks_the_quota():
    makers: dict[str, set[str]] = {}
    for folder in ("experiments", "workers", "dashboard"):
        for path in (ROOT / folder).rglob("*.py"):
            relative = path.relative_to(ROOT).as_posix()
            if "/tests/" in relative or "/migrations/" in relative:
                continue
            for found in run_makers(path.read_text()):
                function = found.split(":")[0]
                if (relative, function) not in OTHER_MAKERS:
                    makers.setdefault(relative, set()).add(found)

    assert makers == {"experiments/actions/experiments.py": {"queue_runs: makes runs", "queue_runs: checks the quota"}}


def test_the_scan_finds_each_way_of_making_a_queued_run():
    source = (
        "def a(experiment):\n    experiment.run_set.create(config=c)\n"
        "def b():\n    Run.objects.bulk_create([Run(experiment=e)])\n"
        "def c():\n    Run.objects.filter(pk=1).update(state=Run.State.QUEUED)\n"
        "def d(actor, e):\n    quotas.check_launch_quota(actor, e, [], 1)\n"
        "def e():\n    Run.objects.filter(pk=1).update(state=Run.State.FAILED)\n"
    )

    assert run_makers(source) == {
        "a: makes runs", "b: makes runs", "c: queues runs again", "d: checks the quota",
    }  # fmt: skip
