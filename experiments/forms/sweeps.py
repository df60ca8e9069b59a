"""The sweep builder: the value lists a user types (or the API sends), the candidate they vary, and the candidates
they give, each checked like any other candidate. The page's preview, the API's preview and the API's `sweep` of an
experiment all go through `SweepForm`; the grid and its rules are `experiments.rules.sweeps`'.

The candidate varied (the base) decides the engine: an SGLang base's sweep takes steps, topk and draft tokens, a
vLLM base's the steps list alone, as num_speculative_tokens (its candidates are vLLM configs with the base's engine
options); the topk list is required of SGLang only. Methods and draft checkpoints are lists too: the methods compared
(each over the lists it takes) and the drafts each method that takes one runs in turn.

Long module: the value-list fields, the form that turns them into one grid and the preview that prices it are one
submission's steps, read together by the page and the API; each is too small to stand alone.
"""

from __future__ import annotations

import dataclasses
import shlex
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from experiments.analysis.launch_estimates import LaunchEstimate, LaunchKind
from experiments.rules import launch_fields, launch_policy, sweeps

from ..models import BenchmarkProfile, Host
from .configs import ServerConfigForm, config_form_data, split_eagle3_profile
from .profiles import BenchmarkProfileForm
from .values import CONFLICT, ECHO, MAX_CANDIDATES, format_env, no_control_chars, plain_errors, policy_error

# The page's sweep inputs belong to a form of their own (`form="sweep-form"`), outside the experiment's: submitting
# the experiment never carries, and so never silently drops, a sweep that was not turned into candidates.
_PAGE_FORM = {"form": "sweep-form"}


class NumberListField(forms.Field):
    """Whole numbers typed comma-separated, or a JSON list; bounded like the config field they vary. `example`: the
    list a new study's page starts with (`SweepForm.example_lists`)."""

    def __init__(self, *, varies: str, example: str = "", **kwargs: Any) -> None:
        kwargs.setdefault("widget", forms.TextInput(attrs=_PAGE_FORM))
        super().__init__(**kwargs)
        self.varies = varies
        self.example = example

    def to_python(self, value: Any) -> tuple[int, ...]:
        try:
            return sweeps.parse_numbers(value, self.varies)
        except sweeps.SweepError as exc:
            raise ValidationError(exc.message) from None


class VariedField(forms.Field):
    """Flags or environment variables with the values each takes in turn: lines as typed, or a JSON object."""

    def __init__(self, *, kind: str, **kwargs: Any) -> None:
        kwargs.setdefault("widget", forms.Textarea(attrs={**_PAGE_FORM, "rows": 2}))
        super().__init__(**kwargs)
        self.kind = kind

    def to_python(self, value: Any) -> sweeps.Varied:
        try:
            return sweeps.parse_varied(value, "", self.kind)
        except sweeps.SweepError as exc:
            raise ValidationError(exc.message) from None


class MethodListField(forms.Field):
    """The methods a sweep compares: typed as `EAGLE3, NGRAM, STANDALONE=/models/draft`, or a JSON list; names of
    the engine the form sets (`engine`, the base's)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("widget", forms.TextInput(attrs=_PAGE_FORM))
        super().__init__(**kwargs)
        self.engine = launch_fields.SGLANG

    def to_python(self, value: Any) -> tuple[sweeps.MethodChoice, ...]:
        try:
            return sweeps.parse_methods(value, "methods", self.engine)
        except sweeps.SweepError as exc:
            raise ValidationError(exc.message) from None


class DraftListField(forms.Field):
    """Draft paths typed one per line (or comma-separated), or a JSON list."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("widget", forms.Textarea(attrs={**_PAGE_FORM, "rows": 2}))
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> tuple[str, ...]:
        try:
            return sweeps.parse_drafts(value, "drafts")
        except sweeps.SweepError as exc:
            raise ValidationError(exc.message) from None


