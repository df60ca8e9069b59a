"""The deployment view of an experiment: each config's frontier (output tok/s per GPU against the pace a user sees,
1000 / TPOT) over the measured concurrencies, the frontier's best points, and each candidate's gain in tokens per GPU
at the pace the baseline's users get. Built from the cells `reports.build_report` found usable; pure reading."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from experiments.analysis import deployment, energy, slo
from experiments.models import ServerConfig

DEFINITIONS = {
    "tok_s_per_gpu": "output tokens per second of the whole benchmark cell / the GPUs one server occupies "
    "(tp x pp x dp); input tokens are not counted",
    "interactivity": "1000 / the cell's mean TPOT (ms): the tokens per second one user sees while an answer streams, "
    "time to the first token left out",
    "cost_per_million_output_tokens": "the host's price of a GPU-hour x the GPUs one server occupies / (output tok/s "
    "x 3600) x 1,000,000, at the cell's mean throughput; input tokens ride along free",
    "gain": "the candidate's tok/s per GPU / the baseline's, both read at the same interactivity (log-linear "
    "between measured concurrencies, never beyond them), with an approximate 95% interval",
}


@dataclass
class DeploymentView:
    baseline: str
    cost_per_gpu_hour: float | None = None
    # The profile's latency objective, and per config the highest measured concurrency whose cells all meet it.
    slo: slo.Slo | None = None
    slo_reach: dict[str, int | None] = field(default_factory=dict)
    curves: dict[str, list[deployment.CurvePoint]] = field(default_factory=dict)
    gpus: dict[str, int] = field(default_factory=dict)
    frontier: list[deployment.FrontierPoint] = field(default_factory=list)
    # Per candidate, its gain at each of the baseline's measured paces (lowest concurrency first); None where the
    # candidate's curve does not reach that pace.
    gains: dict[str, list[tuple[int, float, deployment.Gain | None]]] = field(default_factory=dict)

    @property
    def headlines(self) -> list[str]:
        """Per candidate one sentence: its gain at the pace of the baseline at its lowest concurrency."""
        out = []
        for name, gains in self.gains.items():
            if not gains:
                continue
            level, pace, gain = gains[0]
            where = f"At {pace:.0f} tok/s per user (the baseline's pace at c={level})"
            if gain is None:
                out.append(f"{where}, {name} has no measured point to compare: its pace lies outside that.")
                continue
            interval = f" [{gain.low:.2f}, {gain.high:.2f}]" if gain.low is not None and gain.high is not None else ""
            out.append(f"{where}, {name} serves {gain.ratio:.2f}x{interval} the baseline's tokens per GPU.")
        if self.slo is not None:
            reach = [
                f"{name} up to c={level}" if level is not None else f"{name} at no measured concurrency"
                for name, level in self.slo_reach.items()
            ]
            out.append(f"Under the SLO ({self.slo_text}): " + "; ".join(reach) + ".")
        return out

    @property
    def slo_text(self) -> str:
        if self.slo is None:
            return ""
        return f"{self.slo.percentile} {self.slo.metric.replace('_', ' ').upper()} ≤ {self.slo.limit_ms:g} ms"

    def cost(self, name: str, point: deployment.CurvePoint) -> float | None:
        """Money per million output tokens of config `name` at `point` (None without the host's GPU-hour price)."""
        gpus = self.gpus[name]
        return energy.cost_per_million_tokens(self.cost_per_gpu_hour, gpus, point.tok_s_per_gpu * gpus)

    @property
    def cost_rows(self) -> list[tuple[str, list[tuple[int, float | None]]]]:
        """Per config, (concurrency, cost per million output tokens) by concurrency; empty without a price."""
        if self.cost_per_gpu_hour is None:
            return []
        return [(name, [(p.concurrency, self.cost(name, p)) for p in points]) for name, points in self.curves.items()]

    def as_json(self) -> dict[str, Any]:
        return {
            "definitions": DEFINITIONS,
            "gpus": self.gpus,
            "cost_per_gpu_hour": self.cost_per_gpu_hour,
            "curves": {
                name: [_point_json(p) | {"cost_per_million_output_tokens": self.cost(name, p)} for p in points]
                for name, points in self.curves.items()
            },
            "frontier": [{"config": f.config, "concurrency": f.point.concurrency} for f in self.frontier],
            "gains": {
                name: [
                    {"baseline_concurrency": level, "interactivity": _round(pace)}
                    | ({"ratio": g.ratio, "low": g.low, "high": g.high} if g else {"ratio": None})
                    for level, pace, g in gains
                ]
                for name, gains in self.gains.items()
            },
            "slo": (
                {"metric": self.slo.metric, "percentile": self.slo.percentile, "limit_ms": self.slo.limit_ms}
                if self.slo
                else None
            ),
            "slo_highest_concurrency": self.slo_reach if self.slo else None,
            "headlines": self.headlines,
        }


def deployment_view(
    usable: Sequence[Mapping[str, Any]],
    baseline: ServerConfig,
    candidates: Sequence[ServerConfig],
    *,
    cost_per_gpu_hour: float | None = None,
    objective: slo.Slo | None = None,
) -> DeploymentView | None:
    """The view from usable measurement rows (`run__config__name`, `concurrency`, `output_throughput`,
    `mean_tpot_ms`); None until the baseline has a point (cells without a TPOT are left out)."""
    configs = {c.name: c for c in (baseline, *candidates)}
    samples: dict[str, dict[int, tuple[list[float], list[float]]]] = defaultdict(dict)
    for m in usable:
        tpot, throughput = _positive(m.get("mean_tpot_ms")), _positive(m.get("output_throughput"))
        if m["run__config__name"] not in configs or tpot is None or throughput is None:
            continue
        cell = samples[m["run__config__name"]].setdefault(m["concurrency"], ([], []))
        cell[0].append(throughput)
        cell[1].append(tpot)
    if baseline.name not in samples:
        return None
    view = DeploymentView(baseline.name, cost_per_gpu_hour, objective)
    for name in configs:
        if name not in samples:
            continue
        cells = [deployment.CellSamples(c, t, p) for c, (t, p) in sorted(samples[name].items())]
        view.gpus[name] = configs[name].gpu_count
        view.curves[name] = deployment.deployment_curve(cells, view.gpus[name])
    view.frontier = deployment.pareto_front(view.curves)
    if objective is not None:
        for name in view.curves:
            judged = [(m["concurrency"], m) for m in usable if m["run__config__name"] == name]
            view.slo_reach[name] = slo.highest_concurrency_meeting(judged, objective)
    reference = view.curves[baseline.name]
    for candidate in candidates:
        if candidate.name in view.curves:
            view.gains[candidate.name] = [
                (
                    point.concurrency,
                    point.interactivity,
                    deployment.gain_at_interactivity(view.curves[candidate.name], reference, point.interactivity),
                )
                for point in reference
            ]
    return view


def _positive(value: Any) -> float | None:
    """`value` as a float when it is a positive finite number; else None."""
    if isinstance(value, int | float) and math.isfinite(value) and value > 0:
        return float(value)
    return None


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _point_json(p: deployment.CurvePoint) -> dict[str, Any]:
    return {
        "concurrency": p.concurrency,
        "tok_s_per_gpu": p.tok_s_per_gpu,
        "tok_s_per_gpu_low": p.tok_s_per_gpu_low,
        "tok_s_per_gpu_high": p.tok_s_per_gpu_high,
        "interactivity": p.interactivity,
        "interactivity_low": p.interactivity_low,
        "interactivity_high": p.interactivity_high,
        "n": p.n,
    }
