"""Registering a GPU host."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from ..models import Host
from .values import no_control_chars


class HostForm(forms.ModelForm):
    class Meta:
        model = Host
        fields = [
            "name",
            "address",
            "port",
            "username",
            "key_name",
            "work_dir",
            "models_root",
            "shell_setup",
            "launcher",
            "python",
            "server_port",
        ]

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        for field in ("address", "username", "key_name", "work_dir", "models_root", "launcher", "python"):
            value = data.get(field)
            if isinstance(value, str):
                try:
                    no_control_chars(value, field.replace("_", " ").capitalize())
                except ValidationError as exc:
                    self.add_error(field, exc)
        key_name = data.get("key_name") or ""
        if "/" in key_name or key_name.startswith("."):
            self.add_error("key_name", "A file name inside SPECDASH_SSH_KEY_DIR, not a path.")
        for field in ("port", "server_port"):
            if data.get(field) is not None and not 1 <= data[field] <= 65535:
                self.add_error(field, "A TCP port is between 1 and 65535.")
        return data
