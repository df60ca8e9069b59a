"""Starting an auto-tuning study: an experiment's submission (host, baseline, profile: the same checks) whose
candidates are a sweep's whole space, plus the budget and the precision wanted. The page and the API both use it.
The sweep's base decides the engine: a vLLM base's space is its num_speculative_tokens list (stored as the steps,
with no topk or draft tokens), its candidates vLLM configs."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from ..tuning.space import MAX_SPACE
from .submission import ExperimentSubmission
from .sweeps import SweepForm
from .values import CONFLICT, plain_errors

MAX_LAUNCHES = 500
# A study recommends configs to deploy; a simulated accept length is no draft anyone has (forms/headroom.py is the
# place to ask what one would be worth).
SIMULATED_REFUSAL = (
    "SGLANG_SIMULATE_ACC_LEN sets the accept length instead of measuring the draft's, so a study would recommend a "
    "config no real draft serves: start an acceptance headroom study from an experiment instead."
)
MAX_HOURS = 168.0


class StudyForm(forms.Form):
    max_launches = forms.IntegerField(
        min_value=3, max_value=MAX_LAUNCHES, required=False, label="Budget: launches", help_text="baseline included"
    )
    max_hours = forms.FloatField(min_value=0.05, max_value=MAX_HOURS, required=False, label="Budget: hours")
    tolerance = forms.FloatField(
        min_value=0.005, max_value=0.2, initial=0.02, label="Within", help_text="of the best (0.02 = 2%)"
    )
    confidence = forms.TypedChoiceField(
        choices=[(0.95, "95%")], coerce=float, initial=0.95, required=False, label="Confidence"
    )
    round_size = forms.IntegerField(min_value=1, max_value=10, initial=4, help_text="candidates per round")
    seed = forms.IntegerField(min_value=0, max_value=2**31 - 1, initial=0, required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not self.errors and data.get("max_launches") is None and data.get("max_hours") is None:
            raise ValidationError("Give a budget: a number of launches, hours, or both.")
        return data


class StudySubmission(ExperimentSubmission):
    """An experiment submission whose sweep is the study's space (up to MAX_SPACE configs, not an experiment's
    MAX_CANDIDATES) with the study's own fields under their names."""

    MAX_CANDIDATES = MAX_SPACE

    def __init__(
        self,
        experiment: dict[str, Any],
        baseline: dict[str, Any],
        profile: dict[str, Any],
        study: dict[str, Any],
        *,
        sweep: SweepForm | None,
        prefixed: bool = False,
    ) -> None:
        super().__init__(experiment, baseline, [], profile, candidate_prefixes=[] if prefixed else None, sweep=sweep)
        self.study_form = StudyForm(study, prefix="study" if prefixed else None)

    def is_valid(self) -> bool:
        valid = super().is_valid()
        if self.sweep_form is None:
            self.errors["sweep"] = [
                "Give the search space: the value lists of steps, topk and draft tokens (vLLM: num_speculative_tokens "
                "alone, as the steps list)."
            ]
        if not self.study_form.is_valid():
            self.errors.update(plain_errors(self.study_form, ""))
        if valid and not self.errors and any(c.simulated_accept_length for c in self.experiment_fields()["candidates"]):
            self.errors["sweep"] = [SIMULATED_REFUSAL]
            self.study_form.add_error(None, ValidationError(SIMULATED_REFUSAL, code=CONFLICT))
        return valid and not self.errors

    def every_form(self) -> list[forms.BaseForm]:
        return [*super().every_form(), self.study_form]

    def study_fields(self) -> dict[str, Any]:
        """The arguments of `do_start_study` (bar the user)."""
        assert self.sweep_form is not None and not self.errors
        fields = self.experiment_fields()
        data, sweep = self.study_form.cleaned_data, self.sweep_form.cleaned_data
        return dict(
            name=fields["name"],
            host=fields["host"],
            baseline=fields["baseline"],
            candidates=fields["candidates"],
            profile=fields["profile"],
            base=self.sweep_form._base_config(),
            space={
                "steps": list(sweep["speculative_num_steps"]),
                "topk": list(sweep["speculative_eagle_topk"]),
                "draft_tokens": list(sweep["speculative_num_draft_tokens"]),
                "flags": [[name, list(values)] for name, values in sweep["extra_args"]],
                "env": [[name, list(values)] for name, values in sweep["env"]],
                "name_prefix": sweep["name_prefix"],
                "methods": [[m.algorithm, m.draft] for m in sweep["methods"]],
                "drafts": list(sweep["drafts"]),
            },
            tolerance=data["tolerance"],
            max_launches=data["max_launches"] or MAX_LAUNCHES,
            max_hours=data["max_hours"],
            round_size=data["round_size"],
            seed=data["seed"] or 0,
        )
