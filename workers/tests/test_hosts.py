"""Registering a host through the API: a worker connects, pins the host key, reads the GPUs and the models."""

from __future__ import annotations

import time

import pytest

from experiments.models import ApiToken, Host, SshKey
from simhost import hostsetup
from workers.tasks import read_host_gpus

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def auth(owner) -> dict[str, str]:
    _, token = ApiToken.issue(owner)
    return {"Authorization": f"Bearer {token}"}


def test_it_pins_the_key_reads_gpus_and_lists_models(client, auth, sshd, celery_worker_process, tmp_path):
    # Registered without its public key: the admin's first connection test records it, as it pins the host key.
    key = SshKey.objects.create(name="probe-key", file_name=sshd.client_key_name)
    payload = {
        "name": "probe-host",
        "address": "127.0.0.1",
        "port": sshd.port,
        "username": sshd.username,
        "key_name": key.name,
        "work_dir": str(tmp_path / "work"),
        "models_root": str(hostsetup.MODELS_ROOT),
        "shell_setup": hostsetup.shell_setup(tmp_path / "state", 0.5),
        "launcher": hostsetup.LAUNCHER,
        "python": "python",
        "server_port": 30999,
    }
    host = client.post("/api/hosts", payload, content_type="application/json", headers=auth).json()

    tested = client.post(f"/api/hosts/{host['id']}/test", headers=auth)
    never_listed = client.get(f"/api/hosts/{host['id']}/models", headers=auth)
    refresh = client.post(f"/api/hosts/{host['id']}/models/refresh", headers=auth)
    deadline = time.monotonic() + 60  # the worker lists them after the answer: the request never waits for it
    while "X-Models-Listed-At" not in (models := client.get(f"/api/hosts/{host['id']}/models", headers=auth)):
        assert time.monotonic() < deadline, "no worker listed the models"
        time.sleep(0.2)

    assert tested.status_code == 200, tested.content
    assert tested.json()["pinned"] is True
    assert tested.json()["host_key"].split()[:2] == sshd.host_key.split()[:2]
    assert len(tested.json()["gpus"]) == 8 and tested.json()["gpus"][0]["memory_total_mib"] == 143771
    assert never_listed.json() == [] and "X-Models-Listed-At" not in never_listed
    assert refresh.status_code == 202 and refresh.json()["requested"] is True
    assert models.status_code == 200, models.content
    by_name = {m["name"]: m for m in models.json()}
    assert set(by_name) >= {"kimi-k2.5-sim", "kimi-k2.5-sim-eagle3", "kimi-k2.5-sim-eagle3-ctx131k"}
    assert by_name["kimi-k2.5-sim-eagle3-ctx131k"]["max_position_embeddings"] == 131072
    # The listing is kept: the submission checks the next experiment's model pairs against it.
    stored = Host.objects.get(pk=host["id"])
    assert stored.model_inventory == {"models_root": str(hostsetup.MODELS_ROOT), "models": models.json()}
    assert stored.model_inventory_at is not None
    assert by_name["kimi-k2.5-sim-eagle3-ctx131k"]["text_config"]["max_position_embeddings"] == 131072
    key.refresh_from_db()
    assert key.public_key.split() == (sshd.key_dir / f"{sshd.client_key_name}.pub").read_text().split()[:2]


def test_it_refuses_a_key_file_that_is_not_the_registered_key(client, auth, sim_host, celery_worker_process):
    key = sim_host.ssh_key
    key.public_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
    key.save()

    response = client.post(f"/api/hosts/{sim_host.pk}/test", headers=auth)

    assert response.status_code == 502
    assert "is not the registered key; refusing to use it" in response.json()["detail"]


def test_it_refuses_to_connect_outside_the_allowlist_even_to_a_registered_host(
    client, auth, sim_host, celery_worker_process, settings
):
    # The worker reads the allowlist from its own settings: a host registered before the list was narrowed (or
    # whose name now resolves elsewhere) is refused at connection time, not only at registration.
    sim_host.address = "localhost.invalid"
    sim_host.save(update_fields=["address"])

    response = client.post(f"/api/hosts/{sim_host.pk}/test", headers=auth)

    assert response.status_code == 502
    assert "Not connecting to" in response.json()["detail"]


