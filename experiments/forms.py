"""Validation of everything a user submits; the JSON API feeds the same forms (one source of truth)."""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from django import forms
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import models

from .models import MANAGED_FLAGS, BenchmarkProfile, Flag, Host, ServerConfig

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Values that reach a remote shell are always quoted; control characters are refused outright because no
# legitimate path, flag or env value contains them and they make logs and commands unreadable.
CONTROL_CHARS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
MAX_CONCURRENCY = 1024


def _no_control_chars(value: str, what: str) -> None:
    if CONTROL_CHARS.search(value):
        raise ValidationError(f"{what} must not contain control characters or newlines.")


def parse_env(text: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        name = name.strip()
        if not sep:
            raise ValidationError(f"Line {number}: expected NAME=VALUE, got {line!r}.")
        if not ENV_NAME.match(name):
            raise ValidationError(f"Line {number}: {name!r} is not a valid environment variable name.")
        _no_control_chars(value, f"The value of {name}")
        env[name] = value
    return env


def check_env(env: Any) -> dict[str, str]:
    """The JSON API's env object, held to the rules of the NAME=VALUE text the browser sends."""
    if not isinstance(env, dict):
        raise ValidationError("The environment must be an object of NAME -> value.")
    checked: dict[str, str] = {}
    for name, value in env.items():
        if not ENV_NAME.match(name):
            raise ValidationError(f"{name!r} is not a valid environment variable name.")
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ValidationError(f"The value of {name} must be a string.")
        _no_control_chars(str(value), f"The value of {name}")
        checked[name] = str(value)
    return checked


def format_env(env: dict[str, str]) -> str:
    return "\n".join(f"{name}={value}" for name, value in env.items())


def parse_extra_args(text: str) -> list[str]:
    try:
        args = shlex.split(text)
    except ValueError as exc:
        raise ValidationError(f"Could not split the extra arguments: {exc}.") from exc
    return check_extra_args(args)


def check_extra_args(args: Any) -> list[str]:
    if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
        raise ValidationError('Extra arguments must be a list of strings, e.g. ["--mem-fraction-static", "0.85"].')
    for arg in args:
        _no_control_chars(arg, "Extra arguments")
    if args and not args[0].startswith("-"):
        raise ValidationError(f"Extra arguments must start with a flag, not {args[0]!r}.")
    for arg in args:
        if not arg.startswith("--"):
            continue
        flag = arg.split("=", 1)[0]
        # argparse accepts unique prefixes, so `--tp` or `--speculative-num-st` would also override a field.
        clash = sorted(m for m in MANAGED_FLAGS if m == flag or m.startswith(flag))
        if clash:
            raise ValidationError(
                f"{flag} is set by the config's own fields ({', '.join(clash)}); use those fields instead."
            )
    return args


def parse_concurrency(text: str) -> list[int]:
    levels: set[int] = set()
    for part in re.split(r"[,\s]+", text.strip()):
        if not part:
            continue
        try:
            level = int(part)
        except ValueError as exc:
            raise ValidationError(f"{part!r} is not a whole number.") from exc
        if not 1 <= level <= MAX_CONCURRENCY:
            raise ValidationError(f"Concurrency {level} is outside 1..{MAX_CONCURRENCY}.")
        levels.add(level)
    if not levels:
        raise ValidationError("Give at least one concurrency level.")
    return sorted(levels)


class ServerConfigForm(forms.ModelForm):
    env_text = forms.CharField(
        label="Environment",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="NAME=VALUE per line",
    )
    extra_args_text = forms.CharField(label="Extra flags", required=False, help_text="e.g. --mem-fraction-static 0.85")
    expect = forms.JSONField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    log_metrics = forms.JSONField(required=False, widget=forms.Textarea(attrs={"rows": 2}))

    class Meta:
        model = ServerConfig
        fields = [
            "name",
            "model_path",
            "served_model_name",
            "speculative_algorithm",
            "speculative_draft_model_path",
            "speculative_num_steps",
            "speculative_eagle_topk",
            "speculative_num_draft_tokens",
            "tp_size",
        ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["env_text"].initial = format_env(self.instance.env)
            self.fields["extra_args_text"].initial = shlex.join(self.instance.extra_args)

    def clean_model_path(self) -> str:
        value = self.cleaned_data["model_path"].strip()
        _no_control_chars(value, "The model path")
        return value

    def clean_speculative_draft_model_path(self) -> str:
        value = self.cleaned_data["speculative_draft_model_path"].strip()
        _no_control_chars(value, "The draft model path")
        return value

    def clean_served_model_name(self) -> str:
        value = self.cleaned_data["served_model_name"].strip()
        _no_control_chars(value, "The served model name")
        return value

    def clean_tp_size(self) -> int:
        value = self.cleaned_data["tp_size"]
        if not 1 <= value <= 64:
            raise ValidationError("TP size must be between 1 and 64.")
        return value

    # The JSON API hands env and extra_args over as given (see config_form_data); the browser sends text.
    def clean_env_text(self) -> dict[str, str]:
        if self.add_prefix("env") in self.data:
            return check_env(self.data[self.add_prefix("env")])
        return parse_env(self.cleaned_data.get("env_text") or "")

    def clean_extra_args_text(self) -> list[str]:
        if self.add_prefix("extra_args") in self.data:
            return check_extra_args(self.data[self.add_prefix("extra_args")])
        return parse_extra_args(self.cleaned_data.get("extra_args_text") or "")

    def clean_expect(self) -> dict[str, Any]:
        value = self.cleaned_data.get("expect") or {}
        if not isinstance(value, dict):
            raise ValidationError("Expectations must be a JSON object.")
        unknown = set(value) - {"server_args", "log_contains", "env_propagated"}
        if unknown:
            raise ValidationError(f"Unknown expectation keys: {', '.join(sorted(unknown))}.")
        if not isinstance(value.get("server_args", {}), dict):
            raise ValidationError("expect.server_args must be an object of server arg -> value.")
        for key in ("log_contains", "env_propagated"):
            items = value.get(key, [])
            if not isinstance(items, list) or not all(isinstance(i, str) and i for i in items):
                raise ValidationError(f"expect.{key} must be a list of non-empty strings.")
        for name in value.get("env_propagated", []):
            if not ENV_NAME.match(name):
                raise ValidationError(f"{name!r} is not a valid environment variable name.")
        return value

    def clean_log_metrics(self) -> dict[str, str]:
        value = self.cleaned_data.get("log_metrics") or {}
        if not isinstance(value, dict):
            raise ValidationError("Log metrics must be a JSON object of name -> regex.")
        for name, pattern in value.items():
            if not isinstance(pattern, str):
                raise ValidationError(f"The pattern of {name!r} must be a string.")
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise ValidationError(f"The pattern of {name!r} is not a valid regex: {exc}.") from exc
            if name not in compiled.groupindex:
                raise ValidationError(f"The pattern of {name!r} needs a named group (?P<{name}>...).")
        return value

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        algorithm = data.get("speculative_algorithm") or ""
        spec_fields = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
        values = {f: data.get(f) for f in spec_fields}
        if not algorithm:
            for field in (*spec_fields, "speculative_draft_model_path"):
                if data.get(field):
                    self.add_error(field, "Only a speculative config (algorithm set) takes this.")
            return data
        if algorithm in {"EAGLE", "EAGLE3"} and not data.get("speculative_draft_model_path"):
            self.add_error("speculative_draft_model_path", f"{algorithm} needs a draft model path.")
        given = [f for f, v in values.items() if v is not None]
        if given and len(given) != len(spec_fields):
            # SGLang asserts this too: it only auto-chooses all three together.
            for field in set(spec_fields) - set(given):
                self.add_error(field, "Set steps, topk and draft tokens together, or leave all three empty.")
            return data
        for field, value in values.items():
            if value is not None and value < 1:
                self.add_error(field, "Must be at least 1.")
        steps, topk, draft = (values[f] for f in spec_fields)
        if topk == 1 and steps and draft and draft != steps + 1:
            self.add_error(
                "speculative_num_draft_tokens",
                f"With topk 1 SGLang forces draft tokens to steps + 1 = {steps + 1}; "
                f"set {steps + 1} so the stored config says what runs.",
            )
        return data

    def save_unsaved(self) -> ServerConfig:
        """The validated config as an unsaved instance (the action saves it with everything else)."""
        config = self.save(commit=False)
        config.env = self.cleaned_data["env_text"]
        config.extra_args = self.cleaned_data["extra_args_text"]
        config.expect = self.cleaned_data["expect"]
        config.log_metrics = self.cleaned_data["log_metrics"]
        return config


class BenchmarkProfileForm(forms.ModelForm):
    concurrency_text = forms.CharField(label="Concurrency levels", initial="1, 4", help_text="comma-separated")

    class Meta:
        model = BenchmarkProfile
        fields = [
            "input_len",
            "output_len",
            "num_prompts",
            "warmup_requests",
            "passes",
            "launches",
            "seed",
            "request_timeout_s",
            "readiness_timeout_s",
            "stall_timeout_s",
        ]

    LIMITS = {
        "input_len": (1, 1_000_000),
        "output_len": (2, 1_000_000),
        "num_prompts": (1, 100_000),
        "warmup_requests": (0, 100),
        "passes": (1, 50),
        "launches": (1, 50),
        "request_timeout_s": (1, 24 * 3600),
        "readiness_timeout_s": (10, 24 * 3600),
        "stall_timeout_s": (5, 24 * 3600),
    }

    def clean_concurrency_text(self) -> list[int]:
        return parse_concurrency(self.cleaned_data["concurrency_text"])

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        for field, (low, high) in self.LIMITS.items():
            value = data.get(field)
            if value is not None and not low <= value <= high:
                self.add_error(field, f"Must be between {low} and {high}.")
        levels = data.get("concurrency_text")
        if levels and data.get("num_prompts") and data["num_prompts"] < max(levels):
            self.add_error(
                "num_prompts",
                f"At least {max(levels)} prompts are needed to keep {max(levels)} requests in flight.",
            )
        return data

    def save_unsaved(self, name: str) -> BenchmarkProfile:
        profile = self.save(commit=False)
        profile.name = name
        profile.concurrency = self.cleaned_data["concurrency_text"]
        return profile


class ExperimentForm(forms.Form):
    name = forms.CharField(max_length=200)
    host = forms.ModelChoiceField(queryset=Host.objects.all(), to_field_name="name", empty_label=None)

    def clean_name(self) -> str:
        value = self.cleaned_data["name"].strip()
        _no_control_chars(value, "The name")
        return value


def config_form_data(payload: dict[str, Any]) -> dict[str, Any]:
    """JSON config (API shape, SGLang field names) -> the data the config form takes."""
    data = {k: v for k, v in payload.items() if k not in {"env", "extra_args", "expect", "log_metrics"}}
    for key in ("speculative_algorithm", "speculative_draft_model_path", "served_model_name"):
        if data.get(key) is None:
            data[key] = ""
    if data.get("tp_size") is None:
        data["tp_size"] = 1  # SGLang's default, as for any flag the JSON leaves out
    # Not turned into text: a newline in an env value would read as a second variable, and a string of
    # extra args would be split into characters. The form checks them as given.
    data["env"] = payload.get("env") or {}
    data["extra_args"] = payload.get("extra_args") or []
    data["expect"] = json.dumps(payload.get("expect") or {})
    data["log_metrics"] = json.dumps(payload.get("log_metrics") or {})
    return data


def profile_form_data(payload: dict[str, Any]) -> dict[str, Any]:
    data = {k: v for k, v in payload.items() if k != "concurrency"}
    concurrency = payload.get("concurrency", [])
    data["concurrency_text"] = ", ".join(str(c) for c in concurrency) if isinstance(concurrency, list) else concurrency
    return data


def apply_profile_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """Fill fields the JSON payload may omit with the model's defaults (the HTML form always sends them)."""
    defaults = {}
    for name in BenchmarkProfileForm.Meta.fields:
        field = BenchmarkProfile._meta.get_field(name)
        if isinstance(field, models.Field):
            defaults[name] = field.get_default()
    return {**defaults, **data}


def plain_errors(form: forms.BaseForm, path: str = "") -> dict[str, list[str]]:
    """A form's errors keyed by the API's field names (`env`, not `env_text`), under a dotted `path` prefix."""
    errors = {}
    for field, messages in form.errors.items():
        key = f"{path}{field}" if field != "__all__" else (path.rstrip(".") or "__all__")
        errors[key.replace("_text", "")] = [str(m) for m in messages]
    return errors


class ExperimentSubmission:
    """The whole submission (experiment, baseline, candidates, profile) validated together: all or nothing.

    Both the browser view and the JSON API build one of these, so both say the same things about bad input.
    `errors` maps a dotted path ("baseline.model_path", "candidates.1.speculative_num_steps") to messages.
    """

    MAX_CANDIDATES = 50

    def __init__(
        self,
        experiment: dict[str, Any],
        baseline: dict[str, Any],
        candidates: list[dict[str, Any]],
        profile: dict[str, Any],
        *,
        candidate_prefixes: list[str] | None = None,
    ) -> None:
        # The browser posts every form of the page in one flat dict, told apart by prefixes; the API passes
        # one plain dict per form.
        prefixed = candidate_prefixes is not None
        self.experiment_form = ExperimentForm(experiment, prefix="experiment" if prefixed else None)
        self.baseline_form = ServerConfigForm(baseline, prefix="baseline" if prefixed else None)
        self.candidate_forms = [
            ServerConfigForm(data, prefix=candidate_prefixes[i] if candidate_prefixes is not None else None)
            for i, data in enumerate(candidates)
        ]
        self.profile_form = BenchmarkProfileForm(profile, prefix="profile" if prefixed else None)
        self.errors: dict[str, list[str]] = {}

    def _named_forms(self) -> list[tuple[str, forms.BaseForm]]:
        named: list[tuple[str, forms.BaseForm]] = [
            ("", self.experiment_form),
            ("baseline.", self.baseline_form),
            ("profile.", self.profile_form),
        ]
        named += [(f"candidates.{i}.", form) for i, form in enumerate(self.candidate_forms)]
        return named

    def is_valid(self) -> bool:
        self.errors = {}
        for path, form in self._named_forms():
            if not form.is_valid():
                self.errors.update(plain_errors(form, path))
        if not self.candidate_forms:
            self.errors["candidates"] = ["Add at least one candidate config."]
        elif len(self.candidate_forms) > self.MAX_CANDIDATES:
            self.errors["candidates"] = [f"At most {self.MAX_CANDIDATES} candidates per experiment."]
        if not self.errors:
            self._check_names()
            self._check_host_fits()
        return not self.errors

    def _check_names(self) -> None:
        names = [self.baseline_form.cleaned_data["name"]] + [f.cleaned_data["name"] for f in self.candidate_forms]
        seen: set[str] = set()
        for i, name in enumerate(names):
            if name in seen:
                key = "baseline.name" if i == 0 else f"candidates.{i - 1}.name"
                self.errors[key] = [f"Another config of this experiment is already named {name!r}."]
            seen.add(name)

    def _check_host_fits(self) -> None:
        host: Host = self.experiment_form.cleaned_data["host"]
        if not host.gpu_count:
            return  # inventory unknown until the first connection test; preflight checks it then.
        for path, form in self._named_forms():
            tp = form.cleaned_data.get("tp_size") if isinstance(form, ServerConfigForm) else None
            if tp and tp > host.gpu_count:
                self.errors[f"{path}tp_size"] = [f"Host {host.name} has {host.gpu_count} GPUs, fewer than tp {tp}."]

    def save(self, user):
        from .actions import do_create_experiment

        assert not self.errors, "save() after a successful is_valid() only"
        data = self.experiment_form.cleaned_data
        return do_create_experiment(
            user=user,
            name=data["name"],
            host=data["host"],
            baseline=self.baseline_form.save_unsaved(),
            candidates=[form.save_unsaved() for form in self.candidate_forms],
            profile=self.profile_form.save_unsaved(name=f"{data['name']} profile"),
        )


class FlagTriageForm(forms.Form):
    triage = forms.ChoiceField(choices=Flag.Triage.choices)
    assignee = forms.ModelChoiceField(
        queryset=get_user_model().objects.filter(is_active=True).order_by("username"), required=False
    )
    comment = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False, max_length=10_000)


class RerunForm(forms.Form):
    launches = forms.IntegerField(min_value=1, max_value=20, initial=2, help_text="more launches of every config")


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
                    _no_control_chars(value, field.replace("_", " ").capitalize())
                except ValidationError as exc:
                    self.add_error(field, exc)
        key_name = data.get("key_name") or ""
        if "/" in key_name or key_name.startswith("."):
            self.add_error("key_name", "A file name inside SPECDASH_SSH_KEY_DIR, not a path.")
        for field in ("port", "server_port"):
            if data.get(field) is not None and not 1 <= data[field] <= 65535:
                self.add_error(field, "A TCP port is between 1 and 65535.")
        return data
