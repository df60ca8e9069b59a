"""A profiler trace summarised per speculative phase (pure): per decode step at each batch size, the time in draft,
target verify, draft extend and everything else, the top kernels of each phase and how much of verify the NCCL
collectives take; and the difference between two such summaries, in words.

Phases come from SGLang's step spans, one per model-runner forward (`step[TARGET_VERIFY bs=4]`,
`step[DRAFT_EXTEND bs=4]`, `step[DECODE bs=4]`: a draft forward when the trace has verify steps, the target's decode
otherwise; `step[EXTEND ...]` is a prefill and no decode step). Spans on the GPU (`gpu_user_annotation`) are read as
they are; spans only on the CPU (`user_annotation`) take the GPU time of the kernels they launched (matched by
correlation id). A decode step is one iteration: its draft forwards, its verify, its draft extend; "other" is the
time from the end of its last forward to the start of the next step, when the next one follows at once (a gap as
long as the step itself is the engine idling, not this step's overhead).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

PHASES = ("draft", "verify", "draft_extend", "other")
PHASE_LABELS = {"draft": "draft", "verify": "verify", "draft_extend": "draft extend", "other": "other"}
STEP_SPAN = re.compile(r"^step\[(?P<mode>[A-Z_0-9]+) bs=(?P<bs>\d+)")
COLLECTIVE = re.compile(
    r"nccl|all_?reduce|allgather|all_gather|reduce_?scatter|cross_device_reduce|all_?to_?all|custom_ar", re.I
)
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
TOP_KERNELS = 5
PREFILL_MODES = ("EXTEND", "MIXED", "SPLIT_PREFILL")
EXTEND_MODES = ("DRAFT_EXTEND", "DRAFT_EXTEND_V2")


def kernel_label(name: str) -> str:
    """A kernel's name without its template and argument lists: what a person reads in a table."""
    text = name.removeprefix("void ").strip()
    for stop in ("<", "("):
        text = text.split(stop, 1)[0]
    return text.strip()[:120] or name[:120]


def kernel_family(name: str) -> str:
    """What a kernel does, for the diff's words: all-reduce (any collective), moe, norm, attention, gemm, or its
    label."""
    if COLLECTIVE.search(name):
        return "all-reduce" if re.search(r"reduce|custom_ar", name, re.I) else "collective"
    lowered = name.lower()
    if "moe" in lowered:
        return "moe"
    if "norm" in lowered:  # before attention: flashinfer's norms carry its name too
        return "norm"
    if any(k in lowered for k in ("attn", "attention", "flash", "mla", "withpagedkvcache")):
        return "attention"
    if any(k in lowered for k in ("gemm", "nvjet", "cutlass", "xmma", "cublas", "matmul")):
        return "gemm"
    return kernel_label(name)


