"""The CI gate (pure): `--fail-on regression,outputs-differ,slower,accept-drop:2%` read against an experiment's
JSON (`GET /api/experiments/{id}`), one check per gate x candidate (x concurrency where the gate has one).

Nothing is recomputed here: each gate reads what the API already decided, by the rules of the one comparison
(`analysis/verdicts.py`), which the experiment page shows beside each row.
- `slower`: each comparison row's `gate` (`Comparison.slower_gate`): a row whose speed verdict is slower fails;
  one that is faster, whose interval lies above 1, or that is within the minimum effect of the baseline with a
  measured spread passes; any other row is inconclusive, saying what would settle it.
- `outputs-differ`: each candidate's `outputs_gate` (`Comparison.outputs_gate`): outputs that differ fail, outputs
  compared and matching pass, outputs not compared (a sampling profile, no succeeded run yet) are inconclusive, saying
  why. Every greedy profile compares outputs, random ids included.
- `regression`: an open regression flag (`flags`, triage untriaged or acknowledged) on a config and concurrency of
  this experiment fails; a suspicion still awaiting its confirming run is inconclusive.
- `slo`: each candidate meets the profile's SLO (`deployment.slo`) at every measured concurrency where the baseline
  meets it (`deployment.cells[].slo_met`): a miss where the baseline meets it fails; a miss where the baseline misses
  too passes (speculation did not break it), saying so; a cell without the statistic, or a profile without an SLO,
  is inconclusive.
- `accept-drop:N%`: a cell's accept length more than N% below its reference fails: the same candidate and
  concurrency in `--against`'s experiment when given, else the series' last value before this experiment
  (`accept_length[].reference`). The first run of a series has no reference and passes, saying so (nothing can have
  dropped yet); with `--against`, a cell that experiment did not measure is inconclusive.
An experiment that has not finished, or whose runs failed, adds an error check; a config whose runs measure a
degenerate benchmark (`degenerate`) adds a failed one, whatever the gates. Exit: 1 when any check failed, else
2 when any is inconclusive (unless allowed) or an error, else 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

GATES = ("regression", "outputs-differ", "slower", "slo", "accept-drop")
# What a gate says of a server that answers without the readings this client applies.
_TOO_OLD = "the server's experiment JSON has no gate readings: upgrade specdash on the server"
PASSED, FAILED, INCONCLUSIVE, ERROR = "passed", "failed", "inconclusive", "error"
DEFAULT_ACCEPT_DROP = 0.02
OPEN_TRIAGE = ("untriaged", "acknowledged")


class GateSpecError(ValueError):
    pass


@dataclass(frozen=True)
class Gate:
    name: str
    threshold: float | None = None  # accept-drop: the largest allowed relative drop

    @property
    def label(self) -> str:
        return f"{self.name}:{self.threshold * 100:g}%" if self.threshold is not None else self.name


@dataclass(frozen=True)
class Check:
    gate: str
    candidate: str  # a config name, or "experiment"
    concurrency: int | None
    outcome: str
    message: str
    numbers: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.candidate + (f" c={self.concurrency}" if self.concurrency is not None else "")


def parse_fail_on(text: str) -> list[Gate]:
    """`regression,outputs-differ,slower,accept-drop:2%` -> gates; unknown names and bad thresholds refused."""
    gates: list[Gate] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, _, value = part.partition(":")
        if name not in GATES:
            raise GateSpecError(f"unknown gate {name!r}: choose from {', '.join(GATES)}")
        if name != "accept-drop":
            if value:
                raise GateSpecError(f"the {name} gate takes no value ({part!r})")
            gates.append(Gate(name))
            continue
        gates.append(Gate(name, _percent(value) if value else DEFAULT_ACCEPT_DROP))
    if not gates:
        raise GateSpecError("no gate named")
    if len({g.name for g in gates}) != len(gates):
        raise GateSpecError("a gate is named twice")
    return gates


def _percent(value: str) -> float:
    text = value.strip().removesuffix("%")
    try:
        number = float(text)
    except ValueError:
        raise GateSpecError(f"accept-drop takes a percentage like 2%, not {value!r}") from None
    if not value.strip().endswith("%"):
        raise GateSpecError(f"accept-drop takes a percentage like 2% (with the % sign), not {value!r}")
    if not 0 <= number < 100:
        raise GateSpecError("accept-drop's percentage is from 0 to 100")
    return number / 100


def evaluate(experiment: dict[str, Any], gates: Sequence[Gate], against: dict[str, Any] | None = None) -> list[Check]:
    checks = _experiment_checks(experiment) + _degenerate(experiment)
    for gate in gates:
        if gate.name == "slower":
            checks += _slower(experiment)
        elif gate.name == "outputs-differ":
            checks += _outputs_differ(experiment)
        elif gate.name == "regression":
            checks += _regression(experiment)
        elif gate.name == "slo":
            checks += _slo(experiment)
        else:
            checks += _accept_drop(experiment, gate, against)
    return checks


def exit_code(checks: Sequence[Check], *, allow_inconclusive: bool = False) -> int:
    if any(c.outcome == FAILED for c in checks):
        return 1
    if any(c.outcome == ERROR or (c.outcome == INCONCLUSIVE and not allow_inconclusive) for c in checks):
        return 2
    return 0


def _experiment_checks(experiment: dict[str, Any]) -> list[Check]:
    status = experiment.get("status")
    if status == "finished":
        return []
    if status == "failed":
        failed = [f"{r['id']} ({r['config']}: {(r.get('failure') or {}).get('kind') or r['state']})"
                  for r in experiment.get("runs", []) if r["state"] == "failed"]  # fmt: skip
        return [Check("runs", "experiment", None, ERROR, "runs failed: " + ", ".join(failed), {"failed": len(failed)})]
    return [Check("runs", "experiment", None, ERROR, f"the experiment has not finished (it is {status})")]


def _degenerate(experiment: dict[str, Any]) -> list[Check]:
    """Whatever gates were asked for: a config whose runs measure a degenerate benchmark (the API's `degenerate`,
    analysis/degenerate.py) fails, with why. Failed, not inconclusive: a looping arm or filler prompts are a defect to
    fix, never noise that more runs settle, and `--allow-inconclusive` must not turn them green
    (analysis/verdicts.py: slower_gate says the same of each row)."""
    checks = []
    baseline = experiment.get("baseline")
    for name, reason in (experiment.get("degenerate") or {}).items():
        whose = "the baseline's" if name == baseline else "its"
        checks.append(Check("degenerate", str(name), None, FAILED, f"{whose} runs are degenerate: {reason}"))
    return checks


def _gated(experiment: dict[str, Any]) -> list[str]:
    """The candidates a gate judges: not those whose accept length is simulated (a headroom study's copies measure
    what a better draft would be worth, never a result that passes or fails)."""
    simulated = set(experiment.get("simulated_acceptance") or [])
    return [name for name in experiment.get("candidates", []) if name not in simulated]


def _slower(experiment: dict[str, Any]) -> list[Check]:
    """Each row's `gate`: the server's reading of it by the `slower` rule (analysis/verdicts.py: slower_gate), the
    same the experiment page shows beside the row."""
    checks = []
    simulated = set(experiment.get("simulated_acceptance") or [])
    rows = [row for row in experiment.get("comparison") or [] if row["candidate"] not in simulated]
    for row in rows:
        numbers = {"speedup": row["speedup"], "ci_low": row.get("ci_low"), "ci_high": row.get("ci_high"),
                   "verdict": row.get("speed_verdict") or row["verdict"]}  # fmt: skip
        gate = row.get("gate")
        if not gate:
            checks.append(Check("slower", row["candidate"], row["concurrency"], ERROR, _TOO_OLD, numbers))
            continue
        checks.append(Check("slower", row["candidate"], row["concurrency"], gate["outcome"], gate["message"], numbers))
    measured = {row["candidate"] for row in rows}
    for name in _gated(experiment):
        if name not in measured:
            checks.append(Check("slower", name, None, INCONCLUSIVE, "not measured against the baseline"))
    return checks


def _slo(experiment: dict[str, Any]) -> list[Check]:
    view = experiment.get("deployment") or {}
    objective = view.get("slo")
    if not objective:
        return [Check("slo", "experiment", None, INCONCLUSIVE, "the profile sets no SLO (profile.slo_* fields)")]
    # As the page words it (analysis/slo.describe; the client is installed without the server's modules).
    said = (
        f"{objective['percentile']} {str(objective['metric']).replace('_', ' ').upper()} ≤ {objective['limit_ms']:g} ms"
    )
    cells = view.get("cells") or {}
    baseline_met = {cell["concurrency"]: cell.get("slo_met") for cell in cells.get(experiment.get("baseline"), [])}
    checks = []
    for name in _gated(experiment):
        if not cells.get(name):
            checks.append(Check("slo", name, None, INCONCLUSIVE, "not measured"))
        for cell in cells.get(name, []):
            level, met, base = cell["concurrency"], cell.get("slo_met"), baseline_met.get(cell["concurrency"])
            numbers = {"slo_met": met, "baseline_slo_met": base, "slo_attainment": cell.get("slo_attainment")}
            if met is None or (not met and base is None):
                outcome, message = INCONCLUSIVE, f"no {said} figure at c={level} for it or the baseline"
            elif met:
                outcome, message = PASSED, f"meets the SLO ({said})"
            elif base:
                outcome, message = FAILED, f"misses the SLO ({said}) where the baseline meets it"
            else:
                outcome, message = PASSED, f"misses the SLO ({said}), as the baseline does"
            checks.append(Check("slo", name, level, outcome, message, numbers))
    return checks


def _outputs_differ(experiment: dict[str, Any]) -> list[Check]:
    """Each candidate's `outputs_gate`: the server's reading (analysis/verdicts.py: outputs_gate), with the gate's
    counts where outputs were compared."""
    readings = experiment.get("outputs_gate")
    if readings is None:
        return [Check("outputs-differ", "experiment", None, ERROR, _TOO_OLD)]
    gates = experiment.get("equivalence") or {}
    checks = []
    for name in _gated(experiment):
        reading = readings.get(name) or {"outcome": INCONCLUSIVE, "message": "not measured against the baseline"}
        gate = gates.get(name)
        numbers, said = {}, ""
        if gate is not None:
            numbers = {k: gate.get(k) for k in ("compared", "identical", "early_divergences", "late_divergences",
                                                "within_tokens", "max_share")}  # fmt: skip
            said = (
                f": {gate['early_divergences']} of {gate['compared']} prompts part from the baseline before token "
                f"{gate['within_tokens']} (at most {gate['max_share']:.0%} may); {gate['identical']} identical, "
                f"{gate['late_divergences']} part later"
            )
        checks.append(Check("outputs-differ", name, None, reading["outcome"], reading["message"] + said, numbers))
    return checks


def _regression(experiment: dict[str, Any]) -> list[Check]:
    configs = [experiment.get("baseline"), *experiment.get("candidates", [])]
    levels = sorted({row["concurrency"] for row in experiment.get("comparison") or []}) or [None]
    failing: dict[tuple[str, int | None], list[str]] = {}
    numbers: dict[tuple[str, int | None], dict[str, Any]] = {}
    for flag in experiment.get("flags") or []:
        if flag.get("direction") != "regression" or flag.get("triage") not in OPEN_TRIAGE:
            continue
        for series in flag.get("series") or [flag]:
            key = (series["config"], series["concurrency"])
            failing.setdefault(key, []).append(
                f"flag {flag['id']}: {series['change']:+.1%} ({series['baseline_mean']:.1f} -> "
                f"{series['new_mean']:.1f} tok/s, {flag['triage']})"
            )
            numbers[key] = {"flag": flag["id"], "change": series["change"], "baseline_mean": series["baseline_mean"],
                            "new_mean": series["new_mean"]}  # fmt: skip
    awaiting = [s for s in experiment.get("suspicions") or [] if s.get("state") == "awaiting"]
    checks = []
    keys = [(name, level) for name in configs if name for level in levels]
    keys += [key for key in failing if key not in keys]
    for key in keys:
        name, level = key
        if key in failing:
            checks.append(Check("regression", name, level, FAILED, "; ".join(failing[key]), numbers[key]))
        else:
            checks.append(Check("regression", name, level, PASSED, "no open regression flag"))
    for suspicion in awaiting:
        runs = ", ".join(str(r) for r in suspicion.get("confirming_runs") or []) or "queued"
        checks.append(
            Check("regression", "experiment", None, INCONCLUSIVE,
                  f"suspicion {suspicion['id']} (run {suspicion['run']}) awaits its confirming runs ({runs})")
        )  # fmt: skip
    return checks


def _accept_drop(experiment: dict[str, Any], gate: Gate, against: dict[str, Any] | None) -> list[Check]:
    limit = gate.threshold if gate.threshold is not None else DEFAULT_ACCEPT_DROP
    cells_by_name = experiment.get("accept_length") or {}
    if not cells_by_name:
        said = "passed: no speculative candidate measured an accept length, so none can have dropped"
        return [Check(gate.label, "experiment", None, PASSED, said)]
    reference = against or {}
    reference_cells = {
        (name, cell["concurrency"]): {"mean": cell["mean"], "experiment": reference.get("id")}
        for name, cells in (reference.get("accept_length") or {}).items()
        for cell in cells
    }
    checks = []
    for name, cells in cells_by_name.items():
        for cell in cells:
            level = cell["concurrency"]
            base = reference_cells.get((name, level)) if against is not None else cell.get("reference")
            if not base or not base.get("mean"):
                if against is not None:
                    said = f"experiment {reference.get('id')} measured no accept length for it at c={level}"
                    checks.append(Check(gate.label, name, level, INCONCLUSIVE, said + ": pick another --against"))
                else:  # the first run of its series: nothing can have dropped yet
                    said = "passed: the first accept length of its series (no earlier run to compare with)"
                    checks.append(Check(gate.label, name, level, PASSED, said, {"accept_length": cell["mean"]}))
                continue
            drop = (base["mean"] - cell["mean"]) / base["mean"]
            numbers = {"accept_length": cell["mean"], "reference": base["mean"], "drop": round(drop, 4),
                       "limit": limit, "reference_experiment": base.get("experiment")}  # fmt: skip
            said = (
                f"accept length {cell['mean']:.3f} against {base['mean']:.3f} "
                f"(experiment {base.get('experiment')}): {-drop:+.1%}, limit -{limit:.1%}"
            )
            outcome = FAILED if drop > limit else PASSED
            checks.append(
                Check(gate.label, name, level, outcome, ("dropped: " if outcome == FAILED else "") + said, numbers)
            )
    return checks
