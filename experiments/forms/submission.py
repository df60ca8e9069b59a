"""A whole experiment submission (experiment, baseline, candidates, profile), from the browser or the JSON API."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.db import models

from ..models import BenchmarkProfile, Host
from .configs import BenchmarkProfileForm, ServerConfigForm
from .values import no_control_chars


class ExperimentForm(forms.Form):
    name = forms.CharField(max_length=200)
    host = forms.ModelChoiceField(queryset=Host.objects.all(), to_field_name="name", empty_label=None)

    def clean_name(self) -> str:
        value = self.cleaned_data["name"].strip()
        no_control_chars(value, "The name")
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
        # The host decides which environment variables a config may set (its admin-set extra prefixes).
        host = self.experiment_form.cleaned_data.get("host") if self.experiment_form.is_valid() else None
        for config_form in (self.baseline_form, *self.candidate_forms):
            config_form.extra_env_prefixes = tuple(host.extra_env_prefixes or ()) if host else ()
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

    def experiment_fields(self) -> dict[str, Any]:
        """The arguments of `do_create_experiment` (bar the user): the configs and profile unsaved."""
        assert not self.errors, "experiment_fields() after a successful is_valid() only"
        data = self.experiment_form.cleaned_data
        return dict(
            name=data["name"],
            host=data["host"],
            baseline=self.baseline_form.save_unsaved(),
            candidates=[form.save_unsaved() for form in self.candidate_forms],
            profile=self.profile_form.save_unsaved(name=f"{data['name']} profile"),
        )