@dataclass
class _Span:
    phase: str  # draft | verify | draft_extend | prefill
    bs: int
    start: float  # microseconds, GPU clock
    end: float
    kernels: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class _Step:
    bs: int = 0
    spans: list[_Span] = field(default_factory=list)
    other_us: float | None = None
    other_kernels: list[dict[str, Any]] = field(default_factory=list)

    @property
    def start(self) -> float:
        return self.spans[0].start

    @property
    def end(self) -> float:
        return max(s.end for s in self.spans)

    def has(self, phase: str) -> bool:
        return any(s.phase == phase for s in self.spans)


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _complete(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Complete events ("X") with numeric ts and dur."""
    return [
        e for e in events if e.get("ph") == "X" and _num(e.get("ts")) is not None and _num(e.get("dur")) is not None
    ]


def _phase(mode: str, speculative: bool) -> str | None:
    if mode == "TARGET_VERIFY":
        return "verify"
    if mode in EXTEND_MODES:
        return "draft_extend"
    if mode == "DECODE":
        return "draft" if speculative else "verify"
    if mode in PREFILL_MODES:
        return "prefill"
    return None


def _spans(events: list[dict[str, Any]]) -> tuple[list[_Span], bool, list[dict[str, Any]]]:
    """The step spans with their kernels (GPU spans if the trace has them, else CPU spans), whether the trace is
    speculative, and the GPU events of the device the spans are on."""
    gpu_spans = [e for e in events if e.get("cat") == "gpu_user_annotation" and STEP_SPAN.match(str(e.get("name")))]
    cpu_spans = [e for e in events if e.get("cat") == "user_annotation" and STEP_SPAN.match(str(e.get("name")))]
    chosen = gpu_spans or cpu_spans
    names = [STEP_SPAN.match(str(e["name"])) for e in chosen]
    speculative = any(m and m["mode"] == "TARGET_VERIFY" for m in names)
    kernels = [e for e in events if e.get("cat") in GPU_CATS]
    if gpu_spans:
        # One rank's file holds one GPU; with several (a merged file), the busiest one speaks for all.
        per_device: dict[Any, int] = defaultdict(int)
        for e in gpu_spans:
            per_device[e.get("pid")] += 1
        device = max(per_device, key=lambda d: per_device[d])
        chosen = [e for e in gpu_spans if e.get("pid") == device]
        kernels = [k for k in kernels if k.get("pid") == device]
    spans: list[_Span] = []
    for e in chosen:
        match = STEP_SPAN.match(str(e["name"]))
        assert match is not None
        phase = _phase(match["mode"], speculative)
        if phase is None:
            continue
        spans.append(_Span(phase, int(match["bs"]), float(e["ts"]), float(e["ts"]) + float(e["dur"])))
    if gpu_spans:
        spans.sort(key=lambda s: s.start)
        starts = [s.start for s in spans]
        for k in sorted(kernels, key=lambda k: float(k["ts"])):
            i = bisect_right(starts, float(k["ts"])) - 1
            if i >= 0 and float(k["ts"]) < spans[i].end:
                spans[i].kernels.append(k)
    else:
        _attach_by_correlation(events, chosen, spans, kernels)
        spans.sort(key=lambda s: s.start)
    return spans, speculative, kernels


def _attach_by_correlation(
    events: list[dict[str, Any]], chosen: list[dict[str, Any]], spans: list[_Span], kernels: list[dict[str, Any]]
) -> None:
    """CPU spans: a kernel belongs to the span whose thread launched it (the runtime call with its correlation id lies
    inside the span); the span's time becomes the GPU time its kernels covered."""
    launches = {}
    for e in events:
        if e.get("cat") == "cuda_runtime" and isinstance(e.get("args"), dict) and "correlation" in e["args"]:
            launches[e["args"]["correlation"]] = e
    kept = [e for e in chosen if _phase(STEP_SPAN.match(str(e["name"]))["mode"], True) is not None]  # type: ignore[index]
    for k in kernels:
        launch = launches.get((k.get("args") or {}).get("correlation"))
        if launch is None:
            continue
        for cpu, span in zip(kept, spans, strict=True):
            same_thread = cpu.get("pid") == launch.get("pid") and cpu.get("tid") == launch.get("tid")
            if same_thread and float(cpu["ts"]) <= float(launch["ts"]) < float(cpu["ts"]) + float(cpu["dur"]):
                span.kernels.append(k)
                break
    for span in spans:
        if span.kernels:
            span.start = min(float(k["ts"]) for k in span.kernels)
            span.end = max(float(k["ts"]) + float(k["dur"]) for k in span.kernels)


def _steps(spans: list[_Span], speculative: bool) -> tuple[list[_Step], int]:
    """Decode steps in order, and the number of prefill forwards. Steps cut by the profile's edges are dropped."""
    steps: list[_Step] = []
    boundaries: list[float] = []  # every step's and prefill's start, for the "other" gaps
    current: _Step | None = None
    prefills = 0
    for span in spans:
        if span.phase == "prefill":
            prefills += 1
            boundaries.append(span.start)
            current = None
            continue
        starts_new = current is None or (current.has("verify") and span.phase != "draft_extend")
        if speculative and span.phase == "draft_extend" and current is not None and current.has("draft_extend"):
            starts_new = True
        if starts_new:
            current = _Step()
            steps.append(current)
            boundaries.append(span.start)
        assert current is not None
        current.spans.append(span)
    has_draft = any(s.phase == "draft" for s in spans)
    whole = [s for s in steps if s.has("verify") and (not speculative or not has_draft or s.has("draft"))]
    boundaries.sort()
    for step in whole:
        step.bs = next(s.bs for s in step.spans if s.phase == "verify")
        i = bisect_right(boundaries, step.start)
        if i < len(boundaries):
            gap = boundaries[i] - step.end
            busy = sum(s.end - s.start for s in step.spans)
            if 0 <= gap <= busy:
                step.other_us = gap
    return whole, prefills


def _kernels_in_gaps(steps: list[_Step], kernels: list[dict[str, Any]]) -> None:
    """Kernels between a step's last forward and the next step: the step's "other" work."""
    ordered = sorted(kernels, key=lambda k: float(k["ts"]))
    starts = [float(k["ts"]) for k in ordered]
    for step in steps:
        if step.other_us is None:
            continue
        lo, hi = bisect_right(starts, step.end - 1e-9), bisect_right(starts, step.end + step.other_us - 1e-9)
        step.other_kernels = ordered[lo:hi]


def _top(totals: dict[str, float], per: int, phase_ms: float) -> list[dict[str, Any]]:
    rows = sorted(totals.items(), key=lambda kv: -kv[1])[:TOP_KERNELS]
    return [
        {
            "name": name[:300],
            "label": kernel_label(name),
            "family": kernel_family(name),
            "ms": round(us / per / 1000, 4),
            "share": round(us / per / 1000 / phase_ms, 4) if phase_ms > 0 else None,
        }
        for name, us in rows
    ]


def summarise(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The summary of one rank's trace events (JSON-ready): per batch size, mean ms per decode step of each phase,
    the top kernels of each phase, and the collectives' ms and share of verify."""
    complete = _complete(events)
    spans, speculative, kernels = _spans(complete)
    steps, prefills = _steps(spans, speculative)
    _kernels_in_gaps(steps, kernels)
    by_bs: dict[int, list[_Step]] = defaultdict(list)
    for step in steps:
        by_bs[step.bs].append(step)
    rows = []
    for bs in sorted(by_bs):
        group = by_bs[bs]
        n = len(group)
        phase_us: dict[str, float] = defaultdict(float)
        kernel_us: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for step in group:
            for span in step.spans:
                phase_us[span.phase] += span.end - span.start
                for k in span.kernels:
                    kernel_us[span.phase][str(k.get("name"))] += float(k["dur"])
            for k in step.other_kernels:
                kernel_us["other"][str(k.get("name"))] += float(k["dur"])
        with_other = [s.other_us for s in group if s.other_us is not None]
        phases = {p: round(phase_us[p] / n / 1000, 4) for p in ("draft", "verify", "draft_extend")}
        phases["other"] = round(sum(with_other) / len(with_other) / 1000, 4) if with_other else 0.0
        collective_us = sum(us for name, us in kernel_us["verify"].items() if COLLECTIVE.search(name))
        collective_ms = collective_us / n / 1000
        rows.append(
            {
                "batch_size": bs,
                "steps": n,
                "step_ms": round(sum(phases.values()), 4),
                "phases": phases,
                "top_kernels": {p: _top(kernel_us[p], n, phases[p]) for p in PHASES},
                "verify_collective_ms": round(collective_ms, 4),
                "verify_collective_share": round(collective_ms / phases["verify"], 4) if phases["verify"] else None,
                "families": {
                    p: {f: round(ms, 4) for f, ms in _families(kernel_us[p], n).items()} for p in ("draft", "verify")
                },
            }
        )
    return {
        "speculative": speculative,
        "decode_steps": len(steps),
        "prefill_forwards": prefills,
        "annotated": bool(spans),
        "by_batch_size": rows,
    }


def _families(totals: dict[str, float], per: int) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for name, us in totals.items():
        out[kernel_family(name)] += us / per / 1000
    return dict(sorted(out.items(), key=lambda kv: -kv[1])[:8])


# ---- two summaries compared ------------------------------------------------------------------------------


def _row(summary: dict[str, Any], bs: int) -> dict[str, Any] | None:
    return next((r for r in summary.get("by_batch_size") or [] if r["batch_size"] == bs), None)


def _shared_batch_size(before: dict[str, Any], after: dict[str, Any]) -> int | None:
    """The batch size both summaries measured most steps at (the smaller one on a tie)."""
    sizes = {r["batch_size"]: r["steps"] for r in before.get("by_batch_size") or []}
    shared = [(min(sizes[r["batch_size"]], r["steps"]), r["batch_size"]) for r in after.get("by_batch_size") or []
              if r["batch_size"] in sizes]  # fmt: skip
    return max(shared, key=lambda t: (t[0], -t[1]))[1] if shared else None


def shared_batch_sizes(before: dict[str, Any], after: dict[str, Any]) -> list[int]:
    """Every batch size both summaries measured, smallest first."""
    sizes = {r["batch_size"] for r in before.get("by_batch_size") or []}
    return sorted(sizes & {r["batch_size"] for r in after.get("by_batch_size") or []})


def _pct(a: float, b: float) -> float | None:
    return (b - a) / a * 100 if a > 0 else None


def _ms(value: float) -> str:
    return f"{value:.1f}" if value >= 1 or value == 0 else f"{value:.2f}"


def diff(before: dict[str, Any], after: dict[str, Any], batch_size: int | None = None) -> dict[str, Any] | None:
    """How `after`'s decode step differs from `before`'s at one batch size (the one both measured most, unless
    given): each phase's ms before and after, the phase that moved most, and in it the kernel family that moved most;
    with the sentence a page shows ("verify 18.1 -> 32.6 ms (+80%): all-reduce 3.4 -> 6.6 ms; draft 3.0 -> 4.5 ms").
    None when they share no batch size."""
    bs = batch_size if batch_size is not None else _shared_batch_size(before, after)
    a, b = (_row(before, bs), _row(after, bs)) if bs is not None else (None, None)
    if a is None or b is None:
        return None
    phases = []
    for p in PHASES:
        x, y = a["phases"].get(p, 0.0), b["phases"].get(p, 0.0)
        phases.append(
            {"phase": p, "label": PHASE_LABELS[p], "before_ms": x, "after_ms": y, "delta_ms": round(y - x, 4),
             "pct": _pct(x, y)}
        )  # fmt: skip
    lead = max(phases, key=lambda r: abs(r["delta_ms"]))
    family = None
    if lead["phase"] in ("draft", "verify"):
        fa, fb = a["families"].get(lead["phase"], {}), b["families"].get(lead["phase"], {})
        moves = [(abs(fb.get(f, 0.0) - fa.get(f, 0.0)), f) for f in {*fa, *fb}]
        if moves:
            name = max(moves)[1]
            family = {"family": name, "before_ms": fa.get(name, 0.0), "after_ms": fb.get(name, 0.0)}
    words = f"{PHASE_LABELS[lead['phase']]} {_ms(lead['before_ms'])} -> {_ms(lead['after_ms'])} ms"
    if lead["pct"] is not None:
        words += f" ({lead['pct']:+.0f}%)"
    details = []
    if family:
        details.append(f"{family['family']} {_ms(family['before_ms'])} -> {_ms(family['after_ms'])} ms")
    for row in phases:
        if row is not lead and row["phase"] != "other" and abs(row["delta_ms"]) >= 0.05:
            details.append(f"{PHASE_LABELS[row['phase']]} {_ms(row['before_ms'])} -> {_ms(row['after_ms'])} ms")
    text = words + (": " + "; ".join(details) if details else "")
    return {"batch_size": bs, "phases": phases, "lead": lead["phase"], "lead_family": family, "text": text}
