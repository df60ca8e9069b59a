"""The deployment view of an experiment (pure): each config's frontier (output tok/s per GPU against the pace a user
sees, 1000 / TPOT) over the measured concurrencies, the frontier's best points, and each candidate's gain in tokens
per GPU at the pace the baseline's users get; per config and concurrency its goodput and SLO attainment under the
profile's SLO, its cost per million tokens and its energy per token. Built from the cells `reports.build_report`
found usable (`deployment_view`), with the request rows and power samples `reads.deployment.cell_facts` reads."""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from . import deployment, energy, slo
from .comparison import ComparisonRow
from .intervals import ratio_text


class Config(Protocol):
    """What the view reads of a config: its name, the GPUs one server of it occupies and its engine's name."""

    @property
    def name(self) -> str: ...

    @property
    def gpu_count(self) -> int: ...

    @property
    def engine_label(self) -> str: ...


DEFINITIONS = {
    "tok_s_per_gpu": "output tokens per second of the whole benchmark cell / the GPUs one server occupies "
    "(tp x pp x dp); input tokens are not counted",
    "interactivity": "1000 / the cell's mean TPOT (ms): the tokens per second one user sees while an answer streams, "
    "time to the first token left out",
    "cost_per_million_output_tokens": "the host's price of a GPU-hour x the GPUs one server occupies / (output tok/s "
    "x 3600) x 1,000,000, at the cell's mean throughput; input tokens ride along free",
    "gain": "the candidate's tok/s per GPU / the baseline's at the same speed per user: the baseline at one of its "
    "measured concurrencies, the candidate at that interactivity (log-linear between its measured concurrencies, "
    "never beyond them); its 95% interval carries both sides' spread over passes and the pace's own (where that "
    "pace falls on the candidate's curve is measured too), and is never narrower than the measured points' own",
    "same_concurrency": "the comparison's speedup at the baseline's concurrency: output tok/s against output tok/s "
    "with as many requests in flight each, every config at its own speed per user (the verdict's question)",
    "cost_per_million_input_tokens": "the same GPU time charged to the input tokens instead: the host's price of a "
    "GPU-hour x the GPUs / (input tok/s x 3600) x 1,000,000; the two costs do not add up, each pays for it all",
    "slo_met": "the profile's SLO statistic of every pass at that concurrency (e.g. p90 TPOT over the pass's "
    "requests) at most the limit; a config meets it up to the highest concurrency where it does",
    "goodput": "requests per second (and their output tokens per second) of the requests that meet the SLO on their "
    "own value (their TTFT, their TPOT, the mean of their inter-token gaps, or their end-to-end latency; the "
    "percentile does not apply to one request), over the cells' wall time, as vLLM's --goodput counts them",
    "slo_attainment": "the share of all the cells' requests, failed ones included, that meet the SLO on their own",
    "joules_per_output_token": "each GPU's power integrated over the cell's window (trapezoid rule, interpolated at "
    "the window's edges), summed over every GPU the host reported (one run holds the host, idle GPUs included), "
    "/ the cell's output tokens; none when a GPU's samples leave more than 3 s of the window unread",
}
# A longer gap between two power samples is no measurement (reference d8: aggregate_power's 3 s).
MAX_POWER_GAP_S = 3.0
WINDOW_NOT_RECORDED = "the cell's window was not recorded (measured before specdash stamped it, or imported)"


@dataclass(frozen=True)
class CellFacts:
    """What the usable cells' rows of `build_report` do not carry: each measurement's request rows and the end of
    its window, and each run's power samples ((t seconds, gpu, watts), by time)."""

    requests: Mapping[int, list[dict[str, Any]]] = field(default_factory=dict)
    ended_at: Mapping[int, datetime | None] = field(default_factory=dict)
    power: Mapping[int, list[tuple[float, int, float | None]]] = field(default_factory=dict)


@dataclass(frozen=True)
class CellEnergy:
    joules_per_token: float | None
    joules: float | None
    # Why there is no figure: the gaps in the samples, named by run, pass and GPU (seconds from the cell's start).
    gaps: tuple[str, ...] = ()


@dataclass(frozen=True)
class DeploymentCell:
    """One config at one concurrency, its passes pooled: mean throughputs and what they cost, the SLO (statistic
    met by every pass, and goodput and attainment from the request rows), and energy per output token."""

    concurrency: int
    passes: int
    output_throughput: float
    input_throughput: float
    cost_per_million_output_tokens: float | None
    cost_per_million_input_tokens: float | None
    slo_met: bool | None
    goodput: slo.Goodput | None
    energy: CellEnergy


