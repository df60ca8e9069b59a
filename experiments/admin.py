"""The Django admin: users and their roles and quotas (admins manage them here or on the Team page), and a
read-only view of the domain. Hosts (their quotas too), keys and experiments change only through the pages and the
API, which validate, audit and enqueue; an admin-site edit would do none of that."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin

from . import roles
from .actions.audit import Actor, record_event
from .actions.quotas import do_set_member_quota
from .models import (
    ApiToken,
    AuditEvent,
    BenchmarkProfile,
    Candidate,
    Experiment,
    Host,
    LogChunk,
    Measurement,
    MemberQuota,
    Run,
    ServerConfig,
    SshKey,
)
from .rules import launch_fields


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Host)
class HostAdmin(ReadOnlyAdmin):
    list_display = [
        "name",
        "address",
        "port",
        "username",
        "ssh_key",
        "is_dirty",
        "active_run",
        "quota_launches_queued",
        "quota_gpu_hours_per_day",
    ]


@admin.register(SshKey)
class SshKeyAdmin(ReadOnlyAdmin):
    list_display = ["name", "file_name", "fingerprint", "created_by", "created_at"]


@admin.register(ServerConfig)
class ServerConfigAdmin(ReadOnlyAdmin):
    # The engine, its method and its numbers (the launch fields' rows that are numbers), then who it is.
    list_display = [
        "name",
        "engine",
        "speculative_algorithm",
        *(row.name for row in launch_fields.all_fields() if row.column and row.kind == launch_fields.INT),
        "content_hash",
        "created_at",
    ]
    search_fields = ["name", "model_path", "content_hash"]


@admin.register(BenchmarkProfile)
class BenchmarkProfileAdmin(ReadOnlyAdmin):
    list_display = ["name", "concurrency", "num_prompts", "input_len", "output_len", "passes", "launches"]


class CandidateInline(admin.TabularInline):
    model = Candidate
    extra = 0


@admin.register(Experiment)
class ExperimentAdmin(ReadOnlyAdmin):
    list_display = ["name", "host", "baseline", "profile", "created_by", "created_at"]
    inlines = [CandidateInline]


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ["id", "experiment", "config", "host", "state", "failure_kind", "heartbeat_at"]
    list_filter = ["state", "failure_kind", "host"]


@admin.register(Measurement)
class MeasurementAdmin(ReadOnlyAdmin):
    list_display = ["run", "pass_index", "concurrency", "output_throughput", "accept_length", "failed"]


@admin.register(LogChunk)
class LogChunkAdmin(ReadOnlyAdmin):
    list_display = ["run", "first_line", "line_count"]


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    list_display = ["user", "name", "created_at", "last_used_at"]
    exclude = ["digest"]


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["at", "actor_name", "action", "target_type", "target_label", "via", "ip", "token_name"]
    list_filter = ["action", "via"]
    search_fields = ["actor_name", "target_label"]


@admin.register(MemberQuota)
class MemberQuotaAdmin(admin.ModelAdmin):
    """A member's own quotas (blank: the default), saved through the action so the audit log has the change; a row
    is not deleted here (blank both values instead), so every change stays on record."""

    list_display = ["user", "launches_queued", "gpu_hours_per_day", "updated_at"]
    fields = ["user", *MemberQuota.FIELDS]
    raw_id_fields = ["user"]

    def get_readonly_fields(self, request, obj=None):
        return ["user"] if obj is not None else []

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def save_model(self, request, obj, form, change) -> None:
        values = {field: form.cleaned_data.get(field) for field in MemberQuota.FIELDS}
        saved = do_set_member_quota(obj.user, Actor.of(request), **values)
        obj.pk = saved.pk


User = get_user_model()
admin.site.unregister(User)


@admin.register(User)
class AuditedUserAdmin(UserAdmin):
    """Group membership is the role: a change of it made here is recorded like one made on the Team page."""

    def save_related(self, request, form, formsets, change) -> None:
        user = form.instance
        before = roles.highest(user.groups.values_list("name", flat=True)) if change else None
        super().save_related(request, form, formsets, change)
        after = roles.highest(user.groups.values_list("name", flat=True))
        if before != after:
            record_event(Actor.of(request), AuditEvent.Action.ROLES, user, before=before, after=after)
