"""The live acceptance alarm's rule: a collapse to ~1.0 over consecutive busy Decode lines, or a fall far below the
config's history; never on a healthy config, never on idle lines, once per server. And the likely causes it names."""

from __future__ import annotations

from typing import Any

import pytest

from experiments.remedies import acceptance_remedies
from experiments.rules import model_checks
from workers.engines.acceptance_watch import COLLAPSE, COLLAPSE_TICKS, LOW, LOW_TICKS, AcceptanceWatch
from workers.engines.live_facts import LogFacts
from workers.sglang import algorithm_problem
from workers.sglang.adapter import SGLANG

DECODE = (
    "[2026-11-29 10:00:{s:02d} TP0] Decode batch, #running-req: {r}, #token: 180, token usage: 0.00, "
    "accept len: {a:.2f}, accept rate: 0.33, cuda graph: True, gen throughput (token/s): 80.00, #queue-req: 0"
)
TARGET = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "max_position_embeddings": 262144,
          "vocab_size": 163840}  # fmt: skip
EAGLE3_DRAFT = {**TARGET, "architectures": ["LlamaForCausalLMEagle3"]}


def _points(*accepts: float, running: int = 4, first: int = 100) -> list[dict[str, Any]]:
    """Decode points as LogFacts reads them from the log (one line per accept length)."""
    lines = [DECODE.format(s=i % 60, r=running, a=a) for i, a in enumerate(accepts)]
    return LogFacts(SGLANG.grammar, {}).read(first, lines).decode


def test_it_raises_a_collapse_after_consecutive_busy_lines_at_one():
    watch = AcceptanceWatch()

    assert watch.feed(_points(*[1.0] * (COLLAPSE_TICKS - 1))) is None
    alarm = watch.feed(_points(1.0, first=200))

    assert alarm is not None and alarm.kind == COLLAPSE
    assert alarm.observed == 1.0 and alarm.expected is None
    assert (alarm.first_line, alarm.last_line) == (100, 200)
    assert "accept length 1.00 on 3 Decode lines in a row" in alarm.message
    assert "log lines 100-200" in alarm.message


def test_it_counts_lines_rounded_to_one_as_a_collapse():
    assert AcceptanceWatch().feed(_points(1.02, 1.0, 1.05)) is not None


@pytest.mark.parametrize("accepts", [[2.0, 2.3, 1.9, 2.8, 2.1, 2.6] * 5, [1.6, 1.7, 1.5, 1.8] * 5])
def test_it_stays_quiet_on_a_healthy_config(accepts):
    watch = AcceptanceWatch([2.1, 2.0, 2.2])

    assert watch.feed(_points(*accepts)) is None


def test_it_needs_the_lines_in_a_row():
    watch = AcceptanceWatch()

    assert watch.feed(_points(1.0, 1.0, 2.1, 1.0, 1.0, 2.2, 1.0)) is None


def test_it_ignores_idle_lines_and_baseline_lines():
    watch = AcceptanceWatch()
    idle = _points(1.0, 1.0, 1.0, 1.0, running=0)
    baseline = [{"n": 7, "running_req": 4, "accept_len": None}]

    assert watch.feed(idle + baseline) is None
    # Idle lines neither count nor break a streak: two busy lines, idle ones, then a third busy one.
    assert watch.feed(_points(1.0, 1.0) + idle + baseline) is None
    assert watch.feed(_points(1.0, first=300)) is not None


def test_it_raises_once():
    watch = AcceptanceWatch()

    first = watch.feed(_points(*[1.0] * COLLAPSE_TICKS))

    assert first is not None
    assert watch.feed(_points(*[1.0] * 10)) is None
    assert watch.fired


def test_it_names_the_expected_value_from_the_history():
    alarm = AcceptanceWatch([2.4, 2.0, 2.2]).feed(_points(1.0, 1.0, 1.0))

    assert alarm is not None and alarm.expected == 2.2
    assert "where a median of 2.20 over this config's last 3 successful runs was expected" in alarm.message


