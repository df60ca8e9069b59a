"""The hosts page: the list, registering a host, marking one clean."""

from __future__ import annotations

import pytest

from experiments.models import Host

from .factories import make_host

pytestmark = pytest.mark.django_db


def test_it_lists_hosts(owner_client):
    make_host(name="gpu-box-1", is_dirty=True, dirty_reason="pid 4242 still holds 80000 MiB")

    content = owner_client.get("/hosts/").content.decode()

    assert "gpu-box-1" in content
    assert "pid 4242 still holds 80000 MiB" in content


def test_it_registers_a_host_from_the_browser_and_says_what_is_wrong(owner_client):
    good = {"name": "gpu-7", "address": "10.0.0.7", "port": "22", "username": "infer", "key_name": "id_gpu7",
            "work_dir": "specdash-work", "models_root": "/models", "launcher": "python3 -m sglang.launch_server",
            "python": "python3", "server_port": "30000", "shell_setup": ""}  # fmt: skip

    bad = owner_client.post("/hosts/new/", {**good, "key_name": "../id_rsa", "server_port": "70000"})

    assert bad.status_code == 400
    assert "A file name inside SPECDASH_SSH_KEY_DIR, not a path." in bad.content.decode()
    assert "A TCP port is between 1 and 65535." in bad.content.decode()
    assert not Host.objects.filter(name="gpu-7").exists()

    response = owner_client.post("/hosts/new/", good, follow=True)

    host = Host.objects.get(name="gpu-7")
    assert (host.address, host.username, host.key_name, host.is_pinned) == ("10.0.0.7", "infer", "id_gpu7", False)
    page = response.content.decode()
    assert "Host gpu-7 registered. Test the connection to pin its SSH host key." in page
    assert f'action="/hosts/{host.pk}/test/"' in page


def test_it_marks_a_dirty_host_clean_only_on_post(owner_client):
    host = make_host(is_dirty=True, dirty_reason="GPU memory held")

    assert owner_client.get(f"/hosts/{host.pk}/clean/").status_code == 405
    response = owner_client.post(f"/hosts/{host.pk}/clean/")

    assert response.status_code == 302
    host.refresh_from_db()
    assert not host.is_dirty and host.dirty_reason == ""
