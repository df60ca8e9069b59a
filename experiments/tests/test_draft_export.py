"""Exporting a listed draft checkpoint for SGLang where an admin allows it (`Host.specforge_launcher`): the command
specdash builds (rules/draft_export.py) and its refusals, the page's button and `POST /api/hosts/{id}/draft-
checkpoints/export` with the worker stubbed (workers/tests/test_draft_checkpoints_export.py runs the real one)."""

from __future__ import annotations

import copy
import shlex

import pytest

from experiments.actions import dispatch
from experiments.forms import HostForm
from experiments.models import AuditEvent, Host
from experiments.rules import draft_export

from .factories import make_host
from .test_draft_checkpoints import SHIPPED, SIM_MODELS, _bearer, _form_data, _shipped_answer

pytestmark = pytest.mark.django_db

RUN = "kimi-k2.5-sim-eagle3-sf"
ROOT = str(SIM_MODELS)
LAUNCHER = "/opt/venv/bin/specforge"


def _plan(directories=None, *, launcher=LAUNCHER, directory=str(SHIPPED), run_id=RUN, step=3000):
    listed = _shipped_answer() if directories is None else directories
    return draft_export.plan_export(launcher, ROOT, listed, directory, run_id, step)


def test_it_builds_the_command_from_the_launcher_and_the_listed_checkpoint():
    plan = _plan()

    assert isinstance(plan, draft_export.ExportPlan)
    assert plan.checkpoint == f"{SHIPPED}/{RUN}-step3000"
    assert plan.draft_config == f"{SHIPPED}/{RUN}.draft_config.json"
    assert plan.output_dir == f"{ROOT}/{RUN}-step3000-sglang"
    assert shlex.split(plan.command) == [
        *LAUNCHER.split(),
        "export",
        "--to",
        "sglang",
        "--checkpoint",
        plan.checkpoint,
        "--draft-config",
        plan.draft_config,
        "--output-dir",
        plan.output_dir,
    ]


def test_shell_metacharacters_in_a_listed_name_stay_one_quoted_word():
    listed = _shipped_answer()
    evil_dir = f"{ROOT}/t'; touch PWNED; echo '$(touch P2)`touch P3`"
    evil_run = "r;$(id)"
    listed[0]["path"] = evil_dir
    run = listed[0]["runs"][0]
    run["run_id"], run["draft_config"] = evil_run, f"{evil_dir}/{evil_run}.draft_config.json"
    for checkpoint in run["checkpoints"]:
        checkpoint["path"] = f"{evil_dir}/{evil_run}-step{checkpoint['step']}"

    plan = _plan(listed, directory=evil_dir, run_id=evil_run)

    assert isinstance(plan, draft_export.ExportPlan)
    words = shlex.split(plan.command)
    assert words[words.index("--checkpoint") + 1] == f"{evil_dir}/{evil_run}-step3000"
    assert words[words.index("--output-dir") + 1] == f"{ROOT}/{evil_run}-step3000-sglang"
    assert len(words) == 10


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"launcher": "  "}, "has no SpecForge launcher"),
        ({"step": 3001}, f"No checkpoint {RUN}-step3001"),
        ({"run_id": "other"}, "No checkpoint other-step3000"),
        ({"directory": f"{ROOT}/elsewhere"}, "not one the host's listing shows now"),
        ({"step": 4000}, "is exported already"),
        ({"step": "3000"}, "a whole number"),
        ({"step": True}, "a whole number"),
    ],
)
def test_it_refuses_what_the_listing_does_not_offer(change, message):
    refusal = _plan(**change)

    assert isinstance(refusal, str) and message in refusal


def test_it_refuses_a_run_without_its_draft_config_and_paths_outside_the_root():
    without = _shipped_answer()
    without[0]["runs"][0]["draft_config"] = None
    outside = copy.deepcopy(_shipped_answer())
    outside[0]["runs"][0]["draft_config"] = "/etc/passwd"

    assert "keeps no kimi-k2.5-sim-eagle3-sf.draft_config.json" in str(_plan(without))
    assert "The draft config /etc/passwd is not under the host's models root" in str(_plan(outside))


def test_the_host_form_holds_the_launcher_like_the_others():
    data = _form_data(Host(name="h1"), "")

    refused = HostForm({**data, "specforge_launcher": "specforge\nrm -rf /"})
    kept = HostForm({**data, "specforge_launcher": LAUNCHER})

    assert not refused.is_valid() and "specforge_launcher" in refused.errors
    assert kept.is_valid(), kept.errors
    assert kept.save_unsaved().specforge_launcher == LAUNCHER


