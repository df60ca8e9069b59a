"""The audit log: who changed what, when, and from where (IP address, API token)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class AuditEventQuerySet(models.QuerySet["AuditEvent"]):
    def about(self, obj: models.Model) -> AuditEventQuerySet:
        return self.filter(target_type=obj._meta.model_name, target_id=obj.pk)

    def about_experiment(self, experiment_id: int, run_ids: list[int]) -> AuditEventQuerySet:
        """What people did to an experiment and to its runs (submit, re-run, cancel)."""
        return self.filter(
            models.Q(target_type="experiment", target_id=experiment_id)
            | models.Q(target_type="run", target_id__in=run_ids)
        )


class AuditEvent(models.Model):
    class Action(models.TextChoices):
        SUBMIT = "experiment.submit"
        RERUN = "experiment.rerun"
        IMPORT = "experiment.import"  # runs imported from result files made outside specdash
        SCHEDULE = "experiment.schedule"
        NOTES = "experiment.notes"  # notes or tags edited
        RUN_NOTES = "run.notes"
        CANCEL = "run.cancel"
        REMEDY = "run.remedy"  # a failed run re-run with a remedy, as a new config version
        PIN = "baseline.pin"
        TRIAGE = "flag.triage"
        SUSPECT = "history.suspect"  # a suspected change queued a confirming run
        DECIDE = "history.decide"  # a suspicion confirmed or dismissed
        FLAG = "flag.raise"
        CONFIG_CREATE = "config.create"
        PROFILE_CREATE = "profile.create"
        PROMPT_SET_CREATE = "promptset.create"
        HOST_CREATE = "host.create"
        HOST_EDIT = "host.edit"
        HOST_TEST = "host.test"
        HOST_CLEAN = "host.clean"
        HOST_MODELS = "host.models"  # a worker asked to list the host's models again
        HOST_EXPORT = "host.export"  # a draft checkpoint exported for serving by the host's specforge_launcher
        KEY_CREATE = "key.create"
        KEY_EDIT = "key.edit"
        KEY_DELETE = "key.delete"
        ROLES = "user.roles"
        QUOTA = "user.quota"  # a member's quota set by an admin (a host's is part of its edit)
        USER_ADD = "user.add"  # a teammate added by an admin on the Team page
        USER_DEACTIVATE = "user.deactivate"
        USER_REACTIVATE = "user.reactivate"
        PASSWORD_LINK = "user.password_link"  # a set-password link made for a teammate (never the link itself)
        PASSWORD_SET = "user.password_set"  # a teammate set their password through such a link
        TOKEN_CREATE = "token.create"
        TOKEN_REVOKE = "token.revoke"
        SUBSCRIBE = "notifications.subscribe"
        UNSUBSCRIBE = "notifications.unsubscribe"
        STUDY_START = "study.start"
        STUDY_CANCEL = "study.cancel"
        HEADROOM_START = "headroom.start"
        SCHEDULE_BUILD = "schedule.build"  # an adaptive schedule built and its verification queued
        LOGIN = "user.login"
        LOGIN_FAILED = "user.login_failed"
        LOCKOUT = "user.lockout"  # a login refused because its username and address are locked out

    at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    actor_name = models.CharField(max_length=150, blank=True, help_text="Kept when the user is deleted.")
    ip = models.GenericIPAddressField(null=True, blank=True)
    token = models.ForeignKey("ApiToken", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    token_name = models.CharField(max_length=100, blank=True)
    via = models.CharField(max_length=16, default="web", help_text="web, api, command, schedule or analysis")
    action = models.CharField(max_length=32, choices=Action.choices)
    target_type = models.CharField(max_length=32)
    target_id = models.PositiveBigIntegerField(null=True)
    target_label = models.CharField(max_length=255, blank=True)
    detail = models.JSONField(default=dict, blank=True)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        ordering = ["-at", "-id"]
        permissions = [("view_audit_log", "Can view the whole audit log")]
        indexes = [models.Index(fields=["target_type", "target_id"], name="audit_target")]

    def __str__(self) -> str:
        return f"{self.actor_name or 'system'} {self.action} {self.target_type} {self.target_id}"