class SweepForm(forms.Form):
    """The value lists of a sweep and the candidate it varies (`base_data`: the data of a config form, with its
    `base_prefix` on the page). Valid, it holds the grid and one config form per candidate (`candidate_forms`)."""

    speculative_num_steps = NumberListField(
        varies=sweeps.STEPS,
        example="1, 2, 3",
        label="Steps",
        help_text="comma-separated or ranges, e.g. 1, 2, 3 or 1-4; for vLLM: num_speculative_tokens",
    )
    # Required of an SGLang base (`clean`): vLLM has no topk.
    speculative_eagle_topk = NumberListField(
        varies=sweeps.TOPK, example="1, 2, 4", label="Topk", required=False, help_text="SGLang only; e.g. 1, 2, 4"
    )
    speculative_num_draft_tokens = NumberListField(
        varies=sweeps.DRAFT,
        example="2, 3, 4, 6, 8",
        label="Draft tokens",
        required=False,
        help_text="SGLang only, for topk above 1; topk 1 always runs steps + 1",
    )
    extra_args = VariedField(
        kind="flag", label="Varied flags", required=False, help_text="one per line: --mem-fraction-static 0.8, 0.85"
    )
    env = VariedField(
        kind="env", label="Varied environment", required=False, help_text="one per line: NCCL_PROTO=LL, Simple"
    )
    methods = MethodListField(
        label="Methods",
        required=False,
        help_text="compare methods: e.g. EAGLE3, NGRAM, STANDALONE=/models/small-draft (a method's draft after =); "
        "empty: the candidate's own method",
    )
    drafts = DraftListField(
        label="Draft checkpoints",
        required=False,
        help_text="compare drafts (e.g. a training run's exported checkpoints), one per line: each method that takes a "
        "draft runs each in turn; empty: the candidate's own draft",
    )
    name_prefix = forms.CharField(
        label="Name prefix",
        required=False,
        max_length=sweeps.MAX_PREFIX_LENGTH,
        widget=forms.TextInput(attrs=_PAGE_FORM),
        help_text="candidates are named s<steps>-k<topk>-d<draft tokens>",
    )

    def __init__(
        self,
        data: Any = None,
        *,
        base_data: Any = None,
        base_prefix: str | None = None,
        prefix: str | None = None,
    ) -> None:
        super().__init__(data, prefix=prefix)
        # The base's engine as submitted (its form checks it; one no engine has reads as SGLang's meanwhile).
        self.engine = _engine_of(base_data, base_prefix)
        methods = self.fields["methods"]
        assert isinstance(methods, MethodListField)
        methods.engine = self.engine
        self.base_form = (
            None
            if base_data is None
            else ServerConfigForm(_base_form_data(base_data, base_prefix, self.engine), prefix=base_prefix)
        )
        # Set by whoever knows the host and the other candidates, before validation (like ServerConfigForm's).
        self.extra_env_prefixes: tuple[str, ...] = ()
        self.extra_flags: tuple[str, ...] = ()
        self.host: Host | None = None
        self.max_candidates = MAX_CANDIDATES
        self.grid: sweeps.Grid | None = None
        self.candidate_forms: list[ServerConfigForm] = []

    def example_lists(self, engine: str) -> dict[str, str]:
        """The value lists a new study's page starts with over a base of `engine`: its swept fields' examples."""
        lists = {}
        for name in sweeps.swept_fields(engine):
            field = self.fields[name]
            if isinstance(field, NumberListField) and field.example:
                lists[name] = field.example
        return lists

    def launches_on(self, host: Host | None) -> None:
        """The host's allowances and flag listing apply to the sweep's axes and to every candidate it makes."""
        self.extra_env_prefixes = tuple(host.extra_env_prefixes or ()) if host else ()
        self.extra_flags = tuple(host.extra_flags or ()) if host else ()
        self.host = host

    def clean_name_prefix(self) -> str:
        value = self.cleaned_data["name_prefix"].strip()
        no_control_chars(value, "The name prefix")
        return value

    def clean_extra_args(self) -> sweeps.Varied:
        varied = self.cleaned_data["extra_args"]
        for flag, values in varied:
            for value in values:
                managed = launch_fields.managed_flags(self.engine)
                problems = launch_policy.extra_args_refusals([flag, value], managed, self.extra_flags, self.engine)
                if problems:
                    raise ValidationError([policy_error(p) for p in problems])
        return varied

    def clean_env(self) -> sweeps.Varied:
        varied = self.cleaned_data["env"]
        for name, values in varied:
            for value in values:
                problems = launch_policy.env_refusals({name: value}, self.extra_env_prefixes)
                if problems:
                    raise ValidationError([policy_error(p) for p in problems])
        return varied

    def clean(self) -> dict[str, Any]:
        data = self.cleaned_data
        topk = self.fields["speculative_eagle_topk"]
        missing = "speculative_eagle_topk" not in self.errors and not data.get("speculative_eagle_topk")
        methods = data.get("methods") or ()
        # A topk list is needed where an EAGLE-family method is swept (the base's, or one of the methods compared).
        tree = not methods or any(m.algorithm in sweeps.EAGLE_FAMILY for m in methods)
        if missing and tree and sweeps.TOPK in sweeps.swept_fields(self.engine):
            self.add_error("speculative_eagle_topk", ValidationError(topk.error_messages["required"], "required"))
        if self.base_form is None:
            raise ValidationError(
                "Give the candidate the sweep varies (the API's `base`, a config or a config id; on the page, the "
                "first candidate block)."
            )
        self.base_form.launches_on(self.host)
        if not self.base_form.is_valid():
            raise ValidationError("Fix the candidate the sweep varies first (its errors are listed).", code=ECHO)
        if self.errors:
            return data
        sweep = sweeps.Sweep(
            steps=data["speculative_num_steps"],
            topk=data["speculative_eagle_topk"],
            draft_tokens=data["speculative_num_draft_tokens"],
            flags=data["extra_args"],
            env=data["env"],
            name_prefix=data["name_prefix"],
            methods=data.get("methods") or (),
        )
        try:
            base = self._base_config()
            algorithm = base.get("speculative_algorithm") or ""
            choices = sweeps.with_drafts(sweep.methods, data.get("drafts") or (), algorithm, self.engine)
        except sweeps.SweepError as exc:
            self.add_error("drafts", ValidationError(exc.message, code=CONFLICT))
            return data
        sweep = dataclasses.replace(sweep, methods=choices)
        data["methods"] = choices  # what a study's space keeps: the drafts applied
        try:
            self.grid = sweeps.build_grid(self._base_config(), sweep)
        except sweeps.SweepError as exc:
            field = exc.field if exc.field in self.fields else None
            self.add_error(field, ValidationError(exc.message, code=CONFLICT))
            return data
        refusal = self.grid.refusal(self.max_candidates)
        if refusal:
            raise ValidationError(refusal, code=CONFLICT)
        self.candidate_forms = [ServerConfigForm(config_form_data(c)) for c in self.grid.candidates]
        for form in self.candidate_forms:
            form.launches_on(self.host)
        return data

    def _base_config(self) -> dict[str, Any]:
        """The validated base as a config in the API's shape (what the grid copies into each candidate)."""
        assert self.base_form is not None
        clean = self.base_form.cleaned_data
        swept = sweeps.swept_fields()
        config = {f: clean[f] for f in ServerConfigForm.Meta.fields if f not in swept and f != "name"}
        config.update(
            env=clean["env_text"],
            extra_args=clean["extra_args_text"],
            expect=clean["expect"],
            log_metrics=clean["log_metrics"],
        )
        if clean.get("engine_options"):  # vLLM's settings without a column, each candidate's too
            config["engine_options"] = clean["engine_options"]
        return config

    def own_errors(self, path: str = "sweep.") -> dict[str, list[str]]:
        """The errors of the lists and of the base (under `<path>base.`); the candidates' are `named_forms`'."""
        errors = {} if self.is_valid() else plain_errors(self, path)
        if self.base_form is not None and self.base_form.errors:
            errors.update(plain_errors(self.base_form, f"{path}base."))
        return errors

    def named_forms(self, path: str = "sweep.") -> list[tuple[str, ServerConfigForm]]:
        return [(f"{path}candidates.{j}.", form) for j, form in enumerate(self.candidate_forms)]

    def grid_json(self) -> dict[str, Any]:
        grid = self.grid
        return {
            "candidates": grid.candidates if grid else [],
            "skipped": [s.as_json() for s in grid.skipped] if grid else [],
            "notes": grid.notes if grid else [],
        }


