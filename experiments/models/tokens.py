"""API tokens: stored hashed, shown once."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone


class ApiTokenQuerySet(models.QuerySet["ApiToken"]):
    def matching(self, raw_token: str) -> ApiTokenQuerySet:
        return self.filter(digest=ApiToken.digest_of(raw_token))


class ApiToken(models.Model):
    """A bearer token for the JSON API; only its digest is stored, the token is shown once."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    name = models.CharField(max_length=100, default="api")
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)

    objects = ApiTokenQuerySet.as_manager()

    def __str__(self) -> str:
        return f"{self.name} ({self.user_id})"

    @staticmethod
    def digest_of(raw_token: str) -> str:
        return hashlib.sha256(raw_token.encode()).hexdigest()

    @classmethod
    def issue(cls, user, name: str = "api") -> tuple[ApiToken, str]:
        raw = "sd_" + secrets.token_urlsafe(32)
        return cls.objects.create(user=user, name=name, digest=cls.digest_of(raw)), raw

    def touch(self) -> None:
        # At most one write a minute per token: the API is polled by scripts.
        now = timezone.now()
        if self.last_used_at is None or now - self.last_used_at > timedelta(minutes=1):
            self.last_used_at = now
            self.save(update_fields=["last_used_at"])