def test_it_refuses_a_host_whose_key_changed(client, auth, sim_host, celery_worker_process):
    sim_host.host_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHs7ba7Xk4mfw5fN8bFJfVw0vM8Cq0rW6jAa0l4n7sYt"
    sim_host.save()

    response = client.post(f"/api/hosts/{sim_host.pk}/test", headers=auth)

    assert response.status_code == 502
    assert "does not match the pinned key" in response.json()["detail"]
    sim_host.refresh_from_db()
    assert sim_host.host_key.endswith("n7sYt")  # never re-pinned silently


def test_the_hosts_page_tests_a_connection_and_says_what_it_found(client, owner, sim_host, celery_worker_process):
    client.force_login(owner)
    sim_host.host_key = ""
    sim_host.save(update_fields=["host_key"])

    first = client.post(f"/hosts/{sim_host.pk}/test/", follow=True).content.decode()
    again = client.post(f"/hosts/{sim_host.pk}/test/", follow=True).content.decode()

    assert f"Connected to {sim_host.name}: 8 × NVIDIA H200; ssh-ed25519 host key pinned." in first
    assert f"Connected to {sim_host.name}: 8 × NVIDIA H200; ssh-ed25519 host key verified." in again
    sim_host.refresh_from_db()
    assert sim_host.is_pinned and sim_host.gpu_count == 8

    sim_host.host_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHs7ba7Xk4mfw5fN8bFJfVw0vM8Cq0rW6jAa0l4n7sYt"
    sim_host.save(update_fields=["host_key"])
    refused = client.post(f"/hosts/{sim_host.pk}/test/", follow=True).content.decode()
    assert f"Host {sim_host.name}: " in refused and "does not match the pinned key" in refused


def test_it_tells_only_admins_why_a_host_could_not_be_read(
    client, auth, viewer, member, sim_host, celery_worker_process
):
    """No port-scan oracle: reading a host's models never reaches the host, and a member's request for a new listing
    is answered at once, the same whether the host answers or not; only an admin's connection test says why."""
    sim_host.port = 1  # nothing listens there
    sim_host.save(update_fields=["port"])
    _, viewer_token = ApiToken.issue(viewer)
    _, member_token = ApiToken.issue(member)

    as_viewer = client.get(f"/api/hosts/{sim_host.pk}/models", headers={"Authorization": f"Bearer {viewer_token}"})
    refresh = client.post(
        f"/api/hosts/{sim_host.pk}/models/refresh", headers={"Authorization": f"Bearer {member_token}"}
    )
    as_admin = client.post(f"/api/hosts/{sim_host.pk}/test", headers=auth)

    assert as_viewer.status_code == 200 and as_viewer.json() == sim_host.listed_models()
    assert refresh.status_code == 202 and "127.0.0.1" not in refresh.content.decode()
    assert as_admin.status_code == 502 and "127.0.0.1:1" in as_admin.json()["detail"]


def test_the_beat_reads_every_pinned_hosts_gpu_memory(sim_host, settings):
    unpinned = Host.objects.create(name="never-tested", address="127.0.0.1", port=sim_host.port, username="x")
    unreachable = Host.objects.create(
        name="gone", address="127.0.0.1", port=1, username="x", host_key=sim_host.host_key, gpu_inventory=[{"index": 0}]
    )

    assert read_host_gpus() == [sim_host.pk]

    sim_host.refresh_from_db()
    assert sim_host.gpus_read_at is not None and len(sim_host.gpu_inventory) == 8
    assert {"memory_used_mib", "memory_total_mib"} <= set(sim_host.gpu_inventory[0])
    unpinned.refresh_from_db()
    unreachable.refresh_from_db()
    assert unpinned.gpus_read_at is None  # only an admin's connection test may trust a first key
    assert unreachable.gpus_read_at is None and unreachable.gpu_inventory == [{"index": 0}]  # the last reading kept
