"""One question, one answer: for the same runs, every place that states a verdict (the experiment page, its API and
its exports, Compare and its API, the experiments table and its API, the finished-experiment notification, the CLI
gate, an adaptive schedule's page and its verification experiment's page) states the same verdict, speedup and
interval, with the same reasons (outputs differ, acceptance collapsed, not settled)."""

from __future__ import annotations

import csv
import html
import io
import re

import pytest

from experiments.actions.notifications import verdict_lines
from experiments.analysis.equivalence import Divergence, Equivalence
from experiments.cli import gates
from experiments.models import AdaptiveSchedule, Candidate, Experiment, Measurement, Run, ServerConfig, Study
from experiments.reads.reports import build_report
from experiments.reads.study_report import study_history

from .factories import make_config, make_eagle_config, make_experiment, make_measurement, make_profile
from .test_adaptive_schedules import _build, _finished_study, _verify
from .test_studies import TRUTH, _finish_round, _start

pytestmark = pytest.mark.django_db

FAST, DRAFT_BUG, COLLAPSED, NOISY = "eagle3-fast", "eagle3-draft-bug", "eagle3-collapsed", "eagle3-noisy"
# Per config and concurrency: each launch's three passes (tok/s) and the accept length its cells measured.
CELLS: dict[str, dict[int, list[list[float]]]] = {
    "baseline": {1: [[80.0, 80.4, 79.8], [80.6, 79.9, 80.2]], 4: [[250.0, 251.0, 249.0], [250.5, 249.5, 250.8]]},
    FAST: {1: [[100.0, 100.5, 99.6], [100.2, 99.8, 100.4]], 4: [[300.0, 301.0, 299.0], [300.5, 299.2, 300.9]]},
    DRAFT_BUG: {1: [[97.0, 97.3, 96.8], [97.1, 96.9, 97.4]], 4: [[290.0, 291.0, 289.5], [290.4, 289.8, 290.9]]},
    COLLAPSED: {1: [[45.0, 45.3, 44.8], [45.2, 44.9, 45.1]], 4: [[140.0, 140.8, 139.5], [140.3, 139.7, 140.6]]},
    NOISY: {1: [[70.0, 95.0, 84.0], [100.0, 78.0, 91.0]], 4: [[240.0, 300.0, 262.0], [285.0, 248.0, 295.0]]},
}
ACCEPT = {FAST: 2.9, DRAFT_BUG: 2.8, COLLAPSED: 1.0, NOISY: 2.1}
# The docs' recommended CI gate (docs/api.md).
DOCS_GATE = "regression,outputs-differ,slower,accept-drop:2%"


@pytest.fixture
def experiment() -> Experiment:
    candidates = [make_eagle_config(name=name) for name in (FAST, DRAFT_BUG, COLLAPSED, NOISY)]
    experiment = make_experiment(
        name="one answer",
        baseline=make_config(name="baseline"),
        candidates=candidates,
        profile=make_profile(concurrency=[1, 4], passes=3, launches=2),
    )
    for run in experiment.run_set.select_related("config"):
        name = run.config.name
        for level, launches in CELLS[name].items():
            for pass_index, tok_s in enumerate(launches[run.launch_index]):
                make_measurement(run, concurrency=level, output_throughput=tok_s, pass_index=pass_index,
                                 accept_length=ACCEPT.get(name))  # fmt: skip
        Run.objects.filter(pk=run.pk).update(state=Run.State.SUCCEEDED)
    # The stored equivalence gates, as a run's success records them: the draft bug's outputs part early.
    early = [Divergence(p, 3, [1, 2], [1, 3]) for p in range(6)]
    gates_of = {DRAFT_BUG: Equivalence(16, 10, 32, 0.01, early), FAST: Equivalence(16, 16, 32, 0.01)}
    for candidate in Candidate.objects.filter(experiment=experiment).select_related("config"):
        gate = gates_of.get(candidate.config.name, Equivalence(16, 16, 32, 0.01))
        candidate.equivalence, candidate.outputs_differ = gate.as_json(kept=20), gate.outputs_differ
        candidate.save(update_fields=["equivalence", "outputs_differ"])
    return experiment


