"""The CI gate's logic and files, pure: experiment JSON in, checks, exit code, JUnit XML and Markdown out."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from experiments.cli import gates
from experiments.cli.gates import ERROR, FAILED, INCONCLUSIVE, PASSED, Gate, GateSpecError, evaluate, exit_code
from experiments.cli.reports import junit_xml, markdown_escape, markdown_summary


def _row(candidate="eagle3", c=1, speedup=1.1, low=1.05, high=1.15, verdict="faster", gate=PASSED, **extra):
    """A comparison row as the API answers it, with the server's reading of the `slower` rule (`gate`)."""
    row = {"candidate": candidate, "concurrency": c, "baseline_tok_s": 80.0, "candidate_tok_s": 80.0 * speedup,
           "speedup": speedup, "ci_low": low, "ci_high": high, "verdict": verdict, "speed_verdict": verdict,
           "baseline_n": 3, "candidate_n": 3, "launches_needed": None, "needs": "",
           "gate": {"outcome": gate, "message": f"{gate}: {speedup:.2f}x"}}  # fmt: skip
    return {**row, **extra}


def _experiment(**fields):
    experiment = {"id": 7, "name": "nightly", "url": "/experiments/7/", "host": "gpu-1", "status": "finished",
                  "baseline": "baseline", "candidates": ["eagle3"], "runs": [], "comparison": [_row()],
                  "equivalence": {}, "outputs_gate": {}, "flags": [], "suspicions": [], "accept_length": {},
                  "headline": None}  # fmt: skip
    return {**experiment, **fields}


def _outcomes(checks):
    return [(c.gate, c.name, c.outcome) for c in checks]


def test_it_reads_the_gates_of_fail_on():
    assert gates.parse_fail_on("regression, outputs-differ,slower,accept-drop:2.5%") == [
        Gate("regression"), Gate("outputs-differ"), Gate("slower"), Gate("accept-drop", 0.025),
    ]  # fmt: skip
    assert gates.parse_fail_on("accept-drop") == [Gate("accept-drop", 0.02)]


@pytest.mark.parametrize(
    ("text", "message"),
    [("faster", "unknown gate"), ("slower:3%", "takes no value"), ("accept-drop:2", "with the % sign"),
     ("accept-drop:abc%", "percentage like 2%"), ("accept-drop:150%", "from 0 to 100"), ("", "no gate"),
     ("slower,slower", "named twice")],
)  # fmt: skip
def test_it_refuses_a_gate_it_does_not_know(text, message):
    with pytest.raises(GateSpecError, match=message):
        gates.parse_fail_on(text)


def test_slower_relays_the_servers_reading_of_each_row():
    experiment = _experiment(
        candidates=["a", "b", "e"],
        comparison=[
            _row("a", verdict="slower", speedup=0.8, low=0.75, high=0.85, gate=FAILED),
            _row("b"),
            _row("e", verdict="inconclusive", speedup=0.97, low=0.9, high=1.04, gate=INCONCLUSIVE),
        ],
    )

    checks = evaluate(experiment, [Gate("slower")])

    assert [(c.candidate, c.outcome, c.message) for c in checks] == [
        ("a", FAILED, "failed: 0.80x"), ("b", PASSED, "passed: 1.10x"),
        ("e", INCONCLUSIVE, "inconclusive: 0.97x"),
    ]  # fmt: skip
    assert checks[0].numbers["ci_low"] == 0.75
    assert exit_code(checks) == 1


def test_a_server_without_gate_readings_is_an_error_not_a_pass():
    row = _row()
    del row["gate"]
    experiment = _experiment(comparison=[row])
    del experiment["outputs_gate"]

    checks = evaluate(experiment, [Gate("slower"), Gate("outputs-differ")])

    assert [c.outcome for c in checks] == [ERROR, ERROR] and "upgrade specdash" in checks[0].message
    assert exit_code(checks) == 2


def test_slower_is_inconclusive_for_a_candidate_never_measured():
    checks = evaluate(_experiment(candidates=["eagle3", "other"]), [Gate("slower")])

    assert _outcomes(checks)[-1] == ("slower", "other", INCONCLUSIVE)
    assert exit_code(checks) == 2 and exit_code(checks, allow_inconclusive=True) == 0


def test_no_gate_judges_a_simulated_acceptance_candidate():
    name = "eagle3 · AL 1.5"
    simulated = _row(candidate=name, speedup=0.8, low=0.78, high=0.82, verdict="slower")
    experiment = _experiment(candidates=["eagle3", name], comparison=[_row(), simulated], simulated_acceptance=[name])

    checks = evaluate(experiment, [Gate("slower"), Gate("outputs-differ")])

    assert [(c.gate, c.candidate) for c in checks] == [("slower", "eagle3"), ("outputs-differ", "eagle3")]


