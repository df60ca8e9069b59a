"""The hosts page: the list, registering a host, marking one clean."""

from __future__ import annotations

import pytest

from experiments.models import Host

from .factories import make_host, make_ssh_key

pytestmark = pytest.mark.django_db


def test_it_lists_hosts(owner_client):
    make_host(name="gpu-box-1", is_dirty=True, dirty_reason="pid 4242 still holds 80000 MiB")

    content = owner_client.get("/hosts/").content.decode()

    assert "gpu-box-1" in content
    assert "pid 4242 still holds 80000 MiB" in content


def test_it_registers_a_host_from_the_browser_and_says_what_is_wrong(owner_client, settings):
    settings.SPECDASH_HOST_ALLOWLIST = ("10.0.0.0/8",)
    make_ssh_key(name="id_gpu7")
    good = {"name": "gpu-7", "address": "10.0.0.7", "port": "22", "username": "infer", "key_name": "id_gpu7",
            "work_dir": "specdash-work", "models_root": "/models", "launcher": "python3 -m sglang.launch_server",
            "python": "python3", "server_port": "30000", "shell_setup": ""}  # fmt: skip

    bad = owner_client.post("/hosts/new/", {**good, "key_name": "../id_rsa", "server_port": "70000"})

    assert bad.status_code == 400
    assert "Select a valid choice. That choice is not one of the available choices." in bad.content.decode()
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


def test_it_refuses_host_values_that_would_unlock_the_loader_or_read_as_options(owner_client):
    form = {"name": "gpu-8", "address": "127.0.0.1", "port": "22", "username": "infer", "work_dir": "-rf",
            "models_root": "--delete", "launcher": "python3 -m sglang.launch_server", "python": "python3",
            "server_port": "30000", "extra_env_prefixes": "LD_"}  # fmt: skip

    response = owner_client.post("/hosts/new/", form)

    page = response.content.decode()
    assert response.status_code == 400
    assert "LD_: covers loader or interpreter variables that are never allowed." in page
    assert page.count("A directory, not an option: it must not start with &#x27;-&#x27;.") == 2
    assert not Host.objects.filter(name="gpu-8").exists()


def test_it_shows_the_shell_fields_read_only_to_a_viewer_with_the_hosts_history(client, owner_client, viewer):
    host = make_host(shell_setup="source /opt/sglang/bin/activate")
    owner_client.post(f"/hosts/{host.pk}/edit/", {
        "name": host.name, "address": "127.0.0.1", "port": "22", "username": "infer", "work_dir": "w",
        "models_root": "", "launcher": "python3 -m sglang.launch_server", "python": "python3",
        "server_port": "30000", "shell_setup": "source /opt/sglang-0.5.10/bin/activate",
    })  # fmt: skip
    client.force_login(viewer)

    page = client.get(f"/hosts/{host.pk}/").content.decode()

    assert "source /opt/sglang-0.5.10/bin/activate" in page
    assert f'href="/hosts/{host.pk}/edit/"' not in page and "<textarea" not in page
    assert "host.edit" in page and "owner" in page


def test_it_keeps_a_hosts_price_of_a_gpu_hour_when_its_page_saves_it(owner_client):
    host = make_host(cost_per_gpu_hour=2.5)

    page = owner_client.get(f"/hosts/{host.pk}/edit/").content.decode()
    owner_client.post(f"/hosts/{host.pk}/edit/", {
        "name": host.name, "address": "127.0.0.1", "port": "22", "username": "gpu", "work_dir": "w",
        "models_root": "/models", "launcher": "python3 -m sglang.launch_server", "python": "python3",
        "server_port": "30000", "cost_per_gpu_hour": "3.5",
    })  # fmt: skip

    assert 'name="cost_per_gpu_hour"' in page and 'value="2.5"' in page
    host.refresh_from_db()
    assert host.cost_per_gpu_hour == 3.5
