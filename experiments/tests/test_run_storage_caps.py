"""What one run may store: admins set a host's log and trace caps on its edit page or through the API, within bounds
(a refusal names the field); the run page of a run whose log was cut links the whole log on the host, which a viewer
of the run downloads through a worker, and nobody else."""

from __future__ import annotations

import pytest
from django.conf import settings as django_settings

from experiments.models import AuditEvent, Host, Run
from experiments.models.hosts import MIB

from .factories import make_experiment, make_host, make_run

pytestmark = pytest.mark.django_db


def _host_form(host: Host, **changes) -> dict:
    form = {field: getattr(host, field) for field in Host.ADMIN_FIELDS}
    form.update(changes)
    return {name: "" if value is None else value for name, value in form.items()}


def test_an_admin_sets_a_hosts_storage_caps_and_the_page_the_api_and_the_audit_show_them(client, owner, api):
    host = make_host()
    client.force_login(owner)

    response = client.post(f"/hosts/{host.pk}/edit/", _host_form(host, run_log_cap_mib="8", run_trace_cap_mib="0"))

    assert response.status_code == 302, response.content.decode()
    host.refresh_from_db()
    assert (host.run_log_cap, host.run_trace_cap) == (8 * MIB, 0)
    shown = api(owner, "get", f"/api/hosts/{host.pk}").json()
    assert (shown["run_log_cap_mib"], shown["run_log_cap_bytes"]) == (8, 8 * MIB)
    assert (shown["run_trace_cap_mib"], shown["run_trace_cap_bytes"]) == (0, 0)
    page = client.get(f"/hosts/{host.pk}/").content.decode()
    assert "at most 8.0\xa0MB" in page and "at most 0\xa0bytes" in page
    (edit,) = AuditEvent.objects.filter(action=AuditEvent.Action.HOST_EDIT, target_id=host.pk)
    assert edit.detail["changes"] == {"run_log_cap_mib": [None, 8], "run_trace_cap_mib": [None, 0]}

    client.post(f"/hosts/{host.pk}/edit/", _host_form(host, run_log_cap_mib="", run_trace_cap_mib=""))

    host.refresh_from_db()
    assert host.run_log_cap == django_settings.SPECDASH_RUN_LOG_CAP_MIB * MIB == 64 * MIB
    assert host.run_trace_cap == django_settings.SPECDASH_RUN_TRACE_CAP_MIB * MIB == 256 * MIB


@pytest.mark.parametrize(
    ("field", "value"),
    [("run_log_cap_mib", 0), ("run_log_cap_mib", 16_385), ("run_log_cap_mib", -1), ("run_trace_cap_mib", 10**30)],
)
def test_a_cap_out_of_bounds_is_refused_naming_the_field(client, owner, api, settings, field, value):
    settings.SPECDASH_HOST_ALLOWLIST = ("10.0.0.0/24",)
    host = make_host()
    client.force_login(owner)
    body = {"name": "gpu-1", "address": "10.0.0.5", "username": "ml", field: value}

    page = client.post(f"/hosts/{host.pk}/edit/", _host_form(host, **{field: str(value)}))
    created = api(owner, "post", "/api/hosts", body)

    assert page.status_code == 400 and field in page.context["form"].errors
    assert created.status_code == 422 and field in created.json()["errors"], created.content
    assert not Host.objects.filter(name="gpu-1").exists()
    host.refresh_from_db()
    assert getattr(host, field) is None


def test_a_member_cannot_set_a_hosts_caps(client, member, api):
    host = make_host()
    client.force_login(member)

    edited = client.post(f"/hosts/{host.pk}/edit/", _host_form(host, run_log_cap_mib="16384"))

    assert edited.status_code == 403
    host.refresh_from_db()
    assert host.run_log_cap_mib is None


def test_the_run_page_of_a_cut_log_links_the_whole_log_on_the_host(client, viewer):
    run = make_run(state=Run.State.SUCCEEDED, log_path="/work/runs/run-1.log", log_lines=9, log_cut_line=9)
    client.force_login(viewer)

    page = client.get(f"/runs/{run.pk}/").content.decode()

    assert f'href="/runs/{run.pk}/host-log.txt"' in page and "cut at line 9" in page


def test_the_whole_log_on_the_host_is_for_a_cut_log_and_a_viewer_of_the_run(client, viewer, outsider, sent):
    cut = make_run(state=Run.State.SUCCEEDED, log_path="/work/runs/run-1.log", log_lines=9, log_cut_line=9)
    whole = make_run(experiment=cut.experiment, state=Run.State.SUCCEEDED, log_path="/work/runs/run-2.log")

    anonymous = client.get(f"/runs/{cut.pk}/host-log.txt")
    client.force_login(outsider)
    forbidden = client.get(f"/runs/{cut.pk}/host-log.txt")
    client.force_login(viewer)
    not_cut = client.get(f"/runs/{whole.pk}/host-log.txt")
    page = client.get(f"/runs/{whole.pk}/").content.decode()

    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/")
    assert forbidden.status_code == 403
    assert not_cut.status_code == 302 and not_cut["Location"] == f"/runs/{whole.pk}/log.txt"  # its whole log
    assert "host-log.txt" not in page
    assert sent == []  # none of them asked a worker


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_a_viewer_downloads_a_cut_runs_whole_log_from_its_host_through_a_worker(
    client, viewer, sim_host, celery_worker_process, tmp_path
):
    log = tmp_path / "run.log"
    # Three slices' worth (the last one partial), with bytes no text decoding would keep as they are.
    content = bytes(range(256)) * (((2 * 8 + 3) * MIB) // 256) + b"\xff\xfe the end"
    log.write_bytes(content)
    experiment = make_experiment(host=sim_host, with_runs=False)
    run = make_run(experiment=experiment, state=Run.State.SUCCEEDED, log_path=str(log), log_lines=3, log_cut_line=3)
    client.force_login(viewer)

    response = client.get(f"/runs/{run.pk}/host-log.txt")
    meanwhile = client.get(f"/runs/{run.pk}/host-log.txt")  # one download at a time per user

    assert meanwhile.status_code == 429 and b"already running for you" in meanwhile.content
    assert response.status_code == 200 and response["Content-Disposition"].endswith(f'"run-{run.pk}-host.log"')
    assert b"".join(response.streaming_content) == content
    response.close()
    again = client.get(f"/runs/{run.pk}/host-log.txt")  # the slot is given back at the end
    assert again.status_code == 200
    again.close()
