"""A whole experiment submission (experiment, baseline, candidates, profile), from the browser or the JSON API."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.db import models
from django.utils.timesince import timesince

from experiments.rules import launch_fields, model_checks, model_paths

from ..models import BenchmarkProfile, Host
from .configs import ServerConfigForm
from .profiles import PROFILE_DEFAULTS, BenchmarkProfileForm
from .sweeps import SweepForm
from .values import CONFLICT, MAX_CANDIDATES, NOT_FOUND, no_control_chars, plain_errors


class ExperimentForm(forms.Form):
    name = forms.CharField(max_length=200)
    host = forms.ModelChoiceField(queryset=Host.objects.all(), to_field_name="name", empty_label=None)
    run_candidates_without_baseline = forms.BooleanField(
        required=False,
        label="Run candidates without a baseline",
        help_text="Off: when a launch's baseline fails or is cancelled, that launch's candidates are skipped.",
    )
    profile_traces = forms.BooleanField(
        required=False,
        label="Profile",
        help_text="After the measured cells, record a short profiler trace of each run at each concurrency "
        "(no measured number is touched).",
    )

    def clean_name(self) -> str:
        value = self.cleaned_data["name"].strip()
        no_control_chars(value, "The name")
        return value


def profile_form_data(payload: dict[str, Any]) -> dict[str, Any]:
    data = {k: v.pk if isinstance(v, models.Model) else v for k, v in payload.items() if k != "concurrency"}
    # None is "not set" in a form's terms: random ids for the prompt set, no SLO, a required field left empty.
    data = {k: "" if v is None else v for k, v in data.items()}
    concurrency = payload.get("concurrency", [])
    data["concurrency_text"] = ", ".join(str(c) for c in concurrency) if isinstance(concurrency, list) else concurrency
    return data


def apply_profile_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """Fill fields the JSON payload may omit with the defaults the browser's form starts with (it always sends
    every field): the model's column defaults, but a profile that gives a verdict (`PROFILE_DEFAULTS`)."""
    defaults = {}
    for name in BenchmarkProfileForm.Meta.fields:
        field = BenchmarkProfile._meta.get_field(name)
        if isinstance(field, models.Field):
            defaults[name] = field.get_default()
    return {**defaults, **PROFILE_DEFAULTS, **data}