@dataclass
class DeploymentView:
    baseline: str
    cost_per_gpu_hour: float | None = None
    # The profile's latency objective, and per config the highest measured concurrency whose cells all meet it.
    slo: slo.Slo | None = None
    slo_reach: dict[str, int | None] = field(default_factory=dict)
    slo_meeting: dict[str, list[int]] = field(default_factory=dict)
    # Per candidate, the comparison's verdict by concurrency (for the sentence under the SLO).
    verdicts: dict[str, dict[int, str]] = field(default_factory=dict)
    # Per candidate, the comparison's row by concurrency: the same question at the same concurrency.
    same_concurrency: dict[str, dict[int, ComparisonRow]] = field(default_factory=dict)
    # Per config, its cells by ascending concurrency.
    cells: dict[str, list[DeploymentCell]] = field(default_factory=dict)
    curves: dict[str, list[deployment.CurvePoint]] = field(default_factory=dict)
    gpus: dict[str, int] = field(default_factory=dict)
    frontier: list[deployment.FrontierPoint] = field(default_factory=list)
    # Per candidate, its gain at each of the baseline's measured paces (lowest concurrency first); None where the
    # candidate's curve does not reach that pace.
    gains: dict[str, list[tuple[int, float, deployment.Gain | None]]] = field(default_factory=dict)
    # Per config, the engine that serves it ("SGLang", "vLLM").
    engines: dict[str, str] = field(default_factory=dict)
    # (candidate, concurrency) of the rows the comparison lets be named the fastest (not outputs that differ, not a
    # collapsed acceptance, not simulated acceptance).
    contenders: set[tuple[str, int]] = field(default_factory=set)

    @property
    def engine_headline(self) -> str | None:
        """Where candidates of two or more engines are compared: at each concurrency, the fastest candidate by the one
        comparison (its speedup over the baseline, with the interval) and its engine, among the rows it lets win;
        None with one engine."""
        if len({self.engines.get(name) for name in self.same_concurrency}) < 2:
            return None
        best: dict[int, ComparisonRow] = {}
        for rows in self.same_concurrency.values():
            for level, row in rows.items():
                if (row.candidate, level) not in self.contenders:
                    continue
                if row.speedup is not None and (level not in best or row.speedup > (best[level].speedup or 0)):
                    best[level] = row
        if not best:
            return None
        parts = [
            f"c={level}: {row.candidate} ({self.engines.get(row.candidate, '?')}), "
            f"{ratio_text(row.speedup, row.ci_low, row.ci_high, missing='')} the baseline's output tokens per second"
            for level, row in sorted(best.items())
        ]
        return "Fastest by engine at each concurrency: " + "; ".join(parts) + "."

    @property
    def headlines(self) -> list[str]:
        """Per candidate, at the baseline's lowest concurrency, each question with its own answer: the comparison's
        at the same concurrency (when its row is known), and the gain per GPU at the same speed per user."""
        out = []
        for name, gains in self.gains.items():
            if not gains:
                continue
            level, pace, gain = gains[0]
            row = self.same_concurrency.get(name, {}).get(level)
            if row is not None:
                said = ratio_text(row.speedup, row.ci_low, row.ci_high, missing="")
                out.append(
                    f"At the same concurrency, c={level} each, {name} serves {said} the baseline's output tokens per "
                    f"second ({row.verdict})."
                )
            question = f"At {same_pace(pace)} (the baseline's at c={level}"
            if gain is None:
                out.append(f"{question}), {name} has no measured point to compare: its curve does not reach it.")
                continue
            said = ratio_text(gain.ratio, gain.low, gain.high, missing="")
            out.append(f"{question}, {name}'s {_read_from(gain)}), {name} serves {said} the baseline's tokens per GPU.")
        if self.engine_headline is not None:
            out.append(self.engine_headline)
        if self.slo is not None:
            out.extend(self.slo_headlines)
        return out

    @property
    def slo_headlines(self) -> list[str]:
        """Per candidate: up to which concurrency it is faster while it meets the SLO, and where each meets it."""
        if self.slo is None:
            return []
        reach = self.slo_reach.get(self.baseline)
        candidates = [name for name in self.slo_reach if name != self.baseline]
        if not candidates:
            where = f"up to c={reach}" if reach is not None else "at no measured concurrency"
            return [f"Under the SLO ({self.slo_text}), {self.baseline} meets it {where}."]
        return [
            slo.candidate_headline(
                name, self.slo, self.verdicts.get(name, {}), self.slo_meeting.get(name, []), self.baseline, reach
            )
            for name in candidates
        ]

    @property
    def slo_text(self) -> str:
        return "" if self.slo is None else slo.describe(self.slo)

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

    @property
    def cell_rows(self) -> list[tuple[str, DeploymentCell]]:
        """(config, cell) for the page's table, config by config."""
        return [(name, cell) for name, cells in self.cells.items() for cell in cells]