def _key(row: dict) -> tuple:
    return (row["verdict"], row["speedup"], row["ci_low"], row["ci_high"])


def _by_cell(rows, name=lambda row: row["candidate"]) -> dict[tuple[str, int], tuple]:
    return {(name(row), row["concurrency"]): _key(row) for row in rows}


def test_every_path_gives_the_same_verdict_speedup_and_interval(client, api, owner, experiment):
    body = api(owner, "get", f"/api/experiments/{experiment.pk}").json()
    answer = _by_cell(body["comparison"])
    assert {verdict for verdict, *_ in answer.values()} == {"faster", "outputs differ", "slower", "inconclusive"}
    assert answer[FAST, 1][0] == "faster" and answer[DRAFT_BUG, 1][0] == "outputs differ"
    assert answer[COLLAPSED, 4][0] == "slower" and answer[NOISY, 1][0] == "inconclusive"

    # The export (JSON and CSV) of the experiment.
    exported = client_get(client, owner, f"/api/experiments/{experiment.pk}/export.json").json()
    assert _by_cell(exported["comparison"]) == answer and exported["headline"] == body["headline"]
    sheet = client_get(client, owner, f"/api/experiments/{experiment.pk}/export.csv").content.decode()
    for row in csv.DictReader(io.StringIO(sheet)):
        verdict, speedup, low, high = answer[row["candidate"], int(row["concurrency"])]
        assert (row["verdict"], float(row["speedup"]), float(row["ci_low"]), float(row["ci_high"])) == (
            verdict, speedup, low, high,
        )  # fmt: skip

    # The experiment page: its headline, its cards and its verdict table.
    page = client_get(client, owner, experiment.get_absolute_url()).content.decode()
    assert _text(page, 'id="headline"', "</p>") == body["headline"]
    for card in body["verdicts"]:
        assert card["sentence"] in _unescape(page)
    for (name, level), (verdict, speedup, _, _) in answer.items():
        cells = _inner(page, f'<tr id="verdict-{name}-c{level}">', "</tr>")
        assert f"verdict-{verdict.replace(' ', '-')}" in cells and f"{speedup:.3f}×" in cells

    # Compare, page and API, with the experiment's configs picked.
    picks = [f"c{experiment.pk}-{experiment.baseline_id}"]
    picks += [f"c{experiment.pk}-{c.config_id}" for c in experiment.candidate_set.order_by("position")]
    compared = api(owner, "get", "/api/compare?" + "&".join(f"pick={p}" for p in picks)).json()
    assert _by_cell(compared["comparison"], name=lambda row: row["candidate"].split(" · ")[0]) == answer
    compare_page = _unescape(client_get(client, owner, "/compare/?" + "&".join(f"pick={p}" for p in picks)).content)
    for card in body["verdicts"]:
        assert card["sentence"].split(" ", 1)[1].split(" (")[0] in compare_page  # the same sentence of each pick

    # The experiments table, page and API: the best honest row.
    best = next(e for e in api(owner, "get", "/api/experiments").json()["experiments"] if e["id"] == experiment.pk)
    best_key = (best["best"]["verdict"], best["best"]["speedup"], best["best"]["ci_low"], best["best"]["ci_high"])
    assert best_key == answer[best["best"]["candidate"], best["best"]["concurrency"]]
    assert best["best"]["candidate"] == FAST and best["best"]["said"] in body["headline"]

    # The finished-experiment notification's verdict lines, and its reasons.
    comparison = build_report(experiment, with_figures=False).comparison
    lines = verdict_lines(comparison)
    for row in body["comparison"]:
        line = next(ln for ln in lines if ln.startswith(f"{row['candidate']} at c={row['concurrency']}:"))
        assert f": {row['said']}, {row['verdict']}" in line
    assert all("acceptance collapsed" in ln for ln in lines if ln.startswith(COLLAPSED))

    # The CLI gate reads the same rows by the rule the page shows beside each of them.
    checks = gates.evaluate(body, gates.parse_fail_on(DOCS_GATE))
    slower = {(c.candidate, c.concurrency): c.outcome for c in checks if c.gate == "slower"}
    for name, level in answer:
        speed = next(
            r["speed_verdict"] for r in body["comparison"] if (r["candidate"], r["concurrency"]) == (name, level)
        )
        expected = {"slower": gates.FAILED, "faster": gates.PASSED}.get(speed, slower[name, level])
        assert slower[name, level] == expected
        assert f'<td class="gate-{slower[name, level]}">' in _inner(page, f'<tr id="verdict-{name}-c{level}">', "</tr>")
    outputs = {c.candidate: c.outcome for c in checks if c.gate == "outputs-differ"}
    assert outputs == {FAST: gates.PASSED, DRAFT_BUG: gates.FAILED, COLLAPSED: gates.PASSED, NOISY: gates.PASSED}