def _engine_of(data: Any, prefix: str | None) -> str:
    """The engine a base's form data names, SGLang's where it names none or one specdash does not drive."""
    engine = (data or {}).get(f"{prefix}-engine" if prefix else "engine") or launch_fields.SGLANG
    return engine if engine in launch_fields.ENGINE_NAMES else launch_fields.SGLANG


def _base_form_data(data: Any, prefix: str | None, engine: str) -> Any:
    """The base's form data without the values the sweep sets (every engine's swept fields) and with a placeholder
    name (each candidate is named after its values). A swept field its engine does not pick itself when unset
    (vLLM's num_speculative_tokens, which its draft methods need) holds its lowest value instead, so the base
    passes the engine's rules; every candidate replaces it."""
    copied = data.copy()
    for field in sweeps.swept_fields():
        row = launch_fields.field(engine, field)
        placeholder = row.bounds[0] if row is not None and not row.auto and row.bounds else ""
        copied[f"{prefix}-{field}" if prefix else field] = placeholder
    copied[f"{prefix}-name" if prefix else "name"] = "sweep base"
    return copied


class _HostForm(forms.Form):
    host = forms.ModelChoiceField(queryset=Host.objects.all(), to_field_name="name", empty_label=None)


class SweepPreview:
    """What a sweep would submit, before it is: the host, the sweep and the profile validated together, and (valid)
    the grid with the launches it costs and how long they should take. The page and the API answer the same."""

    def __init__(self, host: Any, sweep: SweepForm, profile: BenchmarkProfileForm) -> None:
        self.host_form = _HostForm({"host": host})
        self.sweep_form = sweep
        self.profile_form = profile
        self.errors: dict[str, list[str]] = {}

    def is_valid(self) -> bool:
        errors: dict[str, list[str]] = {}
        host = self.host_form.cleaned_data["host"] if self.host_form.is_valid() else None
        if host is None:
            errors.update(plain_errors(self.host_form))
        self.sweep_form.launches_on(host)
        if not self.profile_form.is_valid():
            errors.update(plain_errors(self.profile_form, "profile."))
        errors.update(self.sweep_form.own_errors())
        for path, form in self.sweep_form.named_forms():
            if not form.is_valid():
                errors.update(plain_errors(form, path))
        self.errors = errors
        return not errors

    def every_form(self) -> list[forms.BaseForm]:
        """Every form whose errors the answer holds (their codes say its status)."""
        base = [self.sweep_form.base_form] if self.sweep_form.base_form is not None else []
        candidates = [form for _, form in self.sweep_form.named_forms()]
        return [self.host_form, self.profile_form, self.sweep_form, *base, *candidates]

    def launch_shape(self) -> tuple[Host, LaunchKind]:
        """The host and one launch of the sweep there (its candidates' model, the profile; after a successful
        is_valid()): what such launches took there is read by these (`reads.queueing.launch_estimate`), for
        `as_json`."""
        candidates = self.sweep_form.grid_json()["candidates"]
        model = candidates[0]["model_path"] if candidates else ""
        return self.host_form.cleaned_data["host"], self._profile().launch_kind(config="", model=model)

    def as_json(self, history: LaunchEstimate | None, *, with_form_text: bool = False) -> dict[str, Any]:
        """The grid and its estimate, from `history` (what a launch takes on the host, from the launches a worker
        measured there) or, with none measured, the defaults; `with_form_text` adds each candidate's boxes as the
        page's form shows them."""
        assert not self.errors, "as_json() after a successful is_valid() only"
        host: Host = self.host_form.cleaned_data["host"]
        profile = self._profile()
        if history is not None and history.is_known:
            seconds = history.seconds
            low, high = history.total.low / 60, history.total.high / 60
            basis = f"{history.based_on.replace('this host', host.name)}: {low:.0f}-{high:.0f} min a launch"
        else:
            seconds = sweeps.default_launch_seconds(
                {f: getattr(profile, f) for f in ("output_len", "num_prompts", "concurrency", "passes")}
                | {"warmup_requests": profile.warmup_requests}
            )
            basis = (
                f"no measured run on {host.name} yet: {sweeps.DEFAULT_LOAD_SECONDS / 60:.0f} min to start a server "
                f"and {sweeps.DEFAULT_TOKEN_SECONDS * 1000:.0f} ms per output token"
            )
        grid = self.sweep_form.grid_json()
        estimate = sweeps.estimate(len(grid["candidates"]), profile.launches, seconds)
        if with_form_text:
            grid["candidates"] = [{**c, "form": _form_text(c)} for c in grid["candidates"]]
        return {
            **grid,
            "configs": estimate.configs,
            "launches_per_config": profile.launches,
            "launches": estimate.launches,
            "seconds_per_launch": round(estimate.seconds_per_launch),
            "estimated_seconds": round(estimate.seconds),
            "estimate_basis": basis,
            "profile": profile.summary,
        }

    def _profile(self) -> BenchmarkProfile:
        return self.profile_form.save_unsaved(name="sweep preview")


def _form_text(candidate: dict[str, Any]) -> dict[str, Any]:
    """A candidate's values as the page's config boxes hold them (the EAGLE-3 profile as its checkbox)."""
    profiled, env, _ = split_eagle3_profile(candidate["env"], candidate["log_metrics"])
    return {
        "name": candidate["name"],
        # Every engine's swept fields: those the candidate's engine has not are emptied on the page.
        **{field: candidate.get(field) for field in sweeps.swept_fields()},
        "extra_args_text": shlex.join(candidate["extra_args"]),
        "env_text": format_env(env),
        "profile_eagle3": profiled,
    }