@pytest.fixture
def exports(monkeypatch) -> list[tuple]:
    """What a worker was asked to export; it answers as the worker does when the export ran."""
    asked: list[tuple] = []

    def answer(host, directory, run_id, step):
        asked.append((host.pk, directory, run_id, step))
        output = draft_export.output_dir(host.models_root, run_id, step)
        return {"ok": True, "output_dir": output, "command": "x", "exit_status": 0, "output": "exported"}

    monkeypatch.setattr(dispatch, "export_draft_checkpoint", answer)
    return asked


def _host(owner, launcher=LAUNCHER):
    host = make_host(models_root=ROOT)
    host.draft_training_dirs, host.specforge_launcher = [str(SHIPPED)], launcher
    host.save()
    return host


BODY = {"directory": str(SHIPPED), "run_id": RUN, "step": 3000}


def test_a_member_exports_through_the_api_and_it_is_audited(client, owner, member, exports):
    host = _host(owner)

    response = client.post(
        f"/api/hosts/{host.pk}/draft-checkpoints/export",
        BODY,
        content_type="application/json",
        headers=_bearer(member),
    )

    assert response.status_code == 200, response.content
    assert response.json()["output_dir"] == f"{ROOT}/{RUN}-step3000-sglang"
    assert exports == [(host.pk, str(SHIPPED), RUN, 3000)]
    event = AuditEvent.objects.about(host).get(action=AuditEvent.Action.HOST_EXPORT)
    assert event.actor == member and event.detail["ok"] and event.detail["step"] == 3000


def test_a_viewer_may_not_export(client, owner, viewer, exports):
    host = _host(owner)
    client.force_login(viewer)

    api = client.post(
        f"/api/hosts/{host.pk}/draft-checkpoints/export", BODY, content_type="application/json", headers=_bearer(viewer)
    )
    page = client.post(f"/hosts/{host.pk}/draft-checkpoints/export", BODY)

    assert (api.status_code, page.status_code) == (403, 403)
    assert exports == []


def test_no_worker_is_asked_where_no_admin_allowed_it(client, owner, member, exports):
    host = _host(owner, launcher="")

    response = client.post(
        f"/api/hosts/{host.pk}/draft-checkpoints/export", BODY, content_type="application/json", headers=_bearer(member)
    )

    assert response.status_code == 409 and "no SpecForge launcher" in response.json()["detail"]
    assert exports == []


def test_a_worker_refusal_is_a_409_and_audited(client, owner, member, monkeypatch):
    host = _host(owner)

    def refuse(*args):
        raise dispatch.HostProbeFailed(f"{ROOT}/{RUN}-step3000-sglang exists on the host: nothing is overwritten.", 409)

    monkeypatch.setattr(dispatch, "export_draft_checkpoint", refuse)

    response = client.post(
        f"/api/hosts/{host.pk}/draft-checkpoints/export", BODY, content_type="application/json", headers=_bearer(member)
    )

    assert response.status_code == 409 and "exists on the host" in response.json()["detail"]
    assert AuditEvent.objects.about(host).get(action=AuditEvent.Action.HOST_EXPORT).detail["ok"] is False


def test_the_page_offers_the_button_on_unexported_checkpoints_and_posts_it(client, owner, member, exports, monkeypatch):
    host = _host(owner)
    monkeypatch.setattr(dispatch, "read_draft_checkpoints", lambda host: _shipped_answer())
    client.force_login(member)

    page = client.get(f"/hosts/{host.pk}/draft-checkpoints/").content.decode()
    posted = client.post(f"/hosts/{host.pk}/draft-checkpoints/export", BODY, follow=True)

    assert page.count("Export for SGLang") == 2  # steps 1000 and 3000: the others are exported
    assert posted.status_code == 200
    assert f"{RUN}-step3000 exported for SGLang to {ROOT}/{RUN}-step3000-sglang" in posted.content.decode()
    assert exports == [(host.pk, str(SHIPPED), RUN, 3000)]


def test_the_page_has_no_button_where_no_admin_allowed_it(client, owner, member, monkeypatch):
    host = _host(owner, launcher="")
    monkeypatch.setattr(dispatch, "read_draft_checkpoints", lambda host: _shipped_answer())
    client.force_login(member)

    assert "Export for SGLang" not in client.get(f"/hosts/{host.pk}/draft-checkpoints/").content.decode()
