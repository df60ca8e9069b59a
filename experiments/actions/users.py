"""A user's role on the team (see roles.py): one group of the four, or none."""

from __future__ import annotations

from django.contrib.auth.models import Group
from django.db import transaction

from .. import roles
from ..models import AuditEvent
from .audit import Actor, record_event


@transaction.atomic
def do_set_role(user, role: str | None, actor: Actor) -> None:
    """Make `role` the user's only role (None: no role at all). Admins get into the admin site to manage users."""
    if role is not None and role not in roles.ORDER:
        raise ValueError(f"unknown role {role!r}; one of {', '.join(roles.ORDER)}")
    before = roles.highest(user.groups.values_list("name", flat=True))
    user.groups.remove(*Group.objects.filter(name__in=roles.ORDER))
    if role is not None:
        user.groups.add(roles.group_of(role))
    user.is_staff = role == roles.ADMIN or user.is_superuser
    user.save(update_fields=["is_staff"])
    if before != role:
        record_event(actor, AuditEvent.Action.ROLES, user, before=before, after=role)
