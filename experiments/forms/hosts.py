"""Registering and editing a GPU host, and registering an SSH key (admins only: these fields run on the host)."""

from __future__ import annotations

import re
from typing import Any

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError

from experiments.rules import draft_export, host_allowlist, launch_policy, model_paths, secrets

from ..models import Host, SshKey
from .values import check_env, format_env, no_control_chars, parse_env

# Host names and IP literals only: a value that starts with "-" would be read as an option by ssh tooling.
ADDRESS = re.compile(r"\A[A-Za-z0-9.:\[\]%_-]{1,253}\Z")
USERNAME = re.compile(r"\A[a-z_][a-z0-9_.-]{0,31}\Z", re.IGNORECASE)
ENV_PREFIX = re.compile(r"\A[A-Z][A-Z0-9]*_\Z")
MAX_ENV_PREFIXES = 20
MAX_SHELL_SETUP = 8000
MAX_DRAFT_TRAINING_DIRS = 10
MAX_DRAFT_TRAINING_DIR = 512
# Tab and newline are how shell lines are written; any other control character makes what an admin reads on the
# page differ from what the host's shell runs.
SHELL_SETUP_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


class HostForm(forms.ModelForm):
    # The API's `key_name`: the name of a registered SSH key, never a file.
    key_name = forms.ModelChoiceField(
        queryset=SshKey.objects.all(),
        to_field_name="name",
        required=False,
        label="SSH key",
        help_text="A registered key; blank uses the workers' SSH agent.",
    )
    extra_env_prefixes = forms.CharField(
        required=False,
        label="Extra environment prefixes",
        help_text="Comma-separated, e.g. MYLAB_ (beyond the built-in allowlist).",
    )
    extra_flags = forms.CharField(
        required=False,
        label="Extra server flags",
        help_text="Comma- or space-separated flags a config may set on this host beyond a member's list; only "
        + "; ".join(
            f"{flags.label}: {', '.join(sorted(flags.host_rules))}" for flags in launch_policy.FLAGS_BY_ENGINE.values()
        )
        + " (each with its value rule). Flags that load code, read files, listen or connect out are never allowed.",
    )

    draft_training_dirs = forms.CharField(
        required=False,
        label="Draft training directories",
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="One per line: directories under the models root where drafts are trained (SpecForge's layout: "
        "{run}-step{N}/ checkpoints, -latest/-best links, {run}.best_meta.json). Read, never run.",
    )
    default_env = forms.CharField(
        required=False,
        label="Default environment",
        widget=forms.Textarea(attrs={"rows": 4}),
        help_text="NAME=value lines every server on this host gets (e.g. NCCL_IB_HCA=mlx5); a config's own value "
        "wins. Held to the same allowlist as a config's environment.",
    )

    class Meta:
        model = Host
        fields = list(Host.ADMIN_FIELDS)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk and not self.is_bound:
            self.initial["key_name"] = self.instance.key_name
            self.initial["extra_env_prefixes"] = ", ".join(self.instance.extra_env_prefixes)
            self.initial["extra_flags"] = ", ".join(self.instance.extra_flags)
            self.initial["default_env"] = format_env(self.instance.default_env or {})
            self.initial["draft_training_dirs"] = "\n".join(self.instance.draft_training_dirs or [])

    def clean_address(self) -> str:
        address = self.cleaned_data["address"].strip()
        if not ADDRESS.match(address) or address.startswith("-"):
            raise ValidationError("A host name or IP address.")
        problem = host_allowlist.refusal(address, settings.SPECDASH_HOST_ALLOWLIST)
        if problem:
            raise ValidationError(problem)
        return address

    def clean_username(self) -> str:
        username = self.cleaned_data["username"].strip()
        if not USERNAME.match(username):
            raise ValidationError("A POSIX user name (letters, digits, _ . -; at most 32).")
        return username

    def _list_or_text(self, field: str) -> Any:
        """The API's list as given (a CharField would make "['A_']" of it), or the page's line of text."""
        given = self.data.get(self.add_prefix(field))
        return given if isinstance(given, list) else self.cleaned_data.get(field)

    def clean_extra_env_prefixes(self) -> list[str]:
        raw = self._list_or_text("extra_env_prefixes")
        prefixes = [p.strip() for p in (raw if isinstance(raw, list) else str(raw or "").split(",")) if str(p).strip()]
        if len(prefixes) > MAX_ENV_PREFIXES:
            raise ValidationError(f"At most {MAX_ENV_PREFIXES} prefixes.")
        bad = [p for p in prefixes if not isinstance(p, str) or not ENV_PREFIX.match(p)]
        if bad:
            raise ValidationError(f"{bad[0]!r}: a prefix is upper-case letters and digits ending in _, e.g. MYLAB_.")
        for prefix in prefixes:
            problem = launch_policy.prefix_refusal(prefix)
            if problem:
                raise ValidationError(f"{problem}.")
        return prefixes

    def clean_extra_flags(self) -> list[str]:
        raw = self._list_or_text("extra_flags")
        items = raw if isinstance(raw, list) else re.split(r"[,\s]+", str(raw or ""))
        flags = [str(flag).strip() for flag in items if str(flag).strip()]
        if len(flags) > launch_policy.MAX_HOST_FLAGS:
            raise ValidationError(f"At most {launch_policy.MAX_HOST_FLAGS} flags.")
        problems = [problem for flag in flags if (problem := launch_policy.host_flag_refusal_any_engine(flag))]
        if problems:
            raise ValidationError([f"{problem}." for problem in problems])
        return list(dict.fromkeys(flags))  # in the admin's order, once each

    def clean_draft_training_dirs(self) -> list[str]:
        raw = self._list_or_text("draft_training_dirs")
        items = raw if isinstance(raw, list) else str(raw or "").replace("\r\n", "\n").split("\n")
        paths = [item.strip() if isinstance(item, str) else item for item in items]
        paths = [path for path in paths if path != ""]
        if len(paths) > MAX_DRAFT_TRAINING_DIRS:
            raise ValidationError(f"At most {MAX_DRAFT_TRAINING_DIRS} directories.")
        for path in paths:
            if not isinstance(path, str) or len(path) > MAX_DRAFT_TRAINING_DIR:
                raise ValidationError(f"A directory is a path of at most {MAX_DRAFT_TRAINING_DIR} characters.")
            no_control_chars(path, "A draft training directory")
        return list(dict.fromkeys(paths))

    def clean_shell_setup(self) -> str:
        text = str(self.cleaned_data.get("shell_setup") or "").replace("\r\n", "\n")
        if len(text) > MAX_SHELL_SETUP:
            raise ValidationError(f"At most {MAX_SHELL_SETUP} characters.")
        if SHELL_SETUP_CONTROL.search(text):
            raise ValidationError("Shell lines must not contain control characters other than tabs and newlines.")
        return text

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        # After the prefixes: the host's own extra prefixes apply to its default environment as to its configs'.
        raw_env = self.data.get(self.add_prefix("default_env"), "")
        try:
            prefixes = data.get("extra_env_prefixes") or []
            env = check_env(raw_env, prefixes) if isinstance(raw_env, dict) else parse_env(str(raw_env or ""), prefixes)
        except ValidationError as exc:
            self.add_error("default_env", exc)
        else:
            # The form shows the stored secrets as the mask: submitted unchanged, each keeps its value.
            stored = self.instance.default_env if self.instance.pk else {}
            data["default_env"], missing = secrets.with_stored_secrets(env, stored or {})
            for name in missing:
                self.add_error("default_env", f"{name} shows {secrets.MASK}: type its value (secrets are never shown).")
        for field in ("work_dir", "models_root", "launcher", "vllm_launcher", "specforge_launcher", "python"):
            value = data.get(field)
            if isinstance(value, str):
                try:
                    no_control_chars(value, field.replace("_", " ").capitalize())
                except ValidationError as exc:
                    self.add_error(field, exc)
        for field in ("work_dir", "models_root"):
            if str(data.get(field) or "").startswith("-"):
                self.add_error(field, "A directory, not an option: it must not start with '-'.")
        # Held to the model path rules against the models root this form sets: a training directory is read like a
        # model, and only inside the root the admin chose.
        for path in data.get("draft_training_dirs") or []:
            refusal = model_paths.model_path_refusal("A draft training directory", path, data.get("models_root") or "")
            if refusal:
                self.add_error("draft_training_dirs", refusal)
        for field in ("port", "server_port"):
            if data.get(field) is not None and not 1 <= data[field] <= 65535:
                self.add_error(field, "A TCP port is between 1 and 65535.")
        return data

    def save_unsaved(self) -> Host:
        host = super().save(commit=False)
        host.ssh_key = self.cleaned_data.get("key_name")
        host.extra_env_prefixes = self.cleaned_data.get("extra_env_prefixes") or []
        host.extra_flags = self.cleaned_data.get("extra_flags") or []
        host.default_env = self.cleaned_data.get("default_env") or {}
        host.draft_training_dirs = self.cleaned_data.get("draft_training_dirs") or []
        return host


