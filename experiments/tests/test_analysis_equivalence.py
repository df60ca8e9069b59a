"""The output-equivalence gate (pure)."""

from __future__ import annotations

from experiments.analysis.equivalence import check_outputs, first_divergence, merge


def test_it_finds_the_first_differing_token():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 9, 3]) == 1
    assert first_divergence([1, 2, 3], [1, 2]) == 2


def _outputs(n: int, length: int = 64) -> dict[int, list[int]]:
    return {i: [i * 1000 + t for t in range(length)] for i in range(n)}


def _diverged(outputs: dict[int, list[int]], at: dict[int, int]) -> dict[int, list[int]]:
    return {i: [t + 1 if i in at and pos >= at[i] else t for pos, t in enumerate(out)] for i, out in outputs.items()}


def test_it_passes_identical_outputs_and_reports_the_share():
    base = _outputs(200)
    gate = check_outputs(base, dict(base))
    assert (gate.compared, gate.identical, gate.share_identical, gate.outputs_differ) == (200, 200, 1.0, False)


def test_it_tolerates_one_percent_of_early_divergence_and_marks_more():
    base = _outputs(200)
    two = check_outputs(base, _diverged(base, {3: 5, 9: 31}))  # 1% before token 32: allowed
    assert len(two.early) == 2 and not two.outputs_differ
    three = check_outputs(base, _diverged(base, {3: 5, 9: 31, 11: 0}))
    assert three.outputs_differ and three.early_share == 0.015


def test_it_reports_late_divergence_without_failing_the_gate():
    base = _outputs(100)
    gate = check_outputs(base, _diverged(base, {i: 40 + i for i in range(20)}))
    assert len(gate.late) == 20 and not gate.early and not gate.outputs_differ
    assert gate.identical == 80
    first = gate.divergences[0]
    assert (first.prompt, first.token) == (0, 40)
    assert first.baseline == base[0][40:48] and first.candidate == [t + 1 for t in base[0][40:48]]


def test_it_takes_the_users_threshold():
    base = _outputs(10)
    changed = _diverged(base, {0: 50})
    assert not check_outputs(base, changed).outputs_differ
    assert check_outputs(base, changed, within_tokens=64, max_share=0.05).outputs_differ


def test_it_compares_only_prompts_both_sides_answered_and_merges_launches():
    base = _outputs(4)
    partial = {i: base[i] for i in (0, 1)}
    assert check_outputs(base, partial).compared == 2
    first = check_outputs(base, _diverged(base, {1: 20}))
    second = check_outputs(base, _diverged(base, {1: 10, 2: 50}))
    merged = merge([first, second])
    assert merged is not None
    assert [(d.prompt, d.token) for d in merged.divergences] == [(1, 10), (2, 50)]
    assert merge([]) is None