class ExperimentSubmission:
    """The whole submission (experiment, baseline, candidates, profile) validated together: all or nothing.

    Both the browser view and the JSON API build one of these, so both say the same things about bad input.
    `errors` maps a dotted path ("baseline.model_path", "candidates.1.speculative_num_steps") to messages.
    """

    MAX_CANDIDATES = MAX_CANDIDATES

    def __init__(
        self,
        experiment: dict[str, Any],
        baseline: dict[str, Any],
        candidates: list[dict[str, Any]],
        profile: dict[str, Any],
        *,
        candidate_prefixes: list[str] | None = None,
        sweep: SweepForm | None = None,
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
        # A sweep's candidates join the given ones (its errors under "sweep.", its candidates' under
        # "sweep.candidates.<j>.").
        self.sweep_form = sweep
        self.errors: dict[str, list[str]] = {}
        # What the user should know but may submit anyway (the API answers them in its 201).
        self.warnings: list[str] = []

    def _named_forms(self) -> list[tuple[str, forms.BaseForm]]:
        named: list[tuple[str, forms.BaseForm]] = [
            ("", self.experiment_form),
            ("baseline.", self.baseline_form),
            ("profile.", self.profile_form),
        ]
        named += [(f"candidates.{i}.", form) for i, form in enumerate(self.candidate_forms)]
        if self.sweep_form is not None:
            named += self.sweep_form.named_forms()
        return named

    def _all_candidate_forms(self) -> list[ServerConfigForm]:
        swept = self.sweep_form.candidate_forms if self.sweep_form is not None else []
        return [*self.candidate_forms, *swept]

    def is_valid(self) -> bool:
        self.errors = {}
        # The host decides which environment variables and extra flags a config may set (its admin-set allowances).
        host = self.experiment_form.cleaned_data.get("host") if self.experiment_form.is_valid() else None
        for config_form in (self.baseline_form, *self.candidate_forms):
            config_form.launches_on(host)
        if self.sweep_form is not None:
            self.sweep_form.launches_on(host)
            self.sweep_form.max_candidates = max(self.MAX_CANDIDATES - len(self.candidate_forms), 0)
            self.errors.update(self.sweep_form.own_errors())
        for path, form in self._named_forms():
            if not form.is_valid():
                self.errors.update(plain_errors(form, path))
        # No candidate is allowed: a baseline measured alone (on a schedule, say) feeds its history checks.
        if len(self._all_candidate_forms()) > self.MAX_CANDIDATES:
            message = f"At most {self.MAX_CANDIDATES} candidates per experiment."
            self.errors["candidates"] = [message]
            # The given ones are bounded by the schema; with a sweep's, the sum is a rule between fields.
            self.experiment_form.add_error(None, ValidationError(message, code=CONFLICT))
        if not self.errors:
            self._check_names()
            self._check_host_fits()
            self._check_model_paths()
        pair_warnings: list[str] = []
        if not self.errors:
            pair_warnings = self._check_listed_models()
        self.warnings = [*self.profile_form.warnings(), *pair_warnings] if not self.errors else []
        return not self.errors

    def every_form(self) -> list[forms.BaseForm]:
        """Every form whose errors `errors` holds (their codes say the API's status)."""
        sweep = self.sweep_form
        own = [sweep, *([sweep.base_form] if sweep.base_form is not None else [])] if sweep is not None else []
        return [*(form for _, form in self._named_forms()), *own]

    def _field_error(self, path: str, form: forms.BaseForm, field: str, message: str, code: str = CONFLICT) -> None:
        """An error found across forms: under its dotted key for the API, and on the form's field for the page. None
        breaks a rule a schema states: `code` says which kind it is."""
        self.errors[f"{path}{field}"] = [message]
        form.add_error(field, ValidationError(message, code=code))

    def _check_names(self) -> None:
        config_forms = [("baseline.", self.baseline_form)]
        config_forms += [(f"candidates.{i}.", form) for i, form in enumerate(self.candidate_forms)]
        config_forms += self.sweep_form.named_forms() if self.sweep_form is not None else []
        seen: set[str] = set()
        for path, form in config_forms:
            name = form.cleaned_data["name"]
            if name in seen:
                self._field_error(path, form, "name", f"Another config of this experiment is already named {name!r}.")
            seen.add(name)

    def _check_host_fits(self) -> None:
        host: Host = self.experiment_form.cleaned_data["host"]
        for path, form in self._named_forms():
            engine = form.cleaned_data.get("engine") if isinstance(form, ServerConfigForm) else None
            if engine and not host.launcher_for(engine):
                label = launch_fields.label(engine)
                self._field_error(
                    path, form, "engine", f"Host {host.name} has no {label} launcher: an admin sets one on the host."
                )
        if not host.gpu_count:
            return  # inventory unknown until the first connection test; preflight checks it then.
        for path, form in self._named_forms():
            tp = form.cleaned_data.get("tp_size") if isinstance(form, ServerConfigForm) else None
            if tp and tp > host.gpu_count:
                self._field_error(
                    path, form, "tp_size", f"Host {host.name} has {host.gpu_count} GPUs, fewer than tp {tp}."
                )

    def _check_model_paths(self) -> None:
        """Every model a config names lies inside the host's models root (rules/model_paths.py)."""
        host: Host = self.experiment_form.cleaned_data["host"]
        for path, form in self._named_forms():
            if not isinstance(form, ServerConfigForm):
                continue
            for field, label in model_paths.MODEL_PATH_FIELDS.items():
                value = form.cleaned_data.get(field)
                refusal = model_paths.model_path_refusal(label, value, host.models_root) if value else None
                if refusal:
                    self._field_error(path, form, field, refusal + ".", NOT_FOUND)

    def _check_listed_models(self) -> list[str]:
        """What the host's last model listing proves about each config's paths and model pair, as field errors, and
        the pairs SGLang would serve wrong, as warnings (returned). Says nothing where the listing is missing or
        silent: the run's preflight reads the files themselves."""
        host: Host = self.experiment_form.cleaned_data["host"]
        inventory = host.model_inventory or {}
        if not inventory.get("models") or inventory.get("models_root") != host.models_root:
            return []
        warnings = []
        listing = inventory["models"]
        for path, form in self._named_forms():
            if not isinstance(form, ServerConfigForm):
                continue
            data = form.cleaned_data
            found = {}
            for field in model_paths.MODEL_PATH_FIELDS:
                if not data.get(field):
                    continue
                try:
                    found[field] = model_checks.listed_model(host.models_root, listing, data[field])
                except LookupError:
                    self._field_error(
                        path,
                        form,
                        field,
                        f"{host.name} has no model with a config.json at {data[field]} (its models as listed "
                        f"{_ago(host)}; a member can list them again on the host's page).",
                        NOT_FOUND,
                    )
            target, draft = found.get("model_path"), found.get("speculative_draft_model_path")
            mismatch = model_checks.algorithm_problem(data.get("speculative_algorithm"), draft)
            if mismatch:
                warnings.append(f"{data['name']}: {mismatch}")
            engine = data.get("engine") or launch_fields.SGLANG
            algorithm = data.get("speculative_algorithm") or ""
            if target is not None and not data.get("speculative_draft_model_path"):
                problem = model_checks.mtp_problem(engine, algorithm, target)
                if problem:
                    self._field_error(path, form, "speculative_algorithm", problem)
            if target is None or draft is None:
                continue
            spec = {**data, "extra_args": data["extra_args_text"], "engine_options": data.get("engine_options") or {}}
            problem = model_checks.pair_problem(engine, target, draft, spec=spec, env=data["env_text"])
            if problem:
                self._field_error(path, form, "speculative_draft_model_path", problem)
        return warnings

    def experiment_fields(self) -> dict[str, Any]:
        """The arguments of `do_create_experiment` (bar the user): the configs and profile unsaved."""
        assert not self.errors, "experiment_fields() after a successful is_valid() only"
        data = self.experiment_form.cleaned_data
        return dict(
            name=data["name"],
            host=data["host"],
            run_candidates_without_baseline=data["run_candidates_without_baseline"],
            profile_traces=data["profile_traces"],
            baseline=self.baseline_form.save_unsaved(),
            candidates=[form.save_unsaved() for form in self._all_candidate_forms()],
            profile=self.profile_form.save_unsaved(name=f"{data['name']} profile"),
        )


def _ago(host: Host) -> str:
    when = host.model_inventory_at
    return f"{timesince(when)} ago" if when else "before"