def test_outputs_differ_relays_each_candidates_reading_with_the_gates_counts():
    gate = {"compared": 8, "identical": 2, "early_divergences": 6, "late_divergences": 0, "within_tokens": 32,
            "max_share": 0.01, "outputs_differ": True}  # fmt: skip
    honest = {**gate, "identical": 7, "early_divergences": 0, "late_divergences": 1, "outputs_differ": False}
    readings = {
        "bug": {"outcome": FAILED, "message": "outputs differ from the baseline's at temperature 0"},
        "honest": {"outcome": PASSED, "message": "outputs match the baseline's at temperature 0"},
        "sampled": {"outcome": INCONCLUSIVE, "message": "not compared: the profile samples (temperature 0.7)"},
    }
    experiment = _experiment(
        candidates=["bug", "honest", "sampled"], equivalence={"bug": gate, "honest": honest}, outputs_gate=readings
    )

    checks = evaluate(experiment, [Gate("outputs-differ")])

    assert [(c.candidate, c.outcome) for c in checks] == [
        ("bug", FAILED),
        ("honest", PASSED),
        ("sampled", INCONCLUSIVE),
    ]
    assert checks[0].message.startswith("outputs differ from the baseline's at temperature 0: 6 of 8 prompts part")
    assert checks[0].numbers["early_divergences"] == 6
    assert "temperature 0.7" in checks[2].message


def test_regression_fails_on_an_open_flag_only_and_waits_for_an_awaiting_suspicion():
    series = {"config": "baseline", "concurrency": 4, "change": -0.074, "baseline_mean": 88.8, "new_mean": 82.2}
    flags = [
        {"id": 3, "direction": "regression", "triage": "untriaged", "series": [series], **series},
        {"id": 4, "direction": "regression", "triage": "invalid", "series": [{**series, "concurrency": 1}]},
        {"id": 5, "direction": "improvement", "triage": "untriaged", "series": [{**series, "config": "eagle3"}]},
    ]
    experiment = _experiment(comparison=[_row(c=1), _row(c=4)], flags=flags)

    checks = evaluate(experiment, [Gate("regression")])

    assert _outcomes(checks) == [
        ("regression", "baseline c=1", PASSED), ("regression", "baseline c=4", FAILED),
        ("regression", "eagle3 c=1", PASSED), ("regression", "eagle3 c=4", PASSED),
    ]  # fmt: skip
    assert checks[1].message == "flag 3: -7.4% (88.8 -> 82.2 tok/s, untriaged)"
    awaiting = evaluate(_experiment(suspicions=[{"id": 9, "state": "awaiting", "run": 2, "confirming_runs": [5]}]),
                        [Gate("regression")])  # fmt: skip
    assert awaiting[-1].outcome == INCONCLUSIVE and "awaits its confirming runs (5)" in awaiting[-1].message


def test_accept_drop_compares_with_the_series_reference_or_another_experiment():
    cells = [
        {
            "concurrency": 1,
            "mean": 2.45,
            "low": 2.4,
            "high": 2.5,
            "reference": {"mean": 2.5, "run": 3, "experiment": 2},
        },
        {
            "concurrency": 4,
            "mean": 2.30,
            "low": 2.2,
            "high": 2.4,
            "reference": {"mean": 2.5, "run": 3, "experiment": 2},
        },
        {"concurrency": 8, "mean": 2.30, "low": None, "high": None, "reference": None},
    ]
    experiment = _experiment(accept_length={"eagle3": cells})

    checks = evaluate(experiment, [Gate("accept-drop", 0.02)])
    against = evaluate(experiment, [Gate("accept-drop", 0.02)], against={"id": 5, "accept_length": {
        "eagle3": [{"concurrency": 1, "mean": 2.45}, {"concurrency": 4, "mean": 2.31}]}})  # fmt: skip

    assert [c.outcome for c in checks] == [PASSED, FAILED, PASSED]
    assert "the first accept length of its series" in checks[2].message
    assert checks[1].message == "dropped: accept length 2.300 against 2.500 (experiment 2): -8.0%, limit -2.0%"
    assert checks[1].numbers["drop"] == pytest.approx(0.08)
    assert checks[0].gate == "accept-drop:2%"
    assert [c.outcome for c in against] == [PASSED, PASSED, INCONCLUSIVE]
    assert "experiment 5 measured no accept length for it at c=8" in against[2].message
    nothing = evaluate(_experiment(), [Gate("accept-drop", 0.02)])[0]
    assert nothing.outcome == PASSED and "no speculative candidate measured an accept length" in nothing.message


def test_an_unfinished_or_failed_experiment_is_an_error_and_a_failure_outranks_it():
    running = evaluate(_experiment(status="running"), [Gate("slower")])
    failed = _experiment(status="failed", runs=[{"id": 4, "config": "eagle3", "state": "failed",
                                                 "failure": {"kind": "crashed"}}],
                         comparison=[_row(verdict="slower", speedup=0.8, low=0.7, high=0.9, gate=FAILED)])  # fmt: skip

    assert running[0].outcome == ERROR and "has not finished (it is running)" in running[0].message
    assert exit_code(running, allow_inconclusive=True) == 2
    checks = evaluate(failed, [Gate("slower")])
    assert checks[0].message == "runs failed: 4 (eagle3: crashed)"
    assert exit_code(checks) == 1


