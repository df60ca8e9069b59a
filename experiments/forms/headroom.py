"""Starting an acceptance headroom study from an experiment: which of its speculative configs, and which accept
lengths to simulate (blank: 1.5, 2, 2.5 ... up to steps + 1). The page and the API both use it."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from ..models import Experiment, ServerConfig
from ..rules import headroom, launch_policy
from .values import CONFLICT, NOT_ALLOWED

# The engines whose verify step SGLANG_SIMULATE_ACC_LEN sets (SGLang's EAGLE worker and its standalone draft).
SIMULATED_ALGORITHMS = ("EAGLE", "EAGLE3", "STANDALONE")
_NUMBER = re.compile(r"[0-9]{1,2}(\.[0-9]{1,3})?")


def eligible_configs(candidates: Sequence[ServerConfig]) -> list[ServerConfig]:
    """The candidates a headroom study can vary: EAGLE-family, with steps, not simulated already."""
    return [
        config
        for config in candidates
        if config.speculative_algorithm in SIMULATED_ALGORITHMS
        and config.speculative_num_steps
        and config.simulated_accept_length is None
    ]


class HeadroomForm(forms.Form):
    config = forms.TypedChoiceField(coerce=int, label="Config", help_text="its steps, topk and draft tokens as run")
    accept_lengths = forms.CharField(
        required=False,
        max_length=200,
        label="Accept lengths",
        help_text="comma-separated, 1 to steps + 1; blank: 1.5, 2, 2.5 ... steps + 1",
    )

    def __init__(
        self, *args: Any, experiment: Experiment, candidates: Sequence[ServerConfig] | None = None, **kwargs: Any
    ) -> None:
        """`candidates`: the experiment's, when the caller has them already (the experiment page's report)."""
        super().__init__(*args, **kwargs)
        self.experiment = experiment
        given = experiment.ordered_candidates() if candidates is None else candidates
        self.configs = {config.pk: config for config in eligible_configs(given)}
        field = self.fields["config"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = [(pk, config.name) for pk, config in self.configs.items()]

    def clean_accept_lengths(self) -> list[float] | None:
        text = self.cleaned_data.get("accept_lengths") or ""
        parts = [part.strip() for part in text.split(",") if part.strip()]
        if not parts:
            return None
        bad = [part for part in parts if not _NUMBER.fullmatch(part)]
        if bad:
            raise ValidationError(f"Accept lengths are numbers such as 2.5, not {bad[0][:40]!r}.")
        return [float(part) for part in parts]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        config = self.configs.get(data.get("config"))  # type: ignore[arg-type]
        if config is None:
            if not self.configs:
                raise ValidationError("This experiment has no EAGLE-family speculative candidate to simulate.")
            return data
        steps = int(config.speculative_num_steps or 0)
        lengths = data.get("accept_lengths") or headroom.default_accept_lengths(steps)
        # Lengths past the config's own steps + 1 (a rule between the two), or a variable the host's policy refuses.
        problems = [ValidationError(p, code=CONFLICT) for p in headroom.accept_length_refusals(lengths, steps)]
        if not problems:
            for length in lengths:
                env = headroom.simulated_env(config.env, length)
                refusals = launch_policy.env_refusals(env, self.experiment.host.extra_env_prefixes)
                problems += [ValidationError(p, code=NOT_ALLOWED) for p in refusals]
        if problems:
            self.add_error("accept_lengths", problems)
            return data
        data["config"] = config
        data["accept_lengths"] = sorted(lengths)
        return data
