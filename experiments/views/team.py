"""The team: who holds which role and what quota (admins change both here), and the whole audit log (admins)."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from .. import roles
from ..actions.audit import Actor
from ..actions.quotas import do_set_member_quota
from ..actions.users import do_set_role
from ..forms import MemberQuotaForm, plain_errors
from ..models import AuditEvent, MemberQuota
from .access import requires
from .paging import PageLinks

AUDIT_PAGE = 100


@requires("auth.view_user")
def user_list(request: HttpRequest) -> HttpResponse:
    users = get_user_model().objects.order_by("username").prefetch_related("groups")
    quotas = {q.user_id: q for q in MemberQuota.objects.all()}
    rows = [
        (user, roles.highest(group.name for group in user.groups.all()), quotas.get(user.pk) or MemberQuota())
        for user in users
    ]
    context = {
        "rows": rows,
        "roles": roles.ORDER,
        "default_launches": settings.SPECDASH_QUOTA_LAUNCHES_PER_USER,
        "default_gpu_hours": settings.SPECDASH_QUOTA_GPU_HOURS_PER_USER_PER_DAY,
    }
    return render(request, "experiments/user_list.html", context)


@requires("experiments.change_memberquota")
@require_POST
def set_quota(request: HttpRequest, user_id: int) -> HttpResponse:
    user = get_object_or_404(get_user_model(), pk=user_id)
    form = MemberQuotaForm(request.POST)
    if not form.is_valid():
        problems = "; ".join(f"{name}: {' '.join(errors)}" for name, errors in plain_errors(form).items())
        messages.error(request, f"Quota of {user.get_username()} not saved: {problems}")
        return redirect("user_list")
    do_set_member_quota(user, Actor.of(request), **form.cleaned_data)
    messages.success(request, f"Quota of {user.get_username()} saved.")
    return redirect("user_list")


@requires("auth.change_user")
@require_POST
def set_role(request: HttpRequest, user_id: int) -> HttpResponse:
    user = get_object_or_404(get_user_model(), pk=user_id)
    role = request.POST.get("role") or None
    if role is not None and role not in roles.ORDER:
        messages.error(request, f"Unknown role {role!r}.")
        return redirect("user_list")
    if user.pk == request.user.pk and role != roles.ADMIN:
        raise PermissionDenied("An admin cannot take their own admin role away (ask another admin).")
    do_set_role(user, role, Actor.of(request))
    messages.success(request, f"{user.get_username()} is now {role or 'without a role'}.")
    return redirect("user_list")


@requires("experiments.view_audit_log")
def audit_log(request: HttpRequest) -> HttpResponse:
    events = AuditEvent.objects.select_related("actor")
    action = request.GET.get("action", "")
    if action in AuditEvent.Action.values:
        events = events.filter(action=action)
    page = Paginator(events, AUDIT_PAGE).get_page(request.GET.get("page"))
    context = {
        "page": page,
        "action": action,
        "actions": AuditEvent.Action.choices,
        "page_links": PageLinks({"action": action} if action in AuditEvent.Action.values else {}),
    }
    return render(request, "experiments/audit_log.html", context)
