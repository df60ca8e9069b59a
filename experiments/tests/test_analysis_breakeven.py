import pytest
from hypothesis import given
from hypothesis import strategies as st

from experiments.analysis import break_even_accept_length


def test_it_explains_design_numbers() -> None:
    # DESIGN: baseline ~83 tok/s at concurrency 1, 2-step EAGLE-3 with ~1.5 ms drafts and ~19 ms verify.
    result = break_even_accept_length(
        baseline_tok_s=83.0, concurrency=1, draft_ms=1.5, verify_ms=19.0, steps=2, accept_length=2.07
    )
    assert result.baseline_step_ms == pytest.approx(12.048, abs=1e-3)
    assert result.needed_accept_length == pytest.approx(22 / (1000 / 83))
    assert result.needed_accept_length == pytest.approx(1.83, abs=5e-3)
    assert result.predicted_tok_s == pytest.approx(2.07 / 0.022)
    assert result.predicted_tok_s == pytest.approx(94.1, abs=0.05)
    assert result.predicted_speedup == pytest.approx(1.134, abs=1e-3)
    assert (result.accept_length, result.steps, result.draft_ms, result.verify_ms) == (2.07, 2, 1.5, 19.0)
    assert "1.83" in result.message and "94.1 tok/s" in result.message and "pays" in result.message


def test_it_says_when_acceptance_is_too_low() -> None:
    # 3 steps: verify ~30 ms, so the same acceptance no longer pays (DESIGN: ~60 tok/s).
    result = break_even_accept_length(
        baseline_tok_s=83.0, concurrency=1, draft_ms=1.5, verify_ms=30.0, steps=3, accept_length=2.3
    )
    assert result.needed_accept_length == pytest.approx(34.5 * 83 / 1000)
    assert result.predicted_speedup is not None and result.predicted_speedup < 1
    assert "does not pay" in result.message


def test_it_gives_the_break_even_alone_without_an_accept_length() -> None:
    result = break_even_accept_length(baseline_tok_s=83.0, concurrency=1, draft_ms=1.5, verify_ms=19.0, steps=2)
    assert result.needed_accept_length == pytest.approx(1.826)
    assert (result.accept_length, result.predicted_speedup, result.predicted_tok_s) == (None, None, None)
    assert "No accept length" in result.message


def test_it_uses_the_per_request_step_time_at_a_concurrency() -> None:
    # 4 requests sharing 200 tok/s each advance one token every 20 ms.
    result = break_even_accept_length(
        baseline_tok_s=200.0, concurrency=4, draft_ms=2.0, verify_ms=26.0, steps=2, accept_length=2.0
    )
    assert result.baseline_step_ms == pytest.approx(20.0)
    assert result.needed_accept_length == pytest.approx(1.5)
    assert result.predicted_tok_s == pytest.approx(4 * 2.0 / 0.030)


@pytest.mark.parametrize(
    "changes",
    [
        {"baseline_tok_s": 0.0},
        {"verify_ms": float("inf")},
        {"draft_ms": -1.0},
        {"accept_length": 0.0},
        {"concurrency": 0},
        {"steps": -1},
    ],
)
def test_it_rejects_impossible_inputs(changes: dict[str, float]) -> None:
    inputs = {"baseline_tok_s": 83.0, "concurrency": 1, "draft_ms": 1.5, "verify_ms": 19.0, "steps": 2} | changes
    with pytest.raises(ValueError):
        break_even_accept_length(**inputs)  # type: ignore[arg-type]


@given(st.floats(1.0, 1e4), st.integers(1, 256), st.floats(0.0, 10.0), st.floats(1.0, 100.0), st.integers(0, 8))
def test_it_predicts_the_baseline_at_the_break_even(
    baseline: float, concurrency: int, draft: float, verify: float, steps: int
) -> None:
    needed = break_even_accept_length(
        baseline_tok_s=baseline, concurrency=concurrency, draft_ms=draft, verify_ms=verify, steps=steps
    ).needed_accept_length
    at_break_even = break_even_accept_length(
        baseline_tok_s=baseline,
        concurrency=concurrency,
        draft_ms=draft,
        verify_ms=verify,
        steps=steps,
        accept_length=needed,
    )
    assert at_break_even.predicted_speedup == pytest.approx(1.0)
    assert at_break_even.predicted_tok_s == pytest.approx(baseline)
