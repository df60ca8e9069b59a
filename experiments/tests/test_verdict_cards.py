"""The verdict card a candidate gets at the top of the experiment page: one sentence read from the rows the verdict
table shows, claiming no more than they do, and the launches Compare names for the same pair."""

from __future__ import annotations

import re

import pytest

from experiments import analysis
from experiments.analysis import FASTER, INCONCLUSIVE, SLOWER, ComparisonRow
from experiments.models import Experiment, Measurement, Run
from experiments.reads.reports import build_report
from experiments.tests.factories import make_config, make_eagle_config, make_experiment, make_profile

CANDIDATE = "eagle3-s2-k1-d3"
# Faster at 1 and 2, a wide spread around 1.03x at 4 (inconclusive, settleable), slower at 8.
CELLS = {
    "baseline": {1: [80.0, 81.0, 82.0], 2: [150.0, 151.0, 152.0], 4: [280.0, 300.0, 290.0], 8: [500.0, 501.0, 502.0]},
    CANDIDATE: {1: [92.0, 93.0, 94.0], 2: [170.0, 171.0, 172.0], 4: [310.0, 285.0, 300.0], 8: [460.0, 461.0, 462.0]},
}


def _row(
    level: int,
    speedup: float,
    verdict: str,
    *,
    ci: tuple[float | None, float | None] = (None, None),
    n: tuple[int, int] = (3, 3),
    needed: int | None = None,
) -> ComparisonRow:
    return ComparisonRow("eagle", level, 100.0, 100.0 * speedup, speedup, ci[0], ci[1], verdict, n[0], n[1], needed)


def _finished(cells: dict[str, dict[int, list[float]]], *, candidates=None) -> Experiment:
    experiment = make_experiment(
        baseline=make_config(name="baseline"),
        candidates=candidates if candidates is not None else [make_eagle_config(name=CANDIDATE)],
        profile=make_profile(concurrency=sorted(next(iter(cells.values()))), passes=3),
    )
    for run in experiment.run_set.select_related("config"):
        Run.objects.filter(pk=run.pk).update(state=Run.State.SUCCEEDED)
        for level, values in cells[run.config.name].items():
            for pass_index, tok_s in enumerate(values):
                Measurement.objects.create(
                    run=run, pass_index=pass_index, concurrency=level, completed=16, duration_s=10.0,
                    output_throughput=tok_s, total_throughput=2 * tok_s, request_throughput=1.0,
                )  # fmt: skip
    return experiment


def _card_text(page: str, candidate: str = CANDIDATE) -> str:
    start = page.index(f'id="card-{candidate}"')
    return page[start : page.index("</article>", start)]


def test_it_says_where_a_candidate_wins_loses_and_what_would_settle_the_rest() -> None:
    rows = [
        _row(1, 1.13, FASTER, ci=(1.08, 1.18)),
        _row(2, 1.10, FASTER, ci=(1.05, 1.15)),
        _row(4, 1.01, INCONCLUSIVE, ci=(0.95, 1.07), needed=12),
        _row(8, 0.92, SLOWER, ci=(0.88, 0.96)),
    ]

    (card,) = analysis.verdict_cards(rows, baseline="base", candidates=["eagle"], passes_per_launch=3)

    assert card.sentence == (
        "eagle is faster at c=1-2 (1.10x [1.05, 1.15] to 1.13x [1.08, 1.18]); slower at c=8 (0.92x [0.88, 0.96]); "
        "c=4 is inconclusive (1.01x [0.95, 1.07]): about 3 more launches would likely settle it."
    )
    assert card.launches == analysis.launches_to_settle(rows[2], 3) == 3 and card.kind == "mixed"


def test_it_never_says_an_inconclusive_cell_pays_or_stops_paying() -> None:
    rows = [_row(1, 1.12, FASTER, ci=(1.05, 1.2)), _row(4, 0.97, INCONCLUSIVE, ci=(0.9, 1.04), needed=30)]

    (card,) = analysis.verdict_cards(rows, baseline="base", candidates=["eagle"], passes_per_launch=3)

    assert "slower" not in card.sentence and "stops paying" not in card.sentence
    assert "c=4 is inconclusive" in card.sentence
    # The point estimate drops below 1 at c=4, but that cell is not settled: no break-even to mark.
    assert analysis.break_even_concurrency(rows, "eagle") == 4
    assert analysis.settled_break_even(rows, "eagle") is None
    assert analysis.settled_break_even([rows[0], _row(4, 0.9, SLOWER, ci=(0.85, 0.95))], "eagle") == 4


def test_it_says_why_no_number_of_runs_would_settle_a_cell() -> None:
    rows = [
        _row(1, 1.005, INCONCLUSIVE, ci=(0.99, 1.02)),
        _row(2, 1.2, INCONCLUSIVE, n=(1, 1)),
        _row(4, 1.1, INCONCLUSIVE, ci=(0.98, 1.23), needed=4),
    ]

    (card,) = analysis.verdict_cards(rows, baseline="base", candidates=["eagle"], passes_per_launch=1)

    assert card.sentence.startswith("eagle is not yet faster or slower than the baseline; ")
    assert "c=4 is inconclusive (1.10x [0.98, 1.23]): about 1 more launch would likely settle it" in card.sentence
    assert "c=2 is inconclusive with one sample a side" in card.sentence
    assert "c=1 is within 2% of the baseline (1.00x [0.99, 1.02]): more runs would not" in card.sentence
    assert card.kind == INCONCLUSIVE and card.launches == 1


