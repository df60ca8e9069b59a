"""The GPU hosts runs are launched on, each with the lock that keeps it to one run at a time, and the SSH keys
that reach them. Both are registered by admins only: every shell-level field of a host runs on it."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone

from experiments.rules import secrets, server_flags

from .secret_env import SecretEnvField

# A file directly inside SPECDASH_SSH_KEY_DIR on the workers: no path, no hidden file, no shell metacharacter.
KEY_FILE_NAME = RegexValidator(
    r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z", "A file name inside SPECDASH_SSH_KEY_DIR (letters, digits, . _ -)."
)


# The largest quotas an admin may set: beyond any team's hosts, yet bounded so a typo is caught.
MAX_QUOTA_LAUNCHES = 100_000
MAX_QUOTA_GPU_HOURS = 10_000_000.0
# What an admin may let one run store (MiB): at least enough for a run's start-up and a few cells' log, at most what
# keeps a run's share of the database a share; 0 traces is allowed (profile here, keep the traces on the host).
RUN_LOG_CAP_MIB_BOUNDS = (1, 16_384)
RUN_TRACE_CAP_MIB_BOUNDS = (0, 16_384)
MIB = 1024 * 1024


class SshKey(models.Model):
    """A private key the workers hold (in SPECDASH_SSH_KEY_DIR), registered by an admin. It reaches only the
    hosts that name it; a worker refuses the file if its public key is not the registered one."""

    name = models.SlugField(max_length=64, unique=True)
    file_name = models.CharField(max_length=128, validators=[KEY_FILE_NAME])
    public_key = models.TextField(
        blank=True, help_text="OpenSSH public key of the file; blank until an admin's connection test records it."
    )
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]
        verbose_name = "SSH key"

    def __str__(self) -> str:
        return self.name

    @property
    def is_verified(self) -> bool:
        return bool(self.public_key.strip())

    @property
    def fingerprint(self) -> str:
        """SHA256 fingerprint as `ssh-keygen -l` prints it, or "" while the public key is unknown."""
        parts = self.public_key.split()
        if len(parts) < 2:
            return ""
        try:
            blob = base64.b64decode(parts[1], validate=True)
        except ValueError:
            return ""
        return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


class HostQuerySet(models.QuerySet["Host"]):
    def waiting_for_a_worker(self) -> HostQuerySet:
        """Hosts with queued runs, none in progress, and healthy: a worker should be driving them."""
        return self.filter(active_run__isnull=True, is_dirty=False, run__state="queued").distinct()


class Host(models.Model):
    # What an admin sets on the host form (besides its key and extra env prefixes); the rest workers write.
    ADMIN_FIELDS = (
        "name",
        "address",
        "port",
        "username",
        "work_dir",
        "models_root",
        "shell_setup",
        "launcher",
        "vllm_launcher",
        "python",
        "server_port",
        "cost_per_gpu_hour",
        "quota_launches_queued",
        "quota_gpu_hours_per_day",
        "run_log_cap_mib",
        "run_trace_cap_mib",
        "draft_training_dirs",
        "specforge_launcher",
    )

    name = models.SlugField(max_length=64, unique=True)
    address = models.CharField(max_length=255)
    port = models.PositiveIntegerField(default=22)
    username = models.CharField(max_length=64)
    ssh_key = models.ForeignKey(
        SshKey, null=True, blank=True, on_delete=models.PROTECT, related_name="hosts", help_text="Blank: the SSH agent."
    )
    host_key = models.TextField(blank=True, help_text="Pinned host public key (OpenSSH format).")
    # The GPUs as nvidia-smi last listed them, memory in use included; the beat re-reads them every
    # SPECDASH_GPU_READ_EVERY seconds so the Hosts page shows who holds a host before anyone queues on it.
    gpu_inventory = models.JSONField(default=list, blank=True)
    gpus_read_at = models.DateTimeField(null=True, blank=True)
    # The host's models as a worker last listed them ({"models_root", "models"}); the submission checks paths and
    # model pairs against it. Empty until a first listing; a member asks for a new one (never a page or a GET).
    model_inventory = models.JSONField(default=dict, blank=True)
    model_inventory_at = models.DateTimeField(null=True, blank=True)
    # The flags the host's SGLang accepts, read from its launcher's --help with the models
    # ({"launcher", "sglang_version", "flags"}, rules/server_flags.py); the submission refuses a config flag the
    # listing lacks. Read again when a run's fingerprint shows another SGLang version.
    server_flags = models.JSONField(default=dict, blank=True)
    server_flags_at = models.DateTimeField(null=True, blank=True)
    work_dir = models.CharField(max_length=512, default="specdash-work", help_text="Relative to the login's home.")
    models_root = models.CharField(max_length=512, blank=True, help_text="Directory whose subdirectories are models.")
    shell_setup = models.TextField(blank=True, help_text="Shell lines run before every command, e.g. activate a venv.")
    launcher = models.CharField(max_length=255, default="python3 -m sglang.launch_server")
    # The words that start vLLM's server on this host (`vllm serve`, the model and flags follow); blank: no vLLM
    # here, and a vLLM config is refused at submission for this host.
    vllm_launcher = models.CharField(
        max_length=255, blank=True, default="", help_text="e.g. /opt/vllm/bin/vllm serve; blank: no vLLM on this host."
    )
    python = models.CharField(max_length=255, default="python3", help_text="Runs the shipped benchmark client.")
    server_port = models.PositiveIntegerField(default=30000)
    # What one GPU-hour of this host costs (any currency: the pages show the number as given); blank: no costs shown.
    cost_per_gpu_hour = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0.0), MaxValueValidator(1_000_000.0)],
        help_text="Price of one GPU-hour, for cost per million tokens (blank: not shown).",
    )
    # What the members together may take of this host (admins are exempt); blank: the SPECDASH_QUOTA_* defaults.
    quota_launches_queued = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MaxValueValidator(MAX_QUOTA_LAUNCHES)],
        help_text="Launches members may have queued or running here at once (blank: SPECDASH_QUOTA_LAUNCHES_PER_HOST).",
    )
    quota_gpu_hours_per_day = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0.0), MaxValueValidator(MAX_QUOTA_GPU_HOURS)],
        help_text="GPU-hours members' launches may take here in 24 h, pending ones at their timeouts' bound "
        "(blank: SPECDASH_QUOTA_GPU_HOURS_PER_HOST_PER_DAY).",
    )
    # What one run here may store (blank: SPECDASH_RUN_LOG_CAP_MIB / SPECDASH_RUN_TRACE_CAP_MIB): past it the log is
    # cut with a marker line and the traces skipped, the rest left on the host (one run cannot fill the database).
    run_log_cap_mib = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(RUN_LOG_CAP_MIB_BOUNDS[0]), MaxValueValidator(RUN_LOG_CAP_MIB_BOUNDS[1])],
        help_text="MiB of server log one run may store; the rest stays on the host (blank: SPECDASH_RUN_LOG_CAP_MIB).",
    )
    run_trace_cap_mib = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(RUN_TRACE_CAP_MIB_BOUNDS[0]), MaxValueValidator(RUN_TRACE_CAP_MIB_BOUNDS[1])],
        help_text="MiB of profiler traces one run may store; the rest stay on the host "
        "(blank: SPECDASH_RUN_TRACE_CAP_MIB).",
    )
    # Directories under the models root where drafts are trained (SpecForge's layout: formats/specforge_runs.py),
    # read live for the host's draft checkpoints page; absolute paths, each held to the model path rules (admins only).
    draft_training_dirs = models.JSONField(default=list, blank=True)
    # The words that run SpecForge's CLI on this host (`specforge`, `/opt/venv/bin/specforge`); set, members may
    # have specdash export a listed checkpoint for SGLang (`... export --to sglang ...`); blank: no export here.
    specforge_launcher = models.CharField(
        max_length=255,
        blank=True,
        default="",
        help_text="e.g. /opt/venv/bin/specforge; blank: specdash never exports draft checkpoints on this host.",
    )
    # Environment variable prefixes a config may set on this host beyond the built-in allowlist (admins only).
    extra_env_prefixes = models.JSONField(default=list, blank=True)
    # SGLang flags a config may set on this host beyond a member's list, from launch_flags.HOST_FLAG_RULES only
    # (admins only).
    extra_flags = models.JSONField(default=list, blank=True)
    # Variables every server on this host gets (the NCCL settings teams keep in their shell profile), held to the
    # same launch policy as a config's env; a config's own value of a name wins (admins only).
    default_env = SecretEnvField(default=dict, blank=True)
    is_dirty = models.BooleanField(default=False)
    dirty_reason = models.TextField(blank=True)
    # The host lock: set with a conditional UPDATE by the worker that claims a run, cleared after teardown.
    active_run = models.OneToOneField(
        "Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", editable=False
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = HostQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        permissions = [("mark_host_clean", "Can mark a dirty host clean")]

    def __str__(self) -> str:
        return self.name

    @property
    def key_name(self) -> str:
        """The registered key's name (the API's `key_name`), "" for the SSH agent."""
        return self.ssh_key.name if self.ssh_key else ""

    @property
    def is_pinned(self) -> bool:
        return bool(self.host_key.strip())

    def listed_models(self) -> list[dict[str, Any]]:
        """The models as last listed, if listed under the models root the host has now (else none)."""
        inventory = self.model_inventory or {}
        if inventory.get("models_root") != self.models_root:
            return []
        return list(inventory.get("models") or [])

    def launcher_for(self, engine: str) -> str:
        """The words that start `engine`'s server here ("": the host has none)."""
        return {"sglang": self.launcher, "vllm": self.vllm_launcher}.get(engine or "sglang", "")

    def known_server_flags(self) -> frozenset[str] | None:
        """The flags its SGLang accepts as last read with the launcher it has now, else None (not known)."""
        return server_flags.known_flags(self.server_flags, self.launcher)

    @property
    def listed_sglang_version(self) -> str | None:
        return (self.server_flags or {}).get("sglang_version") if self.known_server_flags() is not None else None

    @property
    def gpu_count(self) -> int:
        return len(self.gpu_inventory)

    @property
    def launch_quota(self) -> int:
        """Launches members may have queued or running here at once: the admin's value, else the default."""
        if self.quota_launches_queued is not None:
            return self.quota_launches_queued
        return int(settings.SPECDASH_QUOTA_LAUNCHES_PER_HOST)

    @property
    def gpu_hours_quota(self) -> float:
        """GPU-hours members' launches may take here in 24 h: the admin's value, else the default."""
        if self.quota_gpu_hours_per_day is not None:
            return self.quota_gpu_hours_per_day
        return float(settings.SPECDASH_QUOTA_GPU_HOURS_PER_HOST_PER_DAY)

    @property
    def run_log_cap(self) -> int:
        """Bytes of log text one run here may store: the admin's value, else the default."""
        mib = self.run_log_cap_mib if self.run_log_cap_mib is not None else settings.SPECDASH_RUN_LOG_CAP_MIB
        return int(mib) * MIB

    @property
    def run_trace_cap(self) -> int:
        """Bytes of profiler traces one run here may store: the admin's value, else the default."""
        mib = self.run_trace_cap_mib if self.run_trace_cap_mib is not None else settings.SPECDASH_RUN_TRACE_CAP_MIB
        return int(mib) * MIB

    def effective_env(self, config_env: dict[str, str]) -> dict[str, str]:
        """The environment a server of a config with `config_env` gets here: the host's defaults, then the config's
        (secrets stay `SecretValue`s)."""
        return secrets.hidden({**(self.default_env or {}), **(config_env or {})})
