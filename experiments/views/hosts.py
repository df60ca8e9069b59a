"""Hosts and SSH keys: everyone with a role sees them; only admins register and edit them (their fields run on
the host), test connections and manage keys; maintainers mark a dirty host clean."""

from __future__ import annotations

from django.contrib import messages
from django.db.models import ProtectedError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from experiments.actions import dispatch
from experiments.reads.queueing import host_queues
from experiments.rules import secrets

from ..actions.audit import Actor
from ..actions.hosts import (
    ExportRefused,
    do_delete_key,
    do_edit_host,
    do_edit_key,
    do_export_draft_checkpoint,
    do_mark_host_clean,
    do_register_host,
    do_register_key,
    do_request_model_listing,
    do_test_host,
)
from ..forms import DraftExportForm, HostForm, SshKeyForm
from ..models import AuditEvent, Host, SshKey
from .access import requires


@requires("experiments.view_host")
def host_list(request: HttpRequest) -> HttpResponse:
    hosts = list(Host.objects.select_related("active_run__config", "ssh_key"))
    queues = host_queues(hosts)
    rows = [(host, queues[host.pk]) for host in hosts]
    return render(request, "experiments/host_list.html", {"rows": rows, "hosts": hosts})


@requires("experiments.view_host")
def host_detail(request: HttpRequest, host_id: int) -> HttpResponse:
    host = get_object_or_404(Host.objects.select_related("ssh_key", "active_run"), pk=host_id)
    events = AuditEvent.objects.about(host).select_related("actor")[:100]
    default_env = secrets.shown(host.default_env or {})
    known = host.known_server_flags()
    context = {
        "host": host,
        "events": events,
        "default_env": default_env,
        "models": host.listed_models(),
        "server_flags": sorted(known) if known is not None else None,
    }
    return render(request, "experiments/host_detail.html", context)


@requires("experiments.add_experiment")
@require_POST
def refresh_host_models(request: HttpRequest, host_id: int) -> HttpResponse:
    host = get_object_or_404(Host, pk=host_id)
    if do_request_model_listing(host, Actor.of(request)):
        messages.success(request, f"A worker is listing the models on {host.name}; reload in a moment to see them.")
    else:
        messages.info(request, f"The models on {host.name} were asked for moments ago; reload in a moment.")
    return redirect("host_detail", host.pk)


@requires("experiments.add_experiment")
def host_draft_checkpoints(request: HttpRequest, host_id: int) -> HttpResponse:
    """The host's draft training directories, read now through a worker (members and up: a question a worker
    answers over SSH, not a stored listing); each checkpoint's step, exports (servable draft paths), latest/best
    and training metrics."""
    host = get_object_or_404(Host.objects.select_related("ssh_key"), pk=host_id)
    directories, error, status = [], "", 200
    if host.draft_training_dirs:
        try:
            directories = dispatch.read_draft_checkpoints(host)
        except dispatch.HostProbeFailed as exc:
            error, status = str(exc), exc.status
    context = {"host": host, "directories": directories, "error": error}
    return render(request, "experiments/host_draft_checkpoints.html", context, status=status)


@requires("experiments.add_experiment")
@require_POST
def export_draft_checkpoint(request: HttpRequest, host_id: int) -> HttpResponse:
    """Export a checkpoint the draft checkpoints page listed for SGLang, where an admin allows it on the host
    (members and up: they pick a listed checkpoint; specdash builds the command)."""
    host = get_object_or_404(Host.objects.select_related("ssh_key"), pk=host_id)
    form = DraftExportForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Not exported: pick a checkpoint from the list.")
        return redirect("host_draft_checkpoints", host.pk)
    run_id, step = form.cleaned_data["run_id"], form.cleaned_data["step"]
    try:
        answer = do_export_draft_checkpoint(host, Actor.of(request), form.cleaned_data["directory"], run_id, step)
    except (ExportRefused, dispatch.HostProbeFailed) as exc:
        messages.error(request, f"{run_id}-step{step} not exported: {exc}")
    else:
        messages.success(request, f"{run_id}-step{step} exported for SGLang to {answer['output_dir']}.")
    return redirect("host_draft_checkpoints", host.pk)