def deployment_view(
    usable: Sequence[Mapping[str, Any]],
    baseline: Config,
    candidates: Sequence[Config],
    *,
    cost_per_gpu_hour: float | None = None,
    objective: slo.Slo | None = None,
    rows: Iterable[ComparisonRow] = (),
    facts: CellFacts | None = None,
    may_win: Callable[[ComparisonRow], bool] | None = None,
) -> DeploymentView | None:
    """The view from usable measurement rows (`id`, `run_id`, `run__config__name`, `concurrency`, `pass_index`,
    `duration_s`, `output_throughput`, `input_throughput`, `mean_tpot_ms` and the SLO's statistic); None until the
    baseline has a point (cells without a TPOT are left out of the curves, not of the cells). `rows`: the one
    comparison's rows, whose verdicts mark the cells and whose ratios are said beside the gains as the answer at the
    same concurrency; `facts`: what `reads.deployment.cell_facts` read for these rows; `may_win`: the comparison's rule
    of which rows may be named the fastest (`verdicts.Comparison.may_win`), all where None."""
    configs = {c.name: c for c in (baseline, *candidates)}
    curves = curves_of(usable, {name: config.gpu_count for name, config in configs.items()})
    if baseline.name not in curves:
        return None
    view = DeploymentView(baseline.name, cost_per_gpu_hour, objective)
    view.curves = curves
    view.gpus = {name: configs[name].gpu_count for name in curves}
    view.engines = {name: getattr(config, "engine_label", "SGLang") for name, config in configs.items()}
    view.frontier = deployment.pareto_front(view.curves)
    if objective is not None:
        for name in view.curves:
            judged = [(m["concurrency"], m) for m in usable if m["run__config__name"] == name]
            view.slo_meeting[name] = slo.concurrencies_meeting(judged, objective)
            view.slo_reach[name] = max(view.slo_meeting[name], default=None)
    for row in rows:
        if may_win is None or may_win(row):
            view.contenders.add((row.candidate, row.concurrency))
        view.verdicts.setdefault(row.candidate, {})[row.concurrency] = row.verdict
        view.same_concurrency.setdefault(row.candidate, {})[row.concurrency] = row
    facts = facts or CellFacts()
    for name in view.curves:
        own = [m for m in usable if m["run__config__name"] == name]
        view.cells[name] = _cells(own, view.gpus[name], cost_per_gpu_hour, objective, facts)
    reference = view.curves[baseline.name]
    for candidate in candidates:
        if candidate.name in view.curves:
            view.gains[candidate.name] = [
                (point.concurrency, point.interactivity, deployment.gain_at_pace_of(view.curves[candidate.name], point))
                for point in reference
            ]
    return view


def curves_of(usable: Iterable[Mapping[str, Any]], gpus: Mapping[str, int]) -> dict[str, list[deployment.CurvePoint]]:
    """The deployment curve of each config named in `gpus` (name -> GPUs it runs on) from usable measurement rows
    (`run__config__name`, `concurrency`, `output_throughput`, `mean_tpot_ms`), in the order of `gpus`; a row without
    a TPOT is left out, and a config without any row has no curve."""
    samples: dict[str, dict[int, tuple[list[float], list[float]]]] = defaultdict(dict)
    for m in usable:
        tpot, throughput = _positive(m.get("mean_tpot_ms")), _positive(m.get("output_throughput"))
        if m["run__config__name"] not in gpus or tpot is None or throughput is None:
            continue
        cell = samples[m["run__config__name"]].setdefault(m["concurrency"], ([], []))
        cell[0].append(throughput)
        cell[1].append(tpot)
    return {
        name: deployment.deployment_curve(
            [deployment.CellSamples(c, t, p) for c, (t, p) in sorted(samples[name].items())], gpus[name]
        )
        for name in gpus
        if name in samples
    }


