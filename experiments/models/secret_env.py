"""The model field of an environment that may hold secrets (a config's env, a host's default env): stored with its
values, read back with every secret a `rules.secrets.SecretValue`, so no reader can show one by mistake. Every
other copy of an environment (a study's base, a run's recorded launch env) is stored as shown, masks and all."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import models
from django.db.models.query_utils import DeferredAttribute

from experiments.rules import secrets


class _HidingAttribute(DeferredAttribute):
    """Whatever is assigned (a form's dict, a copy of another config's env, a row from the database) is held with
    its secrets hidden, so an instance never holds a secret as plain text, saved or not."""

    def __set__(self, instance: models.Model, value: Any) -> None:
        instance.__dict__[self.field.attname] = self.field.hide(value)  # type: ignore[attr-defined]


class SecretEnvField(models.JSONField):
    """An environment: NAME -> value."""

    descriptor_class = _HidingAttribute

    def hide(self, value: Any) -> Any:
        return secrets.hidden(value) if isinstance(value, Mapping) else value

    def reveal(self, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        env = secrets.revealed(value)
        masked = [name for name, text in env.items() if secrets.is_secret_name(name) and text == secrets.MASK]
        if masked:
            # A copy made through str() holds the mask's text, not the secret: storing it would launch "(hidden)"
            # as the token. Loud here rather than a failed launch later.
            raise ValueError(f"{', '.join(masked)} would be stored as {secrets.MASK!r}, not its value")
        return env

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        # `.values("env")` reads bypass the attribute: hide here as well.
        return self.hide(super().from_db_value(value, expression, connection))

    def get_prep_value(self, value: Any) -> Any:
        return super().get_prep_value(self.reveal(value))

    def value_to_string(self, obj: models.Model) -> Any:
        # dumpdata (an admin's backup) keeps the values; a backup of masks would lose them.
        return self.reveal(self.value_from_object(obj))