def test_the_junit_file_escapes_what_users_wrote_and_drops_what_xml_cannot_hold():
    experiment = _experiment(name='a <b> & "c" \x1b[31m', candidates=["x&y", "z"],
                             comparison=[_row("x&y", verdict="slower", speedup=0.8, low=0.7, high=0.9,
                                              gate=FAILED)])  # fmt: skip
    checks = evaluate(experiment, [Gate("slower")])

    data = junit_xml(experiment, checks, page_url="https://sd.example/experiments/7/", allow_inconclusive=True)

    root = ET.fromstring(data)
    suite = root.find("testsuite")
    assert suite is not None and suite.get("name") == 'specdash experiment 7: a <b> & "c" \ufffd[31m'
    cases = list(suite.iter("testcase"))
    assert [(c.get("classname"), c.get("name")) for c in cases] == [("specdash.slower", "x&y c=1"),
                                                                    ("specdash.slower", "z")]  # fmt: skip
    assert cases[0].find("failure") is not None and cases[1].find("skipped") is not None
    assert (root.get("tests"), root.get("failures"), root.get("errors"), root.get("skipped")) == ("2", "1", "0", "1")
    strict = ET.fromstring(junit_xml(experiment, checks, page_url="", allow_inconclusive=False))
    assert strict.get("errors") == "1" and next(strict.iter("error")).get("type") == INCONCLUSIVE


def test_the_markdown_summary_escapes_names_and_links_only_http_pages():
    flag = {"id": 3, "url": "/flags/3/", "direction": "improvement", "triage": "fixed"}
    experiment = _experiment(name="x | [click](javascript:alert(1)) <img>", flags=[flag])
    checks = evaluate(experiment, [Gate("slower")])

    text = markdown_summary(experiment, checks, code=0, link=lambda path: "https://sd.example" + path)

    first = text.splitlines()[0]
    assert first == ("## specdash gate passed: [experiment 7 x \\| \\[click\\]\\(javascript:alert\\(1\\)\\) \\<img\\>]"
                     "(https://sd.example/experiments/7/)")  # fmt: skip
    assert "| slower | eagle3 | 1 | ✅ passed | passed: 1.10x |" in text  # the server's reading of the row
    assert "[flag 3](https://sd.example/flags/3/)" in text
    assert (
        "javascript" not in markdown_summary(experiment, checks, code=0, link=lambda p: "javascript:x").split("](")[1]
    )
    assert markdown_escape("a\nb|c") == "a b\\|c"


def _deployment(cells: dict[str, list[bool | None]], slo=True) -> dict:
    return {
        "slo": {"metric": "tpot", "percentile": "p90", "limit_ms": 50.0} if slo else None,
        "cells": {name: [{"concurrency": 2**i, "slo_met": met, "slo_attainment": 0.9} for i, met in enumerate(mets)]
                  for name, mets in cells.items()},
    }  # fmt: skip


def test_slo_fails_a_candidate_that_misses_the_slo_where_the_baseline_meets_it():
    view = _deployment({"baseline": [True, True, False, None], "eagle3": [True, False, False, None]})

    checks = evaluate(_experiment(deployment=view), [Gate("slo")])

    assert _outcomes(checks) == [
        ("slo", "eagle3 c=1", PASSED), ("slo", "eagle3 c=2", FAILED), ("slo", "eagle3 c=4", PASSED),
        ("slo", "eagle3 c=8", INCONCLUSIVE),
    ]  # fmt: skip
    assert checks[1].message == "misses the SLO (p90 TPOT ≤ 50 ms) where the baseline meets it"
    assert checks[2].message == "misses the SLO (p90 TPOT ≤ 50 ms), as the baseline does"
    assert exit_code(checks) == 1
    assert "slo" in [g.name for g in gates.parse_fail_on("slower,slo")]


def test_slo_is_inconclusive_without_an_slo_and_skips_simulated_acceptance():
    no_slo = evaluate(_experiment(deployment=_deployment({"baseline": [True]}, slo=False)), [Gate("slo")])
    assert _outcomes(no_slo) == [("slo", "experiment", INCONCLUSIVE)]
    assert evaluate(_experiment(deployment=None), [Gate("slo")])[0].outcome == INCONCLUSIVE
    view = _deployment({"baseline": [True], "eagle3": [False], "eagle3 @ 3.0": [False]})
    experiment = _experiment(
        deployment=view, candidates=["eagle3", "eagle3 @ 3.0"], simulated_acceptance=["eagle3 @ 3.0"]
    )
    assert _outcomes(evaluate(experiment, [Gate("slo")])) == [("slo", "eagle3 c=1", FAILED)]
