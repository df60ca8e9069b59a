"""The form of how a config is measured: a benchmark profile (requests, prompts, repetitions, the gate)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.db import models

from ..models import BenchmarkProfile
from .values import CONFLICT, parse_concurrency

# What a new profile starts with, in the browser and through the API (`apply_profile_defaults`); the model's column
# defaults (1 pass, 1 launch) stay as the history of stored rows. One sample per config and concurrency gives no
# interval, hence no verdict. 3 passes of 1 launch rather than 2 launches of 1 pass: the interval is a Welch t on
# the samples of each side (analysis/comparison.py), whose width is set by n. Two launches give n = 2, df ~ 1 and
# t_0.975 = 12.7, an interval that excludes 1 only for a speedup near 2x; three passes give n = 3, df 2..4 and
# t_0.975 <= 4.3, for one server load per config instead of two (loading, not a pass, is most of a run's time).
# When launch-to-launch variation matters, "Re-run" adds interleaved launches to the same comparison.
PROFILE_DEFAULTS: dict[str, Any] = {"passes": 3, "launches": 1, "concurrency": [1, 4]}
# Optional when posted (a form of before prompt sets, a script): the column's default, greedy as before.
OPTIONAL_FIELDS = ("temperature", "top_p", "gate_within_tokens", "gate_max_share")
SLO_FIELDS = ("slo_metric", "slo_percentile", "slo_limit_ms")
# Samples per side the comparison needs before it can draw an interval (a variance on each side).
MIN_SAMPLES_FOR_INTERVAL = 2
# Requests one launch sends (levels x passes x prompts). Each field alone is bounded generously; together they
# reached 32 x 50 x 100,000 = 160 million requests, weeks of one host. 200,000 is still days at low concurrency;
# more repetitions of a comparison come from re-runs, which the quotas see.
MAX_REQUESTS_PER_LAUNCH = 200_000


class BenchmarkProfileForm(forms.ModelForm):
    concurrency_text = forms.CharField(
        label="Concurrency levels",
        initial=", ".join(str(c) for c in PROFILE_DEFAULTS["concurrency"]),
        help_text="comma-separated",
        max_length=1000,
    )

    class Meta:
        model = BenchmarkProfile
        fields = [
            "prompt_set",
            "input_len",
            "output_len",
            "num_prompts",
            "warmup_requests",
            "passes",
            "launches",
            "seed",
            "temperature",
            "top_p",
            "gate_within_tokens",
            "gate_max_share",
            "request_timeout_s",
            "readiness_timeout_s",
            "stall_timeout_s",
            "slo_metric",
            "slo_percentile",
            "slo_limit_ms",
        ]

    # Inclusive bounds, far beyond any real benchmark: a context of 1 Mi tokens, a day per timeout, 50 repetitions.
    LIMITS = {
        "input_len": (1, 1 << 20),
        "output_len": (2, 1 << 20),
        "num_prompts": (1, 100_000),
        "warmup_requests": (0, 100),
        "passes": (1, 50),
        "launches": (1, 50),
        "seed": (-(2**31), 2**31 - 1),  # the column's range; the client seeds Python's random with it
        "temperature": (0, 2),
        "gate_within_tokens": (1, 1 << 20),
        "gate_max_share": (0, 1),
        "request_timeout_s": (1, 24 * 3600),
        "readiness_timeout_s": (10, 24 * 3600),
        "stall_timeout_s": (5, 24 * 3600),
        "slo_limit_ms": (0.001, 24 * 3600 * 1000),
    }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("instance") is None:
            kwargs["instance"] = BenchmarkProfile(
                **{k: v for k, v in PROFILE_DEFAULTS.items() if k in BenchmarkProfileForm.Meta.fields}
            )
        super().__init__(*args, **kwargs)
        self.fields["passes"].help_text = "passes × launches ≥ 2 for an interval and a verdict"
        self.fields["prompt_set"].empty_label = "random token ids (seeded)"  # type: ignore[attr-defined]
        for name in (*OPTIONAL_FIELDS, *SLO_FIELDS):
            self.fields[name].required = False

    def warnings(self) -> list[str]:
        """What the (valid) profile lets the comparison say; submitting anyway is the user's choice."""
        samples = self.cleaned_data["passes"] * self.cleaned_data["launches"]
        if samples >= MIN_SAMPLES_FOR_INTERVAL:
            return []
        return [
            f"This profile measures each config {samples} time per concurrency: the comparison can give no "
            f"interval and no verdict (every row inconclusive). Use at least 3 passes, or re-run the experiment "
            f"to add launches."
        ]

    def clean_concurrency_text(self) -> list[int]:
        return parse_concurrency(self.cleaned_data["concurrency_text"])

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        for name in OPTIONAL_FIELDS:
            column = BenchmarkProfile._meta.get_field(name)
            if data.get(name) is None and isinstance(column, models.Field):
                data[name] = column.get_default()
        for field, (low, high) in self.LIMITS.items():
            value = data.get(field)
            if value is not None and not low <= value <= high:
                self.add_error(field, f"Must be between {low} and {high}.")
        given = [name for name in SLO_FIELDS if data.get(name) not in (None, "")]
        if given and len(given) < len(SLO_FIELDS):
            for name in set(SLO_FIELDS) - set(given):
                self._conflict(name, "An SLO takes a metric, a percentile and a limit: set all three, or none.")
        if (top_p := data.get("top_p")) is not None and not 0 < top_p <= 1:
            self.add_error("top_p", "Must be above 0 and at most 1.")
        levels = data.get("concurrency_text")
        if levels and data.get("num_prompts") and data["num_prompts"] < max(levels):
            self._conflict(
                "num_prompts",
                f"At least {max(levels)} prompts are needed to keep {max(levels)} requests in flight.",
            )
        if levels and data.get("num_prompts") and data.get("passes"):
            requests = len(levels) * data["passes"] * data["num_prompts"]
            if requests > MAX_REQUESTS_PER_LAUNCH:
                self._conflict(
                    "num_prompts",
                    f"{len(levels)} concurrency levels x {data['passes']} passes x {data['num_prompts']} prompts is "
                    f"{requests:,} requests per launch; at most {MAX_REQUESTS_PER_LAUNCH:,}. Use fewer levels, passes "
                    "or prompts (re-run the experiment for more launches).",
                )
        return data

    def _conflict(self, field: str, message: str) -> None:
        """A field refused for what another field holds (a rule no schema states)."""
        self.add_error(field, ValidationError(message, code=CONFLICT))

    def save_unsaved(self, name: str) -> BenchmarkProfile:
        profile = self.save(commit=False)
        # An experiment's profile is named after it ("<name> profile"): keep within the column.
        column = BenchmarkProfile._meta.get_field("name")
        assert isinstance(column, models.CharField) and column.max_length
        profile.name = name[: column.max_length]
        profile.concurrency = self.cleaned_data["concurrency_text"]
        return profile
