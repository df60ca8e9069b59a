"""Who may open a page: a login, then the role's permission (roles.py); 403 for a user without it."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib.auth.decorators import login_required, permission_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django.utils.http import url_has_allowed_host_and_scheme

from ..models import Experiment


def requires(perm: str) -> Callable:
    """Anonymous users go to the login page; logged-in users without `perm` get 403."""

    def decorator(view: Callable) -> Callable:
        return login_required(permission_required(perm, raise_exception=True)(view))

    return decorator


def require_manage(request: HttpRequest, experiment: Experiment) -> None:
    """Cancel and re-run: the experiment's owner (a member) or a maintainer."""
    if not experiment.can_be_managed_by(request.user):
        raise PermissionDenied("Only the experiment's owner or a maintainer may do this.")


def safe_next(request: HttpRequest, fallback: str) -> str:
    """The `next` address a form posted, if it stays on this site (as the login view checks it), else fallback."""
    target = request.POST.get("next") or ""
    allowed = url_has_allowed_host_and_scheme(target, {request.get_host()}, require_https=request.is_secure())
    return target if target and allowed else fallback
