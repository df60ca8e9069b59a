"""A host's draft training directories: set by admins on the host form and API (held to the model path rules), and
read live for members on the draft checkpoints page and `GET /api/hosts/{id}/draft-checkpoints` (the worker's
answer stubbed here; workers/tests/test_draft_checkpoints_read.py reads the real simulated host)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from experiments import serializers
from experiments.actions import dispatch
from experiments.formats import specforge_runs
from experiments.forms import HostForm
from experiments.models import ApiToken, Host

from .factories import make_host

pytestmark = pytest.mark.django_db

SIM_MODELS = Path(__file__).resolve().parents[2] / "simhost" / "models"
SHIPPED = SIM_MODELS / "kimi-k2.5-sim-specforge"


def _bearer(user) -> dict[str, str]:
    _, token = ApiToken.issue(user)
    return {"Authorization": f"Bearer {token}"}


def _shipped_answer() -> list[dict]:
    """What a worker answers for the simulated host's directory (read here with the same reader)."""
    listing = subprocess.run(
        ["find", ".", "-mindepth", "1", "-maxdepth", "2", "-printf", "%y\\0%s\\0%P\\0%l\\0"],
        cwd=SHIPPED,
        capture_output=True,
        check=True,
    ).stdout
    entries, _, _ = specforge_runs.parse_listing(listing)
    files = {name: (SHIPPED / name).read_text() for name, _ in specforge_runs.files_to_read(entries)}
    drafts = [p.name for p in SIM_MODELS.iterdir() if (p / "config.json").is_file()]
    found = specforge_runs.read_training_directory(
        str(SHIPPED), entries, files, models_root=str(SIM_MODELS), models_root_drafts=drafts
    )
    return [serializers.training_directory_json(str(SHIPPED), found)]


@pytest.fixture
def asked(monkeypatch) -> list[int]:
    """The hosts a worker was asked about; it answers with the simulated host's directory."""
    hosts: list[int] = []

    def answer(host: Host) -> list[dict]:
        hosts.append(host.pk)
        return _shipped_answer()

    monkeypatch.setattr(dispatch, "read_draft_checkpoints", answer)
    return hosts


def _host(**fields) -> Host:
    return make_host(models_root=str(SIM_MODELS), draft_training_dirs=[str(SHIPPED)], **fields)


def _form_data(host: Host, dirs: str | list[str]) -> dict:
    return {
        "name": host.name,
        "address": "127.0.0.1",
        "port": 22,
        "username": "gpu",
        "work_dir": "w",
        "models_root": "/models",
        "launcher": "python3 -m sglang.launch_server",
        "python": "python3",
        "server_port": 30000,
        "draft_training_dirs": dirs,
    }


@pytest.mark.parametrize(
    ("dirs", "message"),
    [
        ("/elsewhere/train", "is not under the host's models root /models"),
        ("/models/../etc", "must be written plainly"),
        ("relative/train", "must be an absolute path"),
        ("/models/a\x1b[2Jb", "control character"),
        ("\n".join(f"/models/t{i}" for i in range(11)), "At most 10 directories."),
    ],
)
def test_the_host_form_refuses_a_training_directory_outside_the_model_path_rules(dirs, message):
    form = HostForm(_form_data(Host(name="h1"), dirs))

    assert not form.is_valid()
    assert any(message in error for error in form.errors["draft_training_dirs"]), form.errors


def test_the_host_form_keeps_the_directories_one_per_line_once_each():
    form = HostForm(_form_data(Host(name="h1"), "/models/train-a\r\n\n/models/train-b\n/models/train-a\n"))

    assert form.is_valid(), form.errors
    assert form.save_unsaved().draft_training_dirs == ["/models/train-a", "/models/train-b"]