@requires("experiments.add_host")
def host_new(request: HttpRequest) -> HttpResponse:
    form = HostForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        host = do_register_host(form.save_unsaved(), Actor.of(request))
        messages.success(request, f"Host {host.name} registered. Test the connection to pin its SSH host key.")
        return redirect("host_list")
    status = 400 if request.method == "POST" else 200
    return render(request, "experiments/host_form.html", {"form": form, "host": None}, status=status)


@requires("experiments.change_host")
def host_edit(request: HttpRequest, host_id: int) -> HttpResponse:
    host = get_object_or_404(Host, pk=host_id)
    form = HostForm(request.POST or None, instance=host)
    if request.method == "POST" and form.is_valid():
        do_edit_host(form.save_unsaved(), Actor.of(request))
        messages.success(request, f"Host {host.name} saved.")
        return redirect("host_detail", host.pk)
    status = 400 if request.method == "POST" else 200
    return render(request, "experiments/host_form.html", {"form": form, "host": host}, status=status)


@requires("experiments.change_host")
@require_POST
def test_host(request: HttpRequest, host_id: int) -> HttpResponse:
    host = get_object_or_404(Host.objects.select_related("ssh_key"), pk=host_id)
    was_pinned = host.is_pinned
    try:
        do_test_host(host, Actor.of(request))
    except dispatch.HostProbeFailed as exc:
        messages.error(request, f"Host {host.name}: {exc}")
        return redirect("host_list")
    gpus = f"{host.gpu_count} × {host.gpu_inventory[0]['name']}" if host.gpu_inventory else "no GPU"
    key = host.host_key.split()[0] if host.host_key else "no"
    pinned = f"{key} host key pinned" if not was_pinned else f"{key} host key verified"
    messages.success(request, f"Connected to {host.name}: {gpus}; {pinned}.")
    return redirect("host_list")


@requires("experiments.mark_host_clean")
@require_POST
def clean_host(request: HttpRequest, host_id: int) -> HttpResponse:
    host = get_object_or_404(Host, pk=host_id)
    do_mark_host_clean(host, Actor.of(request))
    messages.success(request, f"Host {host.name} marked clean; queued runs may start again.")
    return redirect("host_list")


@requires("experiments.view_sshkey")
def key_list(request: HttpRequest) -> HttpResponse:
    keys = SshKey.objects.prefetch_related("hosts")
    return render(request, "experiments/key_list.html", {"keys": keys, "form": SshKeyForm()})


@requires("experiments.add_sshkey")
@require_POST
def key_new(request: HttpRequest) -> HttpResponse:
    form = SshKeyForm(request.POST)
    if form.is_valid():
        key = do_register_key(form.save(commit=False), Actor.of(request))
        messages.success(request, f"SSH key {key.name} registered.")
        return redirect("key_list")
    keys = SshKey.objects.prefetch_related("hosts")
    return render(request, "experiments/key_list.html", {"keys": keys, "form": form}, status=400)


@requires("experiments.change_sshkey")
def key_edit(request: HttpRequest, key_id: int) -> HttpResponse:
    key = get_object_or_404(SshKey, pk=key_id)
    form = SshKeyForm(request.POST or None, instance=key)
    if request.method == "POST" and form.is_valid():
        do_edit_key(form.save(commit=False), Actor.of(request))
        messages.success(request, f"SSH key {key.name} saved.")
        return redirect("key_list")
    status = 400 if request.method == "POST" else 200
    events = AuditEvent.objects.about(key).select_related("actor")[:100]
    return render(request, "experiments/key_edit.html", {"form": form, "key": key, "events": events}, status=status)


@requires("experiments.delete_sshkey")
@require_POST
def key_delete(request: HttpRequest, key_id: int) -> HttpResponse:
    key = get_object_or_404(SshKey, pk=key_id)
    try:
        do_delete_key(key, Actor.of(request))
    except ProtectedError:
        messages.error(request, f"SSH key {key.name} is used by a host; give the host another key first.")
    else:
        messages.success(request, f"SSH key {key.name} deleted.")
    return redirect("key_list")
