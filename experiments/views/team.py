"""The team: who holds which role and what quota, and the whole audit log (admins). Admins run the team here, not
in the admin site: they add a teammate (who gets a set-password link), deactivate and reactivate one, and set
each one's role and quotas. A refused change answers 4xx with the Team page and the reason on top."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth import views as auth_views
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse_lazy
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from .. import roles
from ..actions.audit import Actor
from ..actions.quotas import do_set_member_quota
from ..actions.users import (
    TeamRefused,
    do_add_teammate,
    do_issue_password_link,
    do_set_active,
    do_set_password,
    do_set_role,
    email_configured,
    link_days,
    set_password_path,
)
from ..forms import MemberQuotaForm, RoleForm, TeammateForm, plain_errors
from ..models import AuditEvent, MemberQuota
from .access import requires
from .paging import PageLinks

AUDIT_PAGE = 100


@requires("auth.view_user")
def user_list(request: HttpRequest) -> HttpResponse:
    return _team_page(request)


@never_cache  # the answer holds a set-password link
@requires("auth.add_user")
@require_POST
def add_teammate(request: HttpRequest) -> HttpResponse:
    form = TeammateForm(request.POST)
    if not form.is_valid():
        return _team_page(request, add_form=form, status=400)
    data = form.cleaned_data
    try:
        user, emailed = do_add_teammate(data["username"], data["email"], data["role"], Actor.of(request))
    except TeamRefused as refusal:  # the same name, added by another admin since the form was checked
        return _refused(request, str(refusal))
    return _link_page(request, user, emailed=emailed, new=True)


@never_cache
@requires("auth.change_user")
@require_POST
def issue_password_link(request: HttpRequest, user_id: int) -> HttpResponse:
    user = get_object_or_404(get_user_model(), pk=user_id)
    try:
        emailed = do_issue_password_link(user, Actor.of(request))
    except TeamRefused as refusal:
        return _refused(request, str(refusal))
    return _link_page(request, user, emailed=emailed, new=False)


@requires("auth.change_user")
@require_POST
def deactivate_user(request: HttpRequest, user_id: int) -> HttpResponse:
    return _set_active(request, user_id, active=False)


@requires("auth.change_user")
@require_POST
def reactivate_user(request: HttpRequest, user_id: int) -> HttpResponse:
    return _set_active(request, user_id, active=True)


@requires("experiments.change_memberquota")
@require_POST
def set_quota(request: HttpRequest, user_id: int) -> HttpResponse:
    user = get_object_or_404(get_user_model(), pk=user_id)
    form = MemberQuotaForm(request.POST)
    if not form.is_valid():
        problems = "; ".join(f"{_label(form, name)}: {' '.join(errors)}" for name, errors in plain_errors(form).items())
        return _refused(request, f"Quota of {user.get_username()} not saved: {problems}", status=400)
    do_set_member_quota(user, Actor.of(request), **form.cleaned_data)
    messages.success(request, f"Quota of {user.get_username()} saved.")
    return redirect("user_list")


@requires("auth.change_user")
@require_POST
def set_role(request: HttpRequest, user_id: int) -> HttpResponse:
    user = get_object_or_404(get_user_model(), pk=user_id)
    form = RoleForm(request.POST)
    if not form.is_valid():
        problems = " ".join(plain_errors(form)["role"])
        return _refused(request, f"Role of {user.get_username()} not set: {problems}", status=400)
    role = form.cleaned_data["role"]
    try:
        do_set_role(user, role, Actor.of(request))
    except TeamRefused as refusal:
        return _refused(request, str(refusal))
    messages.success(request, f"{user.get_username()} is now {role or 'without a role'}.")
    return redirect("user_list")


class _SetPasswordView(auth_views.PasswordResetConfirmView):
    """Django's own check of a set-password link (it also moves the token out of the address before the form is
    shown, so no Referer carries it); a deactivated teammate's links do not work, and the password set is
    audited."""

    template_name = "registration/set_password.html"
    success_url = reverse_lazy("login")

    def get_user(self, uidb64: str):
        user = super().get_user(uidb64)
        return user if user is not None and user.is_active else None

    def form_valid(self, form):
        # What Django's form_valid does (form.save(), then forget the token), with the change audited.
        actor = Actor(form.user, self.request.META.get("REMOTE_ADDR") or None)
        do_set_password(form.user, form.cleaned_data["new_password1"], actor)
        del self.request.session[auth_views.INTERNAL_RESET_SESSION_TOKEN]
        messages.success(self.request, f"Your password is set, {form.user.get_username()}: log in with it.")
        return HttpResponseRedirect(self.get_success_url())


set_password = _SetPasswordView.as_view()


def _set_active(request: HttpRequest, user_id: int, *, active: bool) -> HttpResponse:
    user = get_object_or_404(get_user_model(), pk=user_id)
    try:
        do_set_active(user, active, Actor.of(request))
    except TeamRefused as refusal:
        return _refused(request, str(refusal))
    name = user.get_username()
    messages.success(request, f"{name} is active again." if active else f"{name} is deactivated: they cannot log in.")
    return redirect("user_list")


def _refused(request: HttpRequest, reason: str, status: int = 409) -> HttpResponse:
    """The Team page with the reason on top, answering 4xx (409: the team's state refuses it; 400: bad input)."""
    messages.error(request, reason)
    return _team_page(request, status=status)


def _label(form, name: str) -> str:
    return str(form.fields[name].label) if name in form.fields else name


def _team_page(request: HttpRequest, add_form: TeammateForm | None = None, status: int = 200) -> HttpResponse:
    users = get_user_model().objects.order_by("username").prefetch_related("groups")
    quotas = {q.user_id: q for q in MemberQuota.objects.all()}
    rows = [
        (user, roles.highest(group.name for group in user.groups.all()), quotas.get(user.pk) or MemberQuota())
        for user in users
    ]
    context = {
        "rows": rows,
        "roles": roles.ORDER,
        "add_form": add_form or TeammateForm(),
        "default_launches": settings.SPECDASH_QUOTA_LAUNCHES_PER_USER,
        "default_gpu_hours": settings.SPECDASH_QUOTA_GPU_HOURS_PER_USER_PER_DAY,
    }
    return render(request, "experiments/user_list.html", context, status=status)


def _link_page(request: HttpRequest, user, *, emailed: bool, new: bool) -> HttpResponse:
    """The link, shown this once to the admin who made it (never stored: a new one can be made at any time)."""
    context = {
        "teammate": user,
        "role": roles.highest(user.groups.values_list("name", flat=True)),
        "link": request.build_absolute_uri(set_password_path(user)),
        "days": link_days(),
        "emailed": emailed,
        "email_configured": email_configured(),
        "new": new,
    }
    return render(request, "experiments/team_link.html", context, status=201 if new else 200)


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
