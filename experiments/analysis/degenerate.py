"""Degenerate benchmarks: a run whose outputs loop or are degenerate, whose prompts repeat or are filler, or whose
prompt template differs from the baseline's measures the benchmark, not the draft. Public reports show each (issue
52): a repetition loop was "the fastest arm" (7.76 tokens per verify against 2.68), acceptance was 99% on repeated
filler prompts against 88% on natural text, SGLang's `random` dataset silently repeats the prompt, and two harnesses
agreeing on acceptance reported 2.49x against 2.22x because of their prompt templates.

Pure. Read from a run's request rows (its first cell's, `PromptResults.requests`), whose keys the benchmark client
writes (workers/benchclient/metrics.py: request_rows; the loop detector in workers/benchclient/repetition.py):
`ok`, `output_len`, `accept_length`, `index`, `loop_at`, `loop_period`, `loop_unit`, `prompt_digest`,
`prompt_repeat_share`, `prompt_tokens`. Rows without those keys (runs measured before them, imported runs) yield no
finding: nothing is guessed.

The thresholds are our own choice (no engine or harness states one). They are set far from what healthy runs show:
over 400 simulated healthy runs (random ids as specdash's client sends by default and natural-text prompts, natural
text outputs, a few failed requests) the run-level flag fired in none (measured in
workers/tests/test_degenerate_benchmarks.py); a request is counted only on a loop the client's detector calls one,
which natural text essentially never forms.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

REPETITION_LOOP = "repetition_loop"
DEGENERATE_OUTPUT = "degenerate_output"
REPEATED_PROMPTS = "repeated_prompts"
FILLER_PROMPTS = "filler_prompts"
TEMPLATE_MISMATCH = "template_mismatch"
KINDS = (REPETITION_LOOP, DEGENERATE_OUTPUT, REPEATED_PROMPTS, FILLER_PROMPTS, TEMPLATE_MISMATCH)

# A run is flagged when at least this share of its requests loops (or is degenerate), and at least MIN_REQUESTS do
# (all of them, in a run of fewer): one looping answer in a hundred is a model's habit, a tenth is the benchmark.
MAX_LOOP_SHARE = 0.10
MIN_REQUESTS = 2
# An output that is empty, or one token repeated from its first or second token on (`loop_at` is where the first
# repeat is: 1 or 2 for such an output).
DEGENERATE_LOOP_AT = 2
# Prompts repeat when at least this share of the requests sent a prompt already sent in the run.
MAX_REPEATED_SHARE = 0.25
# A prompt is filler when at least this share of its 4-grams already occurred in it (natural text: a few percent;
# a pasted phrase: nearly all); a run is flagged when at least MAX_FILLER_SHARE of its prompts are.
FILLER_REPEAT_SHARE = 0.5
MAX_FILLER_SHARE = 0.25
# The arms' templates differ when the server counts a different number of prompt tokens than the baseline's
# server did for the same prompt, in more than this share of the prompts both sent (the same prompt through the
# same template is counted the same way every time).
MAX_TEMPLATE_SHARE = 0.05
# Acceptance is "not a property of the draft" when the affected requests accept this much more than the others.
ACCEPTANCE_INFLATION = 1.10


@dataclass(frozen=True)
class Finding:
    kind: str  # one of KINDS
    count: int  # the affected requests (or prompts)
    total: int  # of how many
    sentence: str  # what every reader prints

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "count": self.count, "total": self.total, "sentence": self.sentence}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Finding:
        return cls(str(data["kind"]), int(data["count"]), int(data["total"]), str(data["sentence"]))


def _flagged(count: int, total: int, share: float) -> bool:
    return total > 0 and count >= min(MIN_REQUESTS, total) and count / total >= share


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def check_run(
    rows: Sequence[Mapping[str, Any]],
    *,
    baseline_rows: Sequence[Mapping[str, Any]] | None = None,
    speculative: bool = False,
    check_outputs: bool = True,
) -> list[Finding]:
    """The findings of one run from its request rows, in KINDS order. `baseline_rows` (another run's, of the
    experiment's baseline) enables the template check; `speculative` adds to a loop or filler finding that the run's
    acceptance is not the draft's when the affected requests accept more than the rest; `check_outputs` False skips
    the output checks (simulated acceptance writes one token over and over by design)."""
    rows = [row for row in rows if isinstance(row, Mapping)]
    findings: list[Finding] = []
    ok = [row for row in rows if row.get("ok") is True]
    affected: set[int] = set()  # positions in `ok` of the requests whose outputs or prompts are degenerate
    if check_outputs:
        findings += _output_findings(ok, affected)
    findings += _prompt_findings(rows, ok, affected)
    if baseline_rows is not None:
        findings += _template_findings(rows, baseline_rows)
    if speculative and affected:
        note = _acceptance_note(ok, affected)
        if note:
            findings = [
                Finding(f.kind, f.count, f.total, f.sentence + note)
                if f.kind in (REPETITION_LOOP, DEGENERATE_OUTPUT, FILLER_PROMPTS, REPEATED_PROMPTS)
                else f
                for f in findings
            ]
    return findings


def _output_findings(ok: Sequence[Mapping[str, Any]], affected: set[int]) -> list[Finding]:
    checked = [i for i, row in enumerate(ok) if row.get("loop_unit") in ("tokens", "words") or "loop_at" in row]
    degenerate, looping = [], []
    for i in checked:
        row = ok[i]
        loop_at, period = _count(row.get("loop_at")), _count(row.get("loop_period"))
        if row.get("output_len") == 0 or (loop_at is not None and period == 1 and loop_at <= DEGENERATE_LOOP_AT):
            degenerate.append(i)
        elif loop_at is not None:
            looping.append(i)
    out = []
    total = len(checked)
    if _flagged(len(degenerate), total, MAX_LOOP_SHARE):
        affected.update(degenerate)
        out.append(
            Finding(
                DEGENERATE_OUTPUT,
                len(degenerate),
                total,
                f"outputs are empty or one token repeated in {len(degenerate)} of {total} requests",
            )
        )
    if _flagged(len(looping), total, MAX_LOOP_SHARE):
        affected.update(looping)
        starts = [_count(ok[i].get("loop_at")) or 0 for i in looping]
        units = {ok[i].get("loop_unit") for i in looping}
        unit = "words" if units == {"words"} else "tokens"
        at = int(statistics.median_low(starts))
        said = f"outputs loop after {at} {unit} in {len(looping)} of {total} requests"
        out.append(Finding(REPETITION_LOOP, len(looping), total, said))
    return out


def _prompt_findings(
    rows: Sequence[Mapping[str, Any]], ok: Sequence[Mapping[str, Any]], affected: set[int]
) -> list[Finding]:
    out = []
    digests = [row.get("prompt_digest") for row in rows]
    sent = [d for d in digests if isinstance(d, str) and d]
    if sent:
        repeats = len(sent) - len(set(sent))
        if _flagged(repeats, len(sent), MAX_REPEATED_SHARE):
            out.append(
                Finding(
                    REPEATED_PROMPTS,
                    repeats,
                    len(sent),
                    f"prompts repeat: {len(set(sent))} distinct prompts among {len(sent)} requests",
                )
            )
            counts: dict[str, int] = {}
            for d in sent:
                counts[d] = counts.get(d, 0) + 1
            affected.update(i for i, row in enumerate(ok) if counts.get(row.get("prompt_digest") or "", 0) > 1)
    shares = [(_number(row.get("prompt_repeat_share")), row) for row in rows]
    measured = [(share, row) for share, row in shares if share is not None]
    filler = [row for share, row in measured if share >= FILLER_REPEAT_SHARE]
    if measured and _flagged(len(filler), len(measured), MAX_FILLER_SHARE):
        out.append(
            Finding(
                FILLER_PROMPTS,
                len(filler),
                len(measured),
                f"prompts are filler: in {len(filler)} of {len(measured)} prompts most 4-word phrases repeat",
            )
        )
        filler_ids = {id(row) for row in filler}
        affected.update(i for i, row in enumerate(ok) if id(row) in filler_ids)
    return out


def _prompt_tokens_by_index(rows: Iterable[Mapping[str, Any]]) -> dict[int, int]:
    out = {}
    for row in rows:
        index, tokens = _count(row.get("index")), _count(row.get("prompt_tokens"))
        if isinstance(row, Mapping) and row.get("ok") is True and index is not None and tokens is not None:
            out[index] = tokens
    return out


def _template_findings(rows: Sequence[Mapping[str, Any]], baseline_rows: Sequence[Mapping[str, Any]]) -> list[Finding]:
    ours = _prompt_tokens_by_index(rows)
    theirs = _prompt_tokens_by_index(row for row in baseline_rows if isinstance(row, Mapping))
    shared = sorted(set(ours) & set(theirs))
    differences = [ours[i] - theirs[i] for i in shared if ours[i] != theirs[i]]
    if not shared or not differences or len(differences) / len(shared) <= MAX_TEMPLATE_SHARE:
        return []
    typical = int(statistics.median_low(differences))
    return [
        Finding(
            TEMPLATE_MISMATCH,
            len(differences),
            len(shared),
            f"the prompt template differs from the baseline's: the server counted {typical:+d} prompt tokens "
            f"on {len(differences)} of {len(shared)} prompts",
        )
    ]


def _acceptance_note(ok: Sequence[Mapping[str, Any]], affected: set[int]) -> str:
    accepts = [(i, _number(row.get("accept_length"))) for i, row in enumerate(ok)]
    hit = [a for i, a in accepts if a is not None and i in affected]
    rest = [a for i, a in accepts if a is not None and i not in affected]
    if not hit:
        return ""
    if rest and statistics.fmean(hit) < statistics.fmean(rest) * ACCEPTANCE_INFLATION:
        return ""
    overall = statistics.fmean([a for _, a in accepts if a is not None])
    return f"; acceptance {overall:.1f} is not a property of the draft"


def reason(findings: Sequence[Finding]) -> str:
    """A run's findings in one sentence ("" for none)."""
    return "; ".join(f.sentence for f in findings)


def config_reasons(runs: Iterable[tuple[str, Sequence[Mapping[str, Any]]]]) -> dict[str, str]:
    """Per config: why its runs are degenerate, from (config name, the run's stored findings) pairs of the runs a
    comparison reads. A config is degenerate when any of its runs is (a loop in one launch of two is a loop); the
    reason is its first flagged run's, with how many of its runs were flagged when not all of them were."""
    flagged: dict[str, list[str]] = {}
    measured: dict[str, int] = {}
    for name, stored in runs:
        measured[name] = measured.get(name, 0) + 1
        findings = [Finding.from_json(f) for f in stored if isinstance(f, Mapping)]
        if findings:
            flagged.setdefault(name, []).append(reason(findings))
    out = {}
    for name, reasons in flagged.items():
        said = reasons[0]
        if len(reasons) < measured[name]:
            said += f" (in {len(reasons)} of its {measured[name]} runs)"
        out[name] = said
    return out
