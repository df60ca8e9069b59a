"""Reading a host's draft training directories over SSH (workers/hosts.py: read_draft_checkpoints), against the
real loopback sshd: the simulated host's SpecForge directory, and directories that try to leave the models root or
to run something through their names."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from experiments.models import ApiToken
from simhost import hostsetup
from workers import hosts

RUN = "kimi-k2.5-sim-eagle3-sf"
SHIPPED = hostsetup.MODELS_ROOT / "kimi-k2.5-sim-specforge"

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


def test_it_reads_the_simulated_hosts_training_directory_over_ssh(sim_host):
    sim_host.draft_training_dirs = [str(SHIPPED)]

    (answer,) = hosts.read_draft_checkpoints(sim_host)

    assert answer["refusal"] is None and answer["skipped"] == [] and answer["problems"] == []
    assert answer["path"] == str(SHIPPED) and answer["resolved_path"] == str(SHIPPED.resolve())
    (run,) = answer["runs"]
    assert (run["run_id"], run["latest_step"], run["best_step"]) == (RUN, 5000, 4000)
    rows = {c["step"]: c for c in run["checkpoints"]}
    assert sorted(rows) == [1000, 2000, 3000, 4000, 5000]
    assert [s for s, c in rows.items() if c["exported"]] == [2000, 4000, 5000]
    assert rows[4000]["draft_paths"] == [f"{hostsetup.MODELS_ROOT}/{RUN}-step4000-sglang"]
    assert rows[4000]["is_best"] and rows[5000]["is_latest"]
    assert rows[4000]["simulated_acc_len"] == 1.3287 and rows[4000]["served_definition"] == 1.3287 + 1
    assert rows[1000]["metrics"]["eval/per_position_acc"] == [0.434] * 3
    json.dumps(answer)  # what a worker sends back through the result backend


def _small_run(root):
    root.mkdir(parents=True)
    (root / "r-step10").mkdir()
    (root / "r-step10" / "training_state.pt").write_bytes(b"x")
    (root / "r-latest").symlink_to("r-step10")
    meta = {"run_id": "r", "step": 10, "score": 1.1, "metric": "eval/simulated_acc_len", "metrics": {}}
    (root / "r.best_meta.json").write_text(json.dumps(meta))
    return root


def test_it_refuses_a_directory_that_resolves_outside_the_models_root(sim_host, tmp_path):
    models = tmp_path / "models"
    _small_run(tmp_path / "elsewhere" / "train")
    models.mkdir()
    (models / "escape").symlink_to(tmp_path / "elsewhere" / "train")
    sim_host.models_root = str(models)
    sim_host.draft_training_dirs = [str(models / "escape"), str(models / ".." / "elsewhere" / "train"), "/etc"]

    answers = hosts.read_draft_checkpoints(sim_host)

    assert [a["runs"] for a in answers] == [[], [], []]
    assert answers[0]["refusal"] == f"{models}/escape is not a readable directory under the models root on {sim_host}"
    assert "written plainly" in answers[1]["refusal"]
    assert "is not under the host's models root" in answers[2]["refusal"]


def test_it_passes_shell_metacharacters_in_a_path_literally(sim_host, tmp_path):
    models = tmp_path / "models"
    name = "t'; touch PWNED; echo '$(touch PWNED2)`touch PWNED3`\n;x"
    _small_run(models / name)
    # A file whose name would run something if a command ever named it unquoted: listed, skipped, never read.
    (models / name / "r-step10" / "$(touch PWNED4)").write_text("")
    sim_host.models_root = str(models)
    sim_host.draft_training_dirs = [str(models / name)]

    (answer,) = hosts.read_draft_checkpoints(sim_host)

    assert answer["refusal"] is None
    assert answer["runs"][0]["best_step"] == 10 and answer["runs"][0]["best_score"] == 1.1
    skipped = {s["name"]: s["reason"] for s in answer["skipped"]}
    assert skipped == {"r-step10/$(touch PWNED4)": "name outside the allowed characters (letters, digits, . _ + -)"}
    # The sshd runs commands in the login's home: there too, nothing ran.
    for where in (Path.home(), tmp_path, models, models / name, models / name / "r-step10"):
        assert not list(where.glob("PWNED*")), where


def test_it_answers_per_directory_when_one_is_missing(sim_host, tmp_path):
    models = tmp_path / "models"
    _small_run(models / "ok")
    sim_host.models_root = str(models)
    sim_host.draft_training_dirs = [str(models / "gone"), str(models / "ok")]

    gone, ok = hosts.read_draft_checkpoints(sim_host)

    assert gone["refusal"] and gone["runs"] == []
    assert ok["refusal"] is None and ok["runs"][0]["checkpoints"][0]["step"] == 10


def test_it_does_not_read_a_huge_metrics_file(sim_host, tmp_path):
    models = tmp_path / "models"
    root = _small_run(models / "t")
    with (root / "r.eval_metrics.jsonl").open("wb") as out:
        out.truncate(50 * 1024 * 1024)  # sparse: 50 MB the host would otherwise send
    shutil.copy(root / "r.best_meta.json", root / "r.best_meta.json.bak")
    sim_host.models_root = str(models)
    sim_host.draft_training_dirs = [str(root)]

    (answer,) = hosts.read_draft_checkpoints(sim_host)

    assert any("r.eval_metrics.jsonl holds 52428800 bytes" in p for p in answer["runs"][0]["problems"])
    assert {"name": "r.best_meta.json.bak", "reason": "not part of SpecForge's layout"} in answer["skipped"]


@pytest.mark.django_db(transaction=True)
def test_a_member_reads_them_through_a_worker_on_the_page_and_the_api(client, member, sim_host, celery_worker_process):
    sim_host.draft_training_dirs = [str(SHIPPED)]
    sim_host.save(update_fields=["draft_training_dirs"])
    _, token = ApiToken.issue(member)
    client.force_login(member)

    api = client.get(f"/api/hosts/{sim_host.pk}/draft-checkpoints", headers={"Authorization": f"Bearer {token}"})
    page = client.get(f"/hosts/{sim_host.pk}/draft-checkpoints/")

    assert api.status_code == 200, api.content
    rows = {c["step"]: c for c in api.json()["directories"][0]["runs"][0]["checkpoints"]}
    assert rows[5000]["draft_paths"] == [f"{hostsetup.MODELS_ROOT}/{RUN}-step5000-sglang"] and rows[5000]["is_latest"]
    assert page.status_code == 200
    assert f"{hostsetup.MODELS_ROOT}/{RUN}-step2000-sglang" in page.content.decode()