class DraftExportForm(forms.Form):
    """A member's choice of a listed checkpoint to export (the page's button, the API's body): which one, never a
    path to write or a command; the worker finds it in the host's listing or refuses (rules/draft_export.py)."""

    directory = forms.CharField(max_length=MAX_DRAFT_TRAINING_DIR, strip=False)
    run_id = forms.CharField(max_length=200, strip=False)
    step = forms.IntegerField(min_value=0, max_value=draft_export.MAX_STEP)

    def clean_directory(self) -> str:
        no_control_chars(self.cleaned_data["directory"], "The training directory")
        return str(self.cleaned_data["directory"])

    def clean_run_id(self) -> str:
        no_control_chars(self.cleaned_data["run_id"], "The run")
        return str(self.cleaned_data["run_id"])


class SshKeyForm(forms.ModelForm):
    class Meta:
        model = SshKey
        fields = ["name", "file_name", "public_key"]

    def clean_public_key(self) -> str:
        text = " ".join(self.cleaned_data.get("public_key", "").split())
        if not text:
            return ""
        parts = text.split(" ")
        if len(parts) < 2 or not parts[0].startswith(("ssh-", "ecdsa-", "sk-")) or len(text) > 16_000:
            raise ValidationError("An OpenSSH public key line, e.g. 'ssh-ed25519 AAAA... comment'.")
        return text

    def clean(self) -> dict[str, Any]:
        super().clean()
        key = self.instance
        key.public_key = self.cleaned_data.get("public_key", "")
        if key.public_key and not key.fingerprint:
            self.add_error("public_key", "The key's base64 part does not decode.")
        return self.cleaned_data
