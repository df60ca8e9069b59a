"""The hosts page: register a GPU host, test the connection (which pins its key on first contact), clean it."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from .. import worker_calls
from ..actions.hosts import do_mark_host_clean
from ..forms import HostForm
from ..models import Host


@login_required
def host_list(request: HttpRequest) -> HttpResponse:
    hosts = Host.objects.select_related("active_run")
    return render(request, "experiments/host_list.html", {"hosts": hosts})


@login_required
def host_new(request: HttpRequest) -> HttpResponse:
    form = HostForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        host = form.save()
        messages.success(request, f"Host {host.name} registered. Test the connection to pin its SSH host key.")
        return redirect("host_list")
    status = 400 if request.method == "POST" else 200
    return render(request, "experiments/host_new.html", {"form": form}, status=status)


@login_required
@require_POST
def test_host(request: HttpRequest, host_id: int) -> HttpResponse:
    host = get_object_or_404(Host, pk=host_id)
    was_pinned = host.is_pinned
    try:
        worker_calls.test_host_connection(host)
    except worker_calls.HostProbeFailed as exc:
        messages.error(request, f"Host {host.name}: {exc}")
        return redirect("host_list")
    gpus = f"{host.gpu_count} × {host.gpu_inventory[0]['name']}" if host.gpu_inventory else "no GPU"
    key = host.host_key.split()[0] if host.host_key else "no"
    pinned = f"{key} host key pinned" if not was_pinned else f"{key} host key verified"
    messages.success(request, f"Connected to {host.name}: {gpus}; {pinned}.")
    return redirect("host_list")


@login_required
@require_POST
def clean_host(request: HttpRequest, host_id: int) -> HttpResponse:
    host = get_object_or_404(Host, pk=host_id)
    do_mark_host_clean(host)
    messages.success(request, f"Host {host.name} marked clean; queued runs may start again.")
    return redirect("host_list")
