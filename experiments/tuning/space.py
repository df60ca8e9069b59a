"""The search space of an auto-tuning study (pure): a sweep's value lists (`sweeps.Sweep`) over one candidate
config, the configs its engine would run (`sweeps.build_grid`, so its rules and refusals are the sweep's own), and
the same space as Optuna distributions, one categorical per varied parameter: steps, topk and draft tokens over an
SGLang base, steps alone (vLLM's num_speculative_tokens) over a vLLM one, and each varied flag and variable.

A config is known by its candidate name (`s2-k1`, `s2-k4-d6 NCCL_PROTO=LL`, `num_speculative_tokens 3`): unique in
the grid, readable on a page, stable across rounds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from experiments.rules import sweeps

# Bounds of one study (field errors, not silent truncation): a space the budget cannot even sample a tenth of is a
# typing slip.
MAX_SPACE = 400

# Optuna's names of the sweep's lists (Sweep's attributes, not launch fields: a vLLM sweep's K is its steps too).
_STEPS, _TOPK, _DRAFT, _METHOD = "steps", "topk", "draft_tokens", "method"


@dataclass(frozen=True)
class SearchSpace:
    sweep: sweeps.Sweep
    grid: sweeps.Grid
    by_values: dict[tuple[Any, ...], str]  # (steps, topk, draft tokens run, flags..., env...) -> candidate name

    @classmethod
    def build(cls, base: Mapping[str, Any], sweep: sweeps.Sweep) -> SearchSpace:
        """Raises `sweeps.SweepError` for a space without a valid config or larger than MAX_SPACE."""
        grid = sweeps.build_grid(base, sweep)
        if not grid.candidates:
            raise sweeps.SweepError("", grid.refusal(1) or "No valid config in this space.")
        if len(grid.candidates) > MAX_SPACE:
            raise sweeps.SweepError(
                "", f"The space holds {len(grid.candidates)} configs; at most {MAX_SPACE}: shorten a value list."
            )
        by_values = {_values_key(candidate, sweep): candidate["name"] for candidate in grid.candidates}
        return cls(sweep, grid, by_values)

    @property
    def names(self) -> list[str]:
        return [candidate["name"] for candidate in self.grid.candidates]

    def candidate(self, name: str) -> dict[str, Any]:
        return next(candidate for candidate in self.grid.candidates if candidate["name"] == name)

    def distributions(self) -> dict[str, Any]:
        """Optuna's distributions of the space (optuna is imported here: see `plan._ask`)."""
        from optuna.distributions import CategoricalDistribution

        dists: dict[str, Any] = {}
        if self.sweep.methods:  # one choice per method and draft, as the candidates are named
            dists[_METHOD] = CategoricalDistribution([m.text for m in self.sweep.methods])
        if self.sweep.steps:
            dists[_STEPS] = CategoricalDistribution(self.sweep.steps)
        if self.sweep.topk:  # SGLang's; a vLLM sweep has none
            dists[_TOPK] = CategoricalDistribution(self.sweep.topk)
        if self.sweep.draft_tokens:
            dists[_DRAFT] = CategoricalDistribution(self.sweep.draft_tokens)
        for prefix, varied in (("flag", self.sweep.flags), ("env", self.sweep.env)):
            for name, values in varied:
                dists[f"{prefix}:{name}"] = CategoricalDistribution(values)
        return dists

    def name_of(self, params: Mapping[str, Any]) -> str | None:
        """The config Optuna's `params` stand for, None where SGLang would refuse it (topk 1 runs steps + 1 draft
        tokens whatever is asked, so those collapse to one config). A vLLM sweep's configs have no topk or draft
        tokens."""
        method = self._method(params.get(_METHOD))
        flags = tuple(params[f"flag:{name}"] for name, _ in self.sweep.flags)
        env = tuple(params[f"env:{name}"] for name, _ in self.sweep.env)
        shape = _shape(method.algorithm if method else None)
        if shape == _DEFAULTS:
            return self.by_values.get((method, None, None, None, *flags, *env))
        if shape == _WIDTH:
            return self.by_values.get((method, None, None, params.get(_DRAFT), *flags, *env))
        steps = int(params[_STEPS])
        topk = int(params[_TOPK]) if _TOPK in params else None
        draft = steps + 1 if topk == 1 else params.get(_DRAFT)
        return self.by_values.get((method, steps, topk, draft, *flags, *env))

    def _method(self, text: Any) -> sweeps.MethodChoice | None:
        return next((m for m in self.sweep.methods if m.text == text), None)

    def params_of(self, name: str) -> dict[str, Any]:
        """Optuna params of a config (for topk 1, the draft-token value SGLang runs if the list has it, else the
        list's first)."""
        candidate = self.candidate(name)
        params: dict[str, Any] = {}
        method = _method_of(candidate, self.sweep)
        if method is not None:
            params[_METHOD] = method.text
        # A method that does not take a list still has a value for it in Optuna's space: the list's first.
        if self.sweep.steps:
            steps = candidate.get(sweeps.STEPS)
            params[_STEPS] = steps if steps in self.sweep.steps else self.sweep.steps[0]
        if self.sweep.topk:
            topk = candidate.get(sweeps.TOPK)
            params[_TOPK] = topk if topk in self.sweep.topk else self.sweep.topk[0]
        if self.sweep.draft_tokens:
            draft = candidate.get(sweeps.DRAFT)
            params[_DRAFT] = draft if draft in self.sweep.draft_tokens else self.sweep.draft_tokens[0]
        args = list(candidate.get("extra_args") or [])
        for flag, _ in self.sweep.flags:
            params[f"flag:{flag}"] = sweeps.flag_value(args, flag)
        for env_name, _ in self.sweep.env:
            params[f"env:{env_name}"] = (candidate.get("env") or {})[env_name]
        return params


_TREE, _WIDTH, _DEFAULTS = "tree", "width", "defaults"


def _shape(algorithm: str | None) -> str:
    """Which of the sweep's lists a method's candidates take (`sweeps.build_grid`'s grids): the steps (and, on
    SGLang, topk and draft tokens), the draft tokens alone, or none."""
    if algorithm is None or algorithm in sweeps.EAGLE_FAMILY or algorithm in sweeps.VLLM_K_METHODS:
        return _TREE
    return _WIDTH if algorithm in sweeps.WIDTH_METHODS else _DEFAULTS


def _method_of(candidate: Mapping[str, Any], sweep: sweeps.Sweep) -> sweeps.MethodChoice | None:
    """The sweep's method a candidate runs (None: the sweep compares no methods)."""
    algorithm = candidate.get("speculative_algorithm")
    draft = candidate.get("speculative_draft_model_path")
    matches = [m for m in sweep.methods if m.algorithm == algorithm]
    exact = [m for m in matches if m.draft == draft]
    return exact[0] if exact else next((m for m in matches if m.draft is None), None)


def _values_key(candidate: Mapping[str, Any], sweep: sweeps.Sweep) -> tuple[Any, ...]:
    args = list(candidate.get("extra_args") or [])
    flags = tuple(sweeps.flag_value(args, flag) for flag, _ in sweep.flags)
    env = tuple((candidate.get("env") or {}).get(name) for name, _ in sweep.env)
    method = _method_of(candidate, sweep)
    # A vLLM candidate has neither topk nor draft tokens: None, as `name_of` reads its params; a width method's has
    # only its draft tokens, a defaults method's nothing.
    return (method, candidate.get(sweeps.STEPS), candidate.get(sweeps.TOPK), candidate.get(sweeps.DRAFT), *flags, *env)