def test_an_acceptance_collapse_and_differing_outputs_are_in_the_verdict_sentences(api, owner, experiment):
    body = api(owner, "get", f"/api/experiments/{experiment.pk}").json()
    cards = {card["candidate"]: card["sentence"] for card in body["verdicts"]}

    assert "acceptance collapsed at c=1-4 (accept length 1.00" in cards[COLLAPSED]
    assert "outputs differ from the baseline's" in cards[DRAFT_BUG]
    assert "inconclusive" in cards[NOISY]
    collapsed = [row for row in body["comparison"] if row["candidate"] == COLLAPSED]
    assert all(row["acceptance_collapsed"] and row["accept_length"] == 1.0 for row in collapsed)
    assert all(any("acceptance collapsed" in reason for reason in row["reasons"]) for row in collapsed)


def test_the_docs_gate_passes_a_clean_experiment_and_fails_a_draft_bug(api, owner):
    clean = make_experiment(candidates=[make_eagle_config(name=FAST)], profile=make_profile(concurrency=[1], passes=3))
    for run in clean.run_set.select_related("config"):
        for pass_index, tok_s in enumerate(CELLS[run.config.name if run.config.name == FAST else "baseline"][1][0]):
            make_measurement(run, concurrency=1, output_throughput=tok_s, pass_index=pass_index,
                             accept_length=ACCEPT.get(run.config.name))  # fmt: skip
        Run.objects.filter(pk=run.pk).update(state=Run.State.SUCCEEDED)
    Candidate.objects.filter(experiment=clean).update(equivalence=Equivalence(16, 16, 32, 0.01).as_json())

    body = api(owner, "get", f"/api/experiments/{clean.pk}").json()
    checks = gates.evaluate(body, gates.parse_fail_on(DOCS_GATE))

    assert gates.exit_code(checks) == 0, [(c.gate, c.name, c.outcome, c.message) for c in checks]
    first = next(c for c in checks if c.gate == "accept-drop:2%")
    assert "the first accept length of its series" in first.message
    Candidate.objects.filter(experiment=clean).update(outputs_differ=True)
    buggy = gates.evaluate(api(owner, "get", f"/api/experiments/{clean.pk}").json(), gates.parse_fail_on(DOCS_GATE))
    assert gates.exit_code(buggy) == 1