def test_it_never_compares_the_baseline_with_itself() -> None:
    samples = [analysis.Sample(name, 1, launch, 0, 80.0 + launch) for name in ("base", "eagle") for launch in range(3)]

    rows = analysis.compare_configs(samples, baseline="base", candidates=["base", "eagle"])

    assert [row.candidate for row in rows] == ["eagle"]
    names = [card.candidate for card in analysis.verdict_cards(rows, baseline="base", candidates=["base", "eagle"],
                                                              passes_per_launch=1)]  # fmt: skip
    assert names == ["eagle"]
    assert analysis.verdict_cards(rows, baseline="eagle", candidates=["eagle"], passes_per_launch=1) == []


@pytest.mark.django_db
def test_the_page_leads_with_a_card_read_from_the_verdict_table(owner_client) -> None:
    experiment = _finished(CELLS)
    report = build_report(experiment)
    by_level = {row.concurrency: row for row in report.rows}
    assert [by_level[c].verdict for c in (1, 2, 4, 8)] == [FASTER, FASTER, INCONCLUSIVE, SLOWER]

    page = owner_client.get(experiment.get_absolute_url()).content.decode()
    card = _card_text(page)

    launches = analysis.launches_to_settle(by_level[4], 3)
    assert launches is not None and launches <= 20
    assert f"{CANDIDATE} is faster at c=1-2 (" in card and "; slower at c=8 (0.92x [" in card
    assert "c=4 is inconclusive (1.03x [" in card
    assert f"about {launches} more launch{'es' if launches != 1 else ''} would likely settle it." in card
    # The button queues exactly those launches through the re-run form, with its CSRF token.
    assert f'action="/experiments/{experiment.pk}/rerun/"' in card
    assert f'name="launches" value="{launches}"' in card and "csrfmiddlewaretoken" in card
    assert f"Queue {launches} launch" in card
    # The card comes first: before the runs, the schedule and the warnings; the verdict table keeps every cell.
    assert page.index('id="verdict-cards"') < page.index('id="schedule"') < page.index('id="runs-card"')
    assert page.index('id="verdict-cards"') < page.index('id="reproducibility"')
    assert page.index('id="speedup-chart"') < page.index('id="runs-card"')
    # No break-even claimed: the crossing is at c=4, an inconclusive cell, and c=8 is not next to a faster cell.
    break_even = page[page.index('id="break-even"') :].split("</p>")[0]
    assert "stops paying" not in break_even and "no settled break-even" in break_even
    assert not any("break-even" in trace["name"] for trace in report.figures["speedup"]["data"])


@pytest.mark.django_db
def test_the_card_names_the_launches_compare_names_for_the_same_pair(owner_client) -> None:
    experiment = _finished(CELLS)
    candidate = experiment.candidate_set.get().config
    picks = [f"c{experiment.pk}-{experiment.baseline_id}", f"c{experiment.pk}-{candidate.pk}"]

    card = _card_text(owner_client.get(experiment.get_absolute_url()).content.decode())
    compare = owner_client.get("/compare/", {"pick": picks}).content.decode()

    on_card = re.search(r"about (\d+) more launch", card)
    on_compare = re.findall(r"about (\d+) more launch", compare)
    # its card, its verdict row on Compare and that row's gate reading
    assert on_card and on_compare == [on_card[1]] * 3


@pytest.mark.django_db
def test_a_visitor_reads_the_card_without_the_button(client, django_user_model) -> None:
    from django.contrib.auth.models import Permission

    experiment = _finished(CELLS)
    viewer = django_user_model.objects.create_user("viewer", password="x")
    viewer.user_permissions.add(Permission.objects.get(codename="view_experiment"))
    client.force_login(viewer)

    card = _card_text(client.get(experiment.get_absolute_url()).content.decode())

    assert "would likely settle it" in card and "<button" not in card


@pytest.mark.django_db
def test_the_warnings_fold_into_one_line_per_kind(owner_client) -> None:
    experiment = _finished(CELLS)
    run = experiment.run_set.exclude(config=experiment.baseline).get()
    run.warnings = [
        {"kind": "deprecated-flag", "message": "--foo is deprecated", "line": 12},
        {"kind": "deprecated-flag", "message": "--bar is deprecated", "line": 13},
        {"kind": "memory", "message": "KV cache is small", "line": 40},
    ]
    run.save(update_fields=["warnings"])

    page = owner_client.get(experiment.get_absolute_url()).content.decode()
    folded = page[page.index('<details id="warnings">') : page.index('id="experiment-diff-form"')]

    assert "{#" not in page and "3 warnings</strong>" in folded and "server warnings (3)" in folded
    kinds = re.findall(r"<summary>The servers warned: ([\w-]+) · (\d+)</summary>", folded)
    assert kinds == [("deprecated-flag", "2"), ("memory", "1")]
    assert "--foo is deprecated" in folded and "KV cache is small" in folded  # the details, a click away
    assert page.index('id="verdict-cards"') < page.index('<details id="warnings">') < page.index('id="runs-card"')
