"""The four roles of a team sharing GPU hosts, as Django groups of model permissions (no home-made auth).

Each role holds the one before it:
- viewer: reads everything (pages, API, live logs) and has API tokens of their own;
- member: submits experiments, cancels and re-runs their own, comments on and triages flags;
- maintainer: cancels and re-runs anyone's work, pins baselines, marks hosts clean;
- admin: registers and edits hosts and SSH keys (everything that runs on a host), manages users and sets quotas.
A user in no group (an outsider) can log in and see nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

VIEWER, MEMBER, MAINTAINER, ADMIN = "viewer", "member", "maintainer", "admin"
ORDER = (VIEWER, MEMBER, MAINTAINER, ADMIN)

_VIEWER = (
    "experiments.view_host",
    "experiments.view_serverconfig",
    "experiments.view_benchmarkprofile",
    "experiments.view_promptset",
    "experiments.view_experiment",
    "experiments.view_run",
    "experiments.view_measurement",
    "experiments.view_logchunk",
    "experiments.view_flag",
    "experiments.view_flagcomment",
    "experiments.view_pinnedbaseline",
    "experiments.view_auditevent",
    "experiments.add_apitoken",
    "experiments.add_subscription",  # their own notifications
)
_MEMBER = (
    "experiments.add_experiment",
    "experiments.change_experiment",  # on their own: cancel, re-run
    "experiments.add_serverconfig",
    "experiments.add_benchmarkprofile",
    "experiments.add_promptset",
    "experiments.add_flagcomment",
    "experiments.change_flag",  # triage
)
_MAINTAINER = (
    "experiments.manage_any_experiment",
    "experiments.add_pinnedbaseline",
    "experiments.change_pinnedbaseline",
    "experiments.mark_host_clean",
)
_ADMIN = (
    "experiments.add_host",
    "experiments.change_host",
    "experiments.delete_host",
    "experiments.view_sshkey",
    "experiments.add_sshkey",
    "experiments.change_sshkey",
    "experiments.delete_sshkey",
    "experiments.view_audit_log",
    "experiments.manage_team_subscriptions",
    "experiments.view_memberquota",
    "experiments.add_memberquota",
    "experiments.change_memberquota",
    "auth.view_user",
    "auth.add_user",
    "auth.change_user",
    "auth.view_group",
)

PERMISSIONS: dict[str, tuple[str, ...]] = {
    VIEWER: _VIEWER,
    MEMBER: _VIEWER + _MEMBER,
    MAINTAINER: _VIEWER + _MEMBER + _MAINTAINER,
    ADMIN: _VIEWER + _MEMBER + _MAINTAINER + _ADMIN,
}


def sync_roles_in_migration(apps, schema_editor) -> None:
    """A migration's step that makes the groups hold their permissions, as far as the models exist by then."""
    from django.contrib.auth.management import create_permissions

    # Permissions are normally created after all migrations ran; the groups need them now.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    sync_role_groups(apps.get_model("auth", "Group"), apps.get_model("auth", "Permission"))


def sync_role_groups(group_model, permission_model) -> None:
    """Make the four groups hold exactly their permissions (a migration calls this with its historical models).
    A permission of a model that a later migration creates does not exist yet: that migration syncs again."""
    # One query for every permission the roles name (this runs after each flush of a test database, too).
    codenames = {name.split(".")[1] for names in PERMISSIONS.values() for name in names}
    existing = {
        f"{p.content_type.app_label}.{p.codename}": p
        for p in permission_model.objects.filter(codename__in=codenames).select_related("content_type")
    }
    for role, names in PERMISSIONS.items():
        group, _ = group_model.objects.get_or_create(name=role)
        group.permissions.set([existing[name] for name in names if name in existing])


def group_of(role: str):
    """The role's group, made again (with the others) where a test database was flushed since the migration."""
    from django.contrib.auth.models import Group, Permission

    group = Group.objects.filter(name=role).first()
    if group is None:
        sync_role_groups(Group, Permission)
        group = Group.objects.get(name=role)
    return group


def highest(group_names: Iterable[str]) -> str | None:
    """The highest role among a user's group names, or None."""
    names = set(group_names)
    held = [role for role in ORDER if role in names]
    return held[-1] if held else None


def role_of(user) -> str | None:
    """The highest role whose permissions the user holds, or None for an outsider (read from the permissions the
    request has cached anyway, so the navigation costs no query)."""
    held = [role for role in ORDER if user.has_perms(PERMISSIONS[role])]
    return held[-1] if held else None