def test_an_admin_registers_them_through_the_api_and_a_member_cannot(client, owner, member):
    body = {**_form_data(Host(name="api-host"), ["/models/train"]), "name": "api-host"}

    refused = client.post("/api/hosts", body, content_type="application/json", headers=_bearer(member))
    made = client.post("/api/hosts", body, content_type="application/json", headers=_bearer(owner))
    outside = client.post(
        "/api/hosts",
        {**body, "name": "api-host-2", "draft_training_dirs": ["/etc"]},
        content_type="application/json",
        headers=_bearer(owner),
    )

    assert refused.status_code == 403
    assert made.status_code == 201, made.content
    assert made.json()["draft_training_dirs"] == ["/models/train"]
    assert Host.objects.get(name="api-host").draft_training_dirs == ["/models/train"]
    assert outside.status_code == 422 and "is not under the host's models root" in outside.content.decode()


def test_a_member_reads_the_checkpoints_through_the_api(client, member, asked):
    host = _host()

    response = client.get(f"/api/hosts/{host.pk}/draft-checkpoints", headers=_bearer(member))

    assert response.status_code == 200, response.content
    assert asked == [host.pk]
    (directory,) = response.json()["directories"]
    (run,) = directory["runs"]
    rows = {c["step"]: c for c in run["checkpoints"]}
    assert (run["latest_step"], run["best_step"]) == (5000, 4000)
    assert rows[2000]["exported"] and rows[2000]["draft_paths"] == [
        f"{SIM_MODELS}/kimi-k2.5-sim-eagle3-sf-step2000-sglang"
    ]
    assert not rows[3000]["exported"] and rows[3000]["draft_paths"] == []
    assert rows[4000]["served_definition"] == pytest.approx(rows[4000]["simulated_acc_len"] + 1)
    assert set(rows[4000]) == {
        "step", "path", "rank_files", "size_bytes", "is_latest", "is_best", "exported", "draft_paths", "metrics",
        "simulated_acc_len", "served_definition",
    }  # fmt: skip


def test_a_viewer_may_not_make_a_worker_read_the_host(client, viewer, asked):
    host = _host()
    client.force_login(viewer)

    api = client.get(f"/api/hosts/{host.pk}/draft-checkpoints", headers=_bearer(viewer))
    page = client.get(f"/hosts/{host.pk}/draft-checkpoints/")

    assert api.status_code == 403 and page.status_code == 403
    assert asked == []


def test_the_page_lists_each_checkpoint_with_its_exports_and_figures(client, member, asked):
    host = _host()
    client.force_login(member)

    page = client.get(f"/hosts/{host.pk}/draft-checkpoints/")
    detail = client.get(f"/hosts/{host.pk}/")

    assert page.status_code == 200
    text = page.content.decode()
    for step in (1000, 2000, 3000, 4000, 5000):
        assert f'data-step="{step}"' in text
    assert f"{SIM_MODELS}/kimi-k2.5-sim-eagle3-sf-step4000-sglang" in text
    assert text.count("not exported") == 2
    assert "2.3287" in text and "1.3287" in text  # best: training figure, and + 1 on the served definition
    assert '<span class="tag">latest</span>' in text and '<span class="tag">best</span>' in text
    assert f'href="/hosts/{host.pk}/draft-checkpoints/"' in detail.content.decode()


def test_no_worker_is_asked_for_a_host_without_training_directories(client, member, asked):
    host = make_host()
    client.force_login(member)

    page = client.get(f"/hosts/{host.pk}/draft-checkpoints/")
    api = client.get(f"/api/hosts/{host.pk}/draft-checkpoints", headers=_bearer(member))

    assert page.status_code == 200 and 'id="no-dirs"' in page.content.decode()
    assert api.json() == {"id": host.pk, "directories": []}
    assert asked == []


def test_a_host_that_cannot_be_read_is_said_so(client, member, monkeypatch):
    def fail(host: Host) -> list[dict]:
        raise dispatch.HostProbeFailed("SSH connection to h failed", 502)

    monkeypatch.setattr(dispatch, "read_draft_checkpoints", fail)
    host = _host()
    client.force_login(member)

    page = client.get(f"/hosts/{host.pk}/draft-checkpoints/")
    api = client.get(f"/api/hosts/{host.pk}/draft-checkpoints", headers=_bearer(member))

    assert page.status_code == 502 and "SSH connection to h failed" in page.content.decode()
    assert api.status_code == 502 and api.json()["detail"] == "SSH connection to h failed"
