"""Exporting a listed draft checkpoint for SGLang over SSH (workers/hosts.py: export_draft_checkpoint) against the
real loopback sshd and the simulated host's SpecForge (simhost/specforge.py), on a copy of the shipped training
directory in a models root of the test's own (the shipped exports stay as they are)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from experiments.models import ApiToken, AuditEvent
from simhost import hostsetup
from workers import hosts

RUN = "kimi-k2.5-sim-eagle3-sf"
SHIPPED = hostsetup.MODELS_ROOT / "kimi-k2.5-sim-specforge"

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


def _models_with_training_dir(sim_host, tmp_path: Path, name: str = "train") -> Path:
    models = tmp_path / "models"
    models.mkdir()
    shutil.copytree(SHIPPED, models / name, symlinks=True)
    sim_host.models_root = str(models)
    sim_host.draft_training_dirs = [str(models / name)]
    return models


def _checkpoints(sim_host) -> dict[int, dict]:
    (answer,) = hosts.read_draft_checkpoints(sim_host)
    return {c["step"]: c for c in answer["runs"][0]["checkpoints"]}


def test_it_exports_step3000_and_the_listing_then_shows_it_exported(sim_host, tmp_path):
    models = _models_with_training_dir(sim_host, tmp_path)
    assert not _checkpoints(sim_host)[3000]["exported"]

    answer = hosts.export_draft_checkpoint(sim_host, str(models / "train"), RUN, 3000)

    out = models / f"{RUN}-step3000-sglang"
    assert answer["ok"] and answer["exit_status"] == 0, answer
    assert answer["output_dir"] == str(out) and f"exported SGLang draft to {out}" in answer["output"]
    assert _checkpoints(sim_host)[3000]["draft_paths"] == [str(out)]
    config = json.loads((out / "config.json").read_text())
    assert config["simhost_acceptance_multiplier"] == 0.97  # make_specforge_run.py's step 3000
    assert config["architectures"] == ["LlamaForCausalLMEagle3"]
    assert "fc.weight" in json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]

    again = hosts.export_draft_checkpoint(sim_host, str(models / "train"), RUN, 3000)

    assert again == {"ok": False, "refused": True, "error": f"{RUN}-step3000 is exported already: {out}."}


def test_it_refuses_an_output_that_exists_and_runs_nothing(sim_host, tmp_path):
    models = _models_with_training_dir(sim_host, tmp_path)
    (models / f"{RUN}-step1000-sglang").write_text("someone's file")  # not a draft: the listing does not count it

    answer = hosts.export_draft_checkpoint(sim_host, str(models / "train"), RUN, 1000)

    assert answer == {
        "ok": False,
        "refused": True,
        "error": f"{models}/{RUN}-step1000-sglang exists on the host: nothing is overwritten.",
    }
    assert (models / f"{RUN}-step1000-sglang").read_text() == "someone's file"


def test_it_refuses_without_a_launcher_or_for_a_directory_the_admin_did_not_set(sim_host, tmp_path):
    models = _models_with_training_dir(sim_host, tmp_path)
    other = str(models / "other")

    outside = hosts.export_draft_checkpoint(sim_host, other, RUN, 3000)
    sim_host.specforge_launcher = ""
    no_launcher = hosts.export_draft_checkpoint(sim_host, str(models / "train"), RUN, 3000)

    assert outside["refused"] and "not one an admin set" in outside["error"]
    assert no_launcher["refused"] and "has no SpecForge launcher" in no_launcher["error"]
    assert not list(models.glob("*-sglang"))


def test_shell_metacharacters_in_the_directory_reach_specforge_as_one_word(sim_host, tmp_path):
    name = "t'; touch PWNED; echo '$(touch PWNED2)`touch PWNED3`"
    models = _models_with_training_dir(sim_host, tmp_path, name)

    answer = hosts.export_draft_checkpoint(sim_host, str(models / name), RUN, 1000)

    assert answer["ok"], answer
    assert (models / f"{RUN}-step1000-sglang" / "config.json").is_file()
    for where in (Path.home(), tmp_path, models, models / name):
        assert not list(where.glob("PWNED*")), where


@pytest.mark.django_db(transaction=True)
def test_a_member_exports_through_a_worker_with_the_api(client, member, sim_host, tmp_path, celery_worker_process):
    models = _models_with_training_dir(sim_host, tmp_path)
    sim_host.save(update_fields=["models_root", "draft_training_dirs"])
    _, token = ApiToken.issue(member)
    body = {"directory": str(models / "train"), "run_id": RUN, "step": 3000}

    response = client.post(
        f"/api/hosts/{sim_host.pk}/draft-checkpoints/export",
        body,
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )

    assert response.status_code == 200, response.content
    assert response.json()["output_dir"] == f"{models}/{RUN}-step3000-sglang"
    listed = client.get(
        f"/api/hosts/{sim_host.pk}/draft-checkpoints", headers={"Authorization": f"Bearer {token}"}
    ).json()
    rows = {c["step"]: c for c in listed["directories"][0]["runs"][0]["checkpoints"]}
    assert rows[3000]["exported"] and rows[3000]["draft_paths"] == [f"{models}/{RUN}-step3000-sglang"]
    event = AuditEvent.objects.get(action=AuditEvent.Action.HOST_EXPORT, target_id=sim_host.pk)
    assert event.detail["ok"] and event.detail["output_dir"] == f"{models}/{RUN}-step3000-sglang"


def test_a_failed_export_comes_back_with_its_status_and_output(sim_host, tmp_path):
    models = _models_with_training_dir(sim_host, tmp_path)
    sim_host.specforge_launcher = "sh -c 'echo no GPU left >&2; exit 3' specforge"

    answer = hosts.export_draft_checkpoint(sim_host, str(models / "train"), RUN, 3000)

    assert (answer["ok"], answer["exit_status"]) == (False, 3) and "no GPU left" in answer["output"]
    assert "refused" not in answer
