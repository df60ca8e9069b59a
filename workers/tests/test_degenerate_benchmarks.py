"""The degenerate-benchmark rules (analysis/degenerate.py): each finding from request rows as the benchmark client
writes them, and the false-positive rate of the run-level flag over many simulated healthy runs."""

from __future__ import annotations

import bisect
import itertools
import random
from typing import Any

import pytest

from experiments.analysis import degenerate
from workers.benchclient import repetition
from workers.benchclient.client import make_prompts


def _row(
    index: int, prompt: list[int] | str, output: list[Any], *, unit: str = "tokens", **extra: Any
) -> dict[str, Any]:
    """A request row as workers/benchclient/metrics.py: request_rows writes it, from the prompt and output."""
    loop = repetition.find_loop(output)
    return {
        "index": index,
        "category": None,
        "ok": True,
        "output_len": len(output),
        "accept_length": None,
        "loop_at": None if loop is None else loop.at,
        "loop_period": None if loop is None else loop.period,
        "loop_unit": unit,
        "prompt_digest": repetition.prompt_digest(prompt),
        "prompt_repeat_share": repetition.repeat_share(prompt),
        "prompt_tokens": len(prompt) if isinstance(prompt, list) else len(prompt.split()),
    } | extra


def _natural(rng: random.Random, count: int) -> list[str]:
    """Words drawn as natural text's are: Zipf-distributed over a 5000-word vocabulary (exponent 1.1)."""
    return [_VOCABULARY[bisect.bisect(_CUMULATIVE, rng.random() * _CUMULATIVE[-1])] for _ in range(count)]


_VOCABULARY = [f"w{rank}" for rank in range(5000)]
_CUMULATIVE = list(itertools.accumulate(1 / (rank + 1) ** 1.1 for rank in range(5000)))


def _healthy_rows(rng: random.Random, requests: int) -> list[dict[str, Any]]:
    output_len = rng.choice([64, 128, 256])
    if rng.random() < 0.5:  # random ids, as the client sends by default
        prompts: list[Any] = make_prompts(requests, rng.choice([128, 512]), 32000, rng.randrange(1 << 30))
    else:  # a natural-text prompt set
        prompts = [" ".join(_natural(rng, rng.randrange(16, 400))) for _ in range(requests)]
    rows = [
        _row(i, prompt, _natural(rng, output_len), unit="words", accept_length=rng.uniform(2.0, 3.5))
        for i, prompt in enumerate(prompts)
    ]
    for row in rng.sample(rows, rng.randrange(0, 3)):  # a few failed requests
        row.update(ok=False, output_len=0, loop_at=None, loop_unit=None, prompt_tokens=None)
    return rows


def test_it_flags_at_most_one_percent_of_healthy_runs() -> None:
    """Measured: 0 of 400 simulated healthy runs flagged (0.0%), seed 52; each run 32 requests against a baseline run
    of the same prompts. The bound the issue sets is 1%."""
    rng = random.Random(52)
    flagged = 0
    runs = 400
    for _ in range(runs):
        rows = _healthy_rows(rng, 32)
        baseline = [dict(row, ok=True, prompt_tokens=row["prompt_tokens"] or 1) for row in rows]
        if degenerate.check_run(rows, baseline_rows=baseline, speculative=True):
            flagged += 1
    assert flagged / runs <= 0.01
    assert flagged == 0  # what the docstring states; a change that moves it must restate it


def _looping_rows(share: float, *, requests: int = 64, accept: float = 7.8) -> list[dict[str, Any]]:
    rng = random.Random(3)
    prompts = make_prompts(requests, 64, 32000, 1)
    rows = []
    for i, prompt in enumerate(prompts):
        head = rng.choices(range(32000), k=40)
        if i < share * requests:
            rows.append(_row(i, prompt, head + head[-4:] * 8, accept_length=accept))
        else:
            rows.append(_row(i, prompt, head + rng.choices(range(32000), k=32), accept_length=2.6))
    return rows


def test_it_says_where_outputs_loop_and_that_acceptance_is_not_the_drafts() -> None:
    findings = degenerate.check_run(_looping_rows(31 / 64), speculative=True)
    assert [f.kind for f in findings] == [degenerate.REPETITION_LOOP]
    assert findings[0].sentence.startswith("outputs loop after 40 tokens in 31 of 64 requests; acceptance ")
    assert findings[0].sentence.endswith(" is not a property of the draft")
    # A baseline's loop says only that it loops.
    (baseline,) = degenerate.check_run(_looping_rows(31 / 64))
    assert baseline.sentence == "outputs loop after 40 tokens in 31 of 64 requests"


def test_a_rare_loop_is_no_finding() -> None:
    assert degenerate.check_run(_looping_rows(5 / 64)) == []
    assert [f.kind for f in degenerate.check_run(_looping_rows(7 / 64))] == [degenerate.REPETITION_LOOP]


def test_it_flags_outputs_of_one_token() -> None:
    rows = [_row(i, [i] * 3 + [1, 2, 3, 4, 5], [5] * 40) for i in range(8)]
    (finding,) = degenerate.check_run(rows)
    assert finding.kind == degenerate.DEGENERATE_OUTPUT
    assert finding.sentence == "outputs are empty or one token repeated in 8 of 8 requests"


def test_it_flags_repeated_and_filler_prompts() -> None:
    filler = "the same sentence again and again. " * 30
    rng = random.Random(5)
    rows = [_row(i, filler, _natural(rng, 64), unit="words") for i in range(16)]
    kinds = {f.kind: f for f in degenerate.check_run(rows)}
    assert set(kinds) == {degenerate.REPEATED_PROMPTS, degenerate.FILLER_PROMPTS}
    assert kinds[degenerate.REPEATED_PROMPTS].sentence == "prompts repeat: 1 distinct prompts among 16 requests"
    assert kinds[degenerate.FILLER_PROMPTS].count == 16


def test_it_flags_a_template_that_differs_from_the_baselines() -> None:
    rows = _looping_rows(0)
    shifted = [dict(row, prompt_tokens=row["prompt_tokens"] + 11) for row in rows]
    (finding,) = degenerate.check_run(shifted, baseline_rows=rows)
    assert finding.kind == degenerate.TEMPLATE_MISMATCH
    assert finding.sentence == (
        "the prompt template differs from the baseline's: the server counted +11 prompt tokens on 64 of 64 prompts"
    )
    assert degenerate.check_run(rows, baseline_rows=rows) == []


@pytest.mark.parametrize("rows", [[], [{"index": 0, "ok": True, "output_len": 9}], [{"ok": "yes"}], ["junk"]])
def test_rows_without_the_new_keys_yield_nothing(rows: list[Any]) -> None:
    assert degenerate.check_run(rows, baseline_rows=rows, speculative=True) == []


def test_a_config_is_degenerate_when_any_of_its_runs_is() -> None:
    loop = degenerate.Finding(degenerate.REPETITION_LOOP, 3, 4, "outputs loop after 40 tokens in 3 of 4 requests")
    reasons = degenerate.config_reasons([("a", [loop.as_json()]), ("a", []), ("b", []), ("c", [loop.as_json()])])
    assert reasons == {
        "a": "outputs loop after 40 tokens in 3 of 4 requests (in 1 of its 2 runs)",
        "c": "outputs loop after 40 tokens in 3 of 4 requests",
    }