def test_it_says_what_the_models_prove_with_a_collapse():
    diagnosis = algorithm_problem("EAGLE", EAGLE3_DRAFT)
    assert diagnosis is not None

    alarm = AcceptanceWatch(diagnosis=diagnosis).feed(_points(1.0, 1.0, 1.0))

    assert alarm is not None
    assert "LlamaForCausalLMEagle3, an EAGLE3 draft, and this config runs --speculative-algorithm EAGLE" in (
        alarm.message
    )


def test_it_raises_when_acceptance_falls_far_below_the_history():
    # History 2.2: a line counts as far below under 1 + 0.5 x 1.2 = 1.6.
    watch = AcceptanceWatch([2.2, 2.3, 2.1])

    assert watch.feed(_points(*[1.4] * (LOW_TICKS - 1))) is None
    alarm = watch.feed(_points(1.3))

    assert alarm is not None and alarm.kind == LOW
    assert alarm.observed == pytest.approx((1.4 * (LOW_TICKS - 1) + 1.3) / LOW_TICKS)
    assert "far below this config's history" in alarm.message and "median of 2.20" in alarm.message


@pytest.mark.parametrize("history", [[], [1.0, 1.1]])
def test_it_judges_only_a_collapse_without_a_history_that_accepted(history):
    assert AcceptanceWatch(history).feed(_points(*[1.3] * 20)) is None


# --- the likely causes ---------------------------------------------------------------------------------------


def test_it_names_an_eagle3_draft_served_as_eagle_first():
    remedies = acceptance_remedies("EAGLE", TARGET, EAGLE3_DRAFT)

    assert [r.id for r in remedies] == ["eagle3-algorithm", "draft-target-mismatch", "draft-weights"]
    assert "says LlamaForCausalLMEagle3, an EAGLE3 draft" in remedies[0].explanation
    assert remedies[0].change is None  # advice: the algorithm is a config field, changed by the user
    assert "agree with the target's" in remedies[1].explanation


def test_it_names_what_the_pair_disagrees_on():
    draft = {**EAGLE3_DRAFT, "hidden_size": 4096, "vocab_size": 32000, "max_position_embeddings": 2048}

    (algorithm, pair, weights) = acceptance_remedies("EAGLE3", TARGET, draft)

    assert algorithm.id == "algorithm"
    assert "hidden_size (4096) differs from the target's (7168)" in pair.explanation
    assert "vocab_size (32000)" in pair.explanation and "max_position_embeddings (2048)" in pair.explanation
    assert "LlamaForCausalLMEagle3 expects" in weights.explanation


def test_it_names_the_causes_unproven_when_the_models_were_not_read():
    remedies = acceptance_remedies("EAGLE3", None, None)

    assert [r.id for r in remedies] == ["algorithm", "draft-target-mismatch", "draft-weights"]
    assert "EAGLE3 draft served with --speculative-algorithm EAGLE accepts nothing" in remedies[0].explanation


def test_it_says_an_eagle_head_served_as_eagle3_is_one():
    (algorithm, *_) = acceptance_remedies("EAGLE3", TARGET, {**TARGET, "architectures": ["LlamaForCausalLMEagle"]})

    assert algorithm.id == "eagle-algorithm" and "needs --speculative-algorithm EAGLE" in algorithm.explanation


def test_it_explains_ngram_on_its_own():
    assert [r.id for r in acceptance_remedies("NGRAM", TARGET, None)] == ["ngram-no-match"]


@pytest.mark.parametrize(
    "algorithm, draft, mismatch",
    [
        ("EAGLE", EAGLE3_DRAFT, True),
        ("NEXTN", EAGLE3_DRAFT, True),  # SGLang runs NEXTN as EAGLE
        ("eagle", EAGLE3_DRAFT, True),
        ("EAGLE3", EAGLE3_DRAFT, False),
        ("EAGLE", {**TARGET, "architectures": ["LlamaForCausalLMEagle"]}, False),
        ("EAGLE", {"architectures": "LlamaForCausalLMEagle3"}, False),  # not a list: not read as one
        ("EAGLE", None, False),
        (None, EAGLE3_DRAFT, False),
    ],
)
def test_it_tells_an_eagle3_draft_served_as_eagle(algorithm, draft, mismatch):
    assert (model_checks.algorithm_problem(algorithm, draft) is not None) is mismatch