def _cells(
    rows: Sequence[Mapping[str, Any]],
    gpus: int,
    cost_per_gpu_hour: float | None,
    objective: slo.Slo | None,
    facts: CellFacts,
) -> list[DeploymentCell]:
    by_level: dict[int, list[Mapping[str, Any]]] = defaultdict(list)
    for m in rows:
        by_level[m["concurrency"]].append(m)
    cells = []
    for level, passes in sorted(by_level.items()):
        output = sum(m["output_throughput"] for m in passes) / len(passes)
        given = [m.get("input_throughput") for m in passes]
        input_tok_s = sum(v for v in given if isinstance(v, int | float) and math.isfinite(v)) / len(passes)
        met = None
        if objective is not None:
            judged = [slo.slo_met(m, objective) for m in passes]
            met = None if None in judged else all(judged)
        cells.append(
            DeploymentCell(
                concurrency=level,
                passes=len(passes),
                output_throughput=output,
                input_throughput=input_tok_s,
                cost_per_million_output_tokens=energy.cost_per_million_tokens(cost_per_gpu_hour, gpus, output),
                cost_per_million_input_tokens=energy.cost_per_million_tokens(cost_per_gpu_hour, gpus, input_tok_s),
                slo_met=met,
                goodput=_goodput(passes, objective, facts) if objective is not None else None,
                energy=_energy(passes, facts),
            )
        )
    return cells


def _goodput(passes: Sequence[Mapping[str, Any]], objective: slo.Slo, facts: CellFacts) -> slo.Goodput | None:
    """Pooled over the passes: their requests together over their summed wall time; None when a pass has no
    request rows (a part would pass for the whole)."""
    requests = [facts.requests.get(m["id"]) for m in passes]
    if not all(requests):
        return None
    duration = sum(m["duration_s"] for m in passes)
    return slo.goodput([r for rows in requests for r in rows or []], [objective], duration)


def _energy(passes: Sequence[Mapping[str, Any]], facts: CellFacts) -> CellEnergy:
    """Joules over the passes' windows together per output token; no figure when any pass lacks one."""
    joules, tokens, gaps = 0.0, 0, []
    for m in passes:
        label = f"run {m['run_id']} pass {m['pass_index'] + 1}"
        ended = facts.ended_at.get(m["id"])
        if ended is None or not m["duration_s"] > 0:
            gaps.append(f"{label}: {WINDOW_NOT_RECORDED}")
            continue
        end = ended.timestamp()
        start = end - m["duration_s"]
        cell_tokens = max(round(m["output_throughput"] * m["duration_s"]), 1)
        samples = _near(facts.power.get(m["run_id"], []), start, end)
        # On the cell's own clock (seconds from its start), so that a gap reads as a place in the cell.
        found = energy.energy_per_token(
            [(t - start, gpu, watts) for t, gpu, watts in samples],
            0.0,
            end - start,
            cell_tokens,
            max_gap_s=MAX_POWER_GAP_S,
        )
        if found.joules is None:
            gaps.extend(f"{label}: {gap}" for gap in found.gaps)
            continue
        joules += found.joules
        tokens += cell_tokens
    if gaps:
        return CellEnergy(None, None, tuple(gaps))
    return CellEnergy(joules / tokens, joules)


def _near(
    samples: list[tuple[float, int, float | None]], start: float, end: float
) -> list[tuple[float, int, float | None]]:
    """The samples of [start - MAX_POWER_GAP_S, end + MAX_POWER_GAP_S] (sorted by time): the window's and its
    neighbours, which the edges are interpolated from; a farther one could only bridge a gap that is one anyway."""
    low = bisect.bisect_left(samples, start - MAX_POWER_GAP_S, key=lambda sample: sample[0])
    high = bisect.bisect_right(samples, end + MAX_POWER_GAP_S, key=lambda sample: sample[0])
    return samples[low:high]


def _positive(value: Any) -> float | None:
    """`value` as a float when it is a positive finite number; else None."""
    if isinstance(value, int | float) and math.isfinite(value) and value > 0:
        return float(value)
    return None


def same_pace(pace: float) -> str:
    return f"the same speed per user, {pace:.0f} tok/s each"


def _read_from(gain: deployment.Gain) -> str:
    first, *second = gain.concurrencies
    return f"between its c={first} and c={second[0]}" if second else f"at its c={first}"
