"""The GPU hosts runs are launched on, each with the lock that keeps it to one run at a time."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class Host(models.Model):
    name = models.SlugField(max_length=64, unique=True)
    address = models.CharField(max_length=255)
    port = models.PositiveIntegerField(default=22)
    username = models.CharField(max_length=64)
    key_name = models.CharField(
        max_length=128,
        blank=True,
        help_text="File name under SPECDASH_SSH_KEY_DIR; blank uses the SSH agent.",
    )
    host_key = models.TextField(blank=True, help_text="Pinned host public key (OpenSSH format).")
    gpu_inventory = models.JSONField(default=list, blank=True)
    work_dir = models.CharField(max_length=512, default="specdash-work", help_text="Relative to the login's home.")
    models_root = models.CharField(max_length=512, blank=True, help_text="Directory whose subdirectories are models.")
    shell_setup = models.TextField(blank=True, help_text="Shell lines run before every command, e.g. activate a venv.")
    launcher = models.CharField(max_length=255, default="python3 -m sglang.launch_server")
    python = models.CharField(max_length=255, default="python3", help_text="Runs the shipped benchmark client.")
    server_port = models.PositiveIntegerField(default=30000)
    # Environment variable prefixes a config may set on this host beyond the built-in allowlist (admins only).
    extra_env_prefixes = models.JSONField(default=list, blank=True)
    is_dirty = models.BooleanField(default=False)
    dirty_reason = models.TextField(blank=True)
    # The host lock: set with a conditional UPDATE by the worker that claims a run, cleared after teardown.
    active_run = models.OneToOneField(
        "Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", editable=False
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def is_pinned(self) -> bool:
        return bool(self.host_key.strip())

    @property
    def gpu_count(self) -> int:
        return len(self.gpu_inventory)
