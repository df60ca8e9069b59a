"""The output-equivalence gate: at temperature 0, speculative decoding must produce what the baseline produces.

For each prompt both sides answered, the outputs (token ids) are compared: identical, or the first token where
they part. A candidate "outputs differ" when more than `max_share` of the prompts diverge before token
`within_tokens` (default: any divergence before token 32 in more than 1% of prompts): a draft or verify bug
changes text early and often. Divergence later than that is kept and shown, not hidden: floating-point
non-determinism (batch composition changing a reduction order) flips a near-tie now and then, and after one
flipped token everything that follows differs, so it shows up as a long tail of late first divergences.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

OUTPUTS_DIFFER = "outputs differ"
DEFAULT_WITHIN_TOKENS = 32
DEFAULT_MAX_SHARE = 0.01


@dataclass(frozen=True)
class Divergence:
    prompt: int  # the prompt's index in its set
    token: int  # the first output position that differs
    baseline: list[int]  # a few tokens from there on, each side
    candidate: list[int]


@dataclass(frozen=True)
class Equivalence:
    compared: int
    identical: int
    within_tokens: int
    max_share: float
    divergences: list[Divergence] = field(default_factory=list)  # by prompt index
    # Where `divergences` holds only the first few (a stored gate, `from_json`): how many there were of each kind.
    early_total: int | None = None
    late_total: int | None = None

    @property
    def share_identical(self) -> float | None:
        return self.identical / self.compared if self.compared else None

    @property
    def early(self) -> list[Divergence]:
        return [d for d in self.divergences if d.token < self.within_tokens]

    @property
    def late(self) -> list[Divergence]:
        return [d for d in self.divergences if d.token >= self.within_tokens]

    @property
    def early_count(self) -> int:
        return len(self.early) if self.early_total is None else self.early_total

    @property
    def late_count(self) -> int:
        return len(self.late) if self.late_total is None else self.late_total

    @property
    def early_share(self) -> float:
        return self.early_count / self.compared if self.compared else 0.0

    @property
    def outputs_differ(self) -> bool:
        return self.compared > 0 and self.early_share > self.max_share

    def as_json(self, *, kept: int | None = None) -> dict[str, object]:
        """The gate as the API states it; `kept` keeps only the first divergences (each with its tokens from where the
        outputs part), as a candidate stores its gate (`from_json` reads it back)."""
        shown = self.divergences if kept is None else self.divergences[:kept]
        return {
            "compared": self.compared,
            "identical": self.identical,
            "share_identical": self.share_identical,
            "early_divergences": self.early_count,
            "late_divergences": self.late_count,
            "within_tokens": self.within_tokens,
            "max_share": self.max_share,
            "outputs_differ": self.outputs_differ,
            "divergences": [
                {"prompt": d.prompt, "token": d.token, "baseline": d.baseline, "candidate": d.candidate} for d in shown
            ],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Equivalence:
        """A stored gate (`as_json`), its counts as stored even where only the first divergences were kept."""
        divergences = [
            Divergence(int(d["prompt"]), int(d["token"]), list(d.get("baseline") or []), list(d.get("candidate") or []))
            for d in data.get("divergences") or []
        ]
        return cls(
            int(data["compared"]),
            int(data["identical"]),
            int(data["within_tokens"]),
            float(data["max_share"]),
            divergences,
            early_total=int(data["early_divergences"]),
            late_total=int(data["late_divergences"]),
        )


def first_divergence(baseline: Sequence[int], candidate: Sequence[int]) -> int | None:
    """The first position where the outputs differ (a shorter output differs where it ends); None if equal."""
    for position, (a, b) in enumerate(zip(baseline, candidate, strict=False)):
        if a != b:
            return position
    if len(baseline) != len(candidate):
        return min(len(baseline), len(candidate))
    return None


def check_outputs(
    baseline: Mapping[int, Sequence[int]],
    candidate: Mapping[int, Sequence[int]],
    within_tokens: int = DEFAULT_WITHIN_TOKENS,
    max_share: float = DEFAULT_MAX_SHARE,
    context_tokens: int = 8,
) -> Equivalence:
    """Compare the outputs of the prompts both sides answered (by prompt index)."""
    common = sorted(set(baseline) & set(candidate))
    divergences = []
    for prompt in common:
        ours, theirs = baseline[prompt], candidate[prompt]
        token = first_divergence(ours, theirs)
        if token is not None:
            window = slice(token, token + context_tokens)
            divergences.append(Divergence(prompt, token, list(ours[window]), list(theirs[window])))
    return Equivalence(len(common), len(common) - len(divergences), within_tokens, max_share, divergences)


def merge(checks: Sequence[Equivalence]) -> Equivalence | None:
    """One candidate measured in several launches: a prompt differs if it differed in any, at its earliest."""
    if not checks:
        return None
    earliest: dict[int, Divergence] = {}
    for check in checks:
        for d in check.divergences:
            if d.prompt not in earliest or d.token < earliest[d.prompt].token:
                earliest[d.prompt] = d
    compared = max(c.compared for c in checks)
    first = checks[0]
    ordered = [earliest[p] for p in sorted(earliest)]
    return Equivalence(compared, compared - len(ordered), first.within_tokens, first.max_share, ordered)