def test_a_schedule_and_its_verification_experiment_say_the_same(api, client, owner):
    study = _finished_study(api, owner)
    schedule = AdaptiveSchedule.objects.get(pk=_build(api, owner, study).json()["id"])
    # At c = 8 the band's winner is no speculation (the verification's baseline): the adaptive server is 2.5% slower,
    # which is slower by the comparison's rule, but not yet shown to be more or less than 2% slower.
    _verify(schedule, {"baseline": {1: 80.0, 8: 460.0}, "s2-k1-d3": {1: 90.0, 8: 430.0},
                       "adaptive": {1: 90.2, 8: 448.5}}, jitter=0.004)  # fmt: skip
    verification = schedule.verification
    assert verification is not None

    body = api(owner, "get", f"/api/experiments/{verification.pk}").json()
    name = ServerConfig.objects.get(adaptive_schedule=schedule).name
    adaptive = next(r for r in body["comparison"] if (r["candidate"], r["concurrency"]) == (name, 8))
    checks = {c["concurrency"]: c for c in api(owner, "get", f"/api/schedules/{schedule.pk}").json()["checks"]}
    at_8 = checks[8]

    assert at_8["winner"] == "no speculation"
    assert (round(at_8["speedup"], 4), round(at_8["ci_low"], 4), round(at_8["ci_high"], 4)) == (
        adaptive["speedup"], adaptive["ci_low"], adaptive["ci_high"],
    )  # fmt: skip
    assert at_8["speed_verdict"] == adaptive["verdict"] == "slower"
    client.force_login(owner)
    schedule_page = _unescape(client.get(schedule.get_absolute_url()).content)
    verification_page = _unescape(client.get(verification.get_absolute_url()).content)
    sentence = _text(schedule_page, 'id="headline"', "</p>")
    assert "slower than the band's winner at c = 8" in sentence
    assert sentence in verification_page
    assert "earlier verification" not in schedule_page  # it cites nothing this install did not measure


def test_a_studys_launch_value_leaves_out_an_unusable_pass(api, owner):
    study = _start(api, owner)
    _finish_round(study, TRUTH)
    before = study_history(study).samples
    run = Run.objects.filter(experiment__studyround__study=study, state=Run.State.SUCCEEDED).first()
    assert run is not None
    make_measurement(run, concurrency=1, output_throughput=0.0, pass_index=5)  # every request of that pass failed

    assert study_history(Study.objects.get(pk=study.pk)).samples == before
    assert Measurement.objects.filter(run=run, output_throughput=0.0).exists()  # kept, shown, never averaged


def test_a_candidate_pick_and_its_experiment_agree_on_simulated_acceptance(api, owner):
    simulated = make_eagle_config(name="eagle3 · AL 3", env={"SGLANG_SIMULATE_ACC_LEN": "3"})
    experiment = make_experiment(candidates=[simulated], profile=make_profile(concurrency=[1], passes=3))
    for run in experiment.run_set.select_related("config"):
        for pass_index in range(3):
            value = 130.0 + pass_index if run.config == simulated else 80.0 + pass_index
            make_measurement(run, concurrency=1, output_throughput=value, pass_index=pass_index)
        Run.objects.filter(pk=run.pk).update(state=Run.State.SUCCEEDED)

    body = api(owner, "get", f"/api/experiments/{experiment.pk}").json()
    picks = f"pick=c{experiment.pk}-{experiment.baseline_id}&pick=c{experiment.pk}-{simulated.pk}"
    compared = api(owner, "get", f"/api/compare?{picks}").json()

    assert body["headline"] is None and body["comparison"][0]["gate"] is None
    assert compared["comparison"][0]["simulated_acceptance"] and compared["comparison"][0]["gate"] is None
    assert body["outputs_gate"] == {}


def client_get(client, user, url):
    client.force_login(user)
    return client.get(url)


def _unescape(content) -> str:
    return html.unescape(content.decode() if isinstance(content, bytes) else content)


def _inner(page: str, start: str, end: str) -> str:
    """What follows `start` (an opening tag, or the part of one up to an attribute) up to `end`."""
    after = page[page.index(start) + len(start) :]
    if not start.endswith(">"):
        after = after[after.index(">") + 1 :]
    return after.split(end)[0]


def _text(page: str, start: str, end: str) -> str:
    return _unescape(re.sub(r"<[^>]+>", "", _inner(page, start, end))).strip()
