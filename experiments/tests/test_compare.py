"""Comparing runs or configs picked from different experiments that share a request shape."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from experiments.models import Experiment, Measurement, Run

from .factories import make_config, make_eagle_config, make_experiment, make_host, make_profile

pytestmark = pytest.mark.django_db


def _measured(name: str, tok_s: dict[str, list[float]], *, host=None, profile=None, **fields) -> Experiment:
    """A finished experiment whose runs measured `tok_s[config name]` (passes) at concurrency 1 and 4 (x3)."""
    experiment = make_experiment(
        name=name, host=host or make_host(), profile=profile or make_profile(concurrency=[1, 4], passes=3), **fields
    )
    for run in experiment.run_set.select_related("config"):
        run.state = Run.State.SUCCEEDED
        run.save(update_fields=["state"])
        for level, scale in ((1, 1.0), (4, 3.0)):
            for pass_index, value in enumerate(tok_s[run.config.name]):
                Measurement.objects.create(
                    run=run, pass_index=pass_index, concurrency=level, completed=16, duration_s=10.0,
                    output_throughput=value * scale, total_throughput=2 * value, request_throughput=1.0,
                    mean_ttft_ms=40.0, p99_ttft_ms=80.0,
                )  # fmt: skip
    return experiment


@pytest.fixture
def two_experiments():
    first = _measured(
        "monday", {"baseline": [80.0, 81.0, 82.0], "eagle3-2step": [95.0, 96.0, 97.0]},
        baseline=make_config(name="baseline"), candidates=[make_eagle_config(name="eagle3-2step")],
    )  # fmt: skip
    # Another experiment, on another host, with a profile of the same request shape but other passes.
    second = _measured(
        "<b>tuesday</b>", {"baseline-b": [84.0, 85.0, 86.0], "eagle3-3step": [60.0, 61.0, 62.0]},
        host=make_host(name="other-host"), profile=make_profile(concurrency=[1, 4], passes=3, launches=1),
        baseline=make_config(name="baseline-b"), candidates=[make_eagle_config(name="eagle3-3step", steps=3)],
    )  # fmt: skip
    return first, second


def _pick(experiment: Experiment, name: str) -> str:
    config = (
        experiment.baseline
        if experiment.baseline.name == name
        else experiment.candidate_set.get(config__name=name).config
    )
    return f"c{experiment.pk}-{config.pk}"


def test_it_compares_configs_of_different_experiments_and_says_what_differs(owner_client, two_experiments):
    first, second = two_experiments
    picks = [_pick(first, "baseline"), _pick(first, "eagle3-2step"), _pick(second, "eagle3-3step")]

    response = owner_client.get("/compare/", {"pick": picks})

    assert response.status_code == 200
    page = response.content.decode()
    rows = page[page.index('id="comparison"') :].split("</table>")[0].split("<tbody>")[1]
    assert rows.count('<tr id="verdict-') == 4  # two picks x two concurrencies against the reference
    assert "verdict-faster" in rows and "verdict-slower" in rows
    differs = page[page.index('id="what-differs"') :].split("</p>")[0]
    for field in ("host", "algorithm", "steps", "draft tokens"):
        assert field in differs
    assert "model</" not in differs  # the same target model everywhere
    assert "eagle3-3step · &lt;b&gt;tuesday&lt;/b&gt;" in page and "<b>tuesday</b>" not in page
    assert 'id="throughput-figure"' in page and 'id="speedup-figure"' in page
    # The slower pick never pays: no break-even mark, said in words.
    assert "<strong>never pays</strong> at the measured concurrencies" in page


def test_it_compares_single_runs_and_offers_configs_of_the_same_request_shape(owner_client, two_experiments):
    first, second = two_experiments
    base_run = first.run_set.get(config=first.baseline)
    other_run = second.run_set.get(config=second.baseline)

    page = owner_client.get("/compare/", {"pick": [f"r{base_run.pk}"], "add": str(other_run.pk)}).content.decode()

    assert f"run {base_run.pk} · baseline" in page and f"run {other_run.pk} · baseline-b" in page
    assert "verdict-" in page
    suggestions = page[page.index('id="suggestions"') :]
    assert f"pick=c{first.pk}-" in suggestions and "+ eagle3-2step" in suggestions
    # One pick alone is an invitation to add another, not an error.
    alone = owner_client.get("/compare/", {"pick": f"r{base_run.pk}"})
    assert alone.status_code == 200 and 'id="pick-another"' in alone.content.decode()


def test_it_refuses_picks_that_are_not_comparable_and_says_why(owner_client, two_experiments):
    first, _ = two_experiments
    longer = _measured(
        "long prompts", {"baseline": [40.0, 41.0, 42.0]}, candidates=[],
        baseline=make_config(name="baseline"), profile=make_profile(input_len=4096, passes=3),
    )  # fmt: skip

    response = owner_client.get("/compare/", {"pick": [_pick(first, "baseline"), _pick(longer, "baseline")]})

    assert response.status_code == 400
    page = response.content.decode()
    assert "different request shapes" in page and "4096 in / 128 out" in page and 'id="compare-error"' in page
    for bad in ("x1", "r", f"c{first.pk}-999999", "r99999999", "<script>alert(1)</script>"):
        response = owner_client.get("/compare/", {"pick": [_pick(first, "baseline"), bad]})
        assert response.status_code == 400, bad
        assert "<script>alert(1)" not in response.content.decode()
    # A config of another experiment is not a config of this one.
    config_of_longer = longer.baseline.pk
    response = owner_client.get("/compare/", {"pick": [_pick(first, "baseline"), f"c{first.pk}-{config_of_longer}"]})
    assert response.status_code == 400 and "has no config" in response.content.decode()


def test_it_compares_in_a_constant_number_of_queries(owner_client, two_experiments):
    first, second = two_experiments
    two = [_pick(first, "baseline"), f"r{second.run_set.get(config=second.baseline).pk}"]
    with CaptureQueriesContext(connection) as few:
        assert owner_client.get("/compare/", {"pick": two}).status_code == 200
    runs = [f"r{pk}" for pk in Run.objects.values_list("pk", flat=True)]
    more = [*two, *runs[:4], _pick(second, "eagle3-3step")]
    with CaptureQueriesContext(connection) as many:
        assert owner_client.get("/compare/", {"pick": more}).status_code == 200
    assert len(many.captured_queries) == len(few.captured_queries)


def test_it_shows_the_comparison_only_to_team_members(client, outsider, viewer, two_experiments):
    first, second = two_experiments
    picks = {"pick": [_pick(first, "baseline"), _pick(second, "baseline-b")]}
    client.force_login(outsider)
    assert client.get("/compare/", picks).status_code == 403
    client.force_login(viewer)
    assert client.get("/compare/", picks).status_code == 200


def test_it_answers_the_comparison_as_json_and_422_with_the_reason(client, owner, two_experiments):
    from experiments.models import ApiToken

    first, second = two_experiments
    _, token = ApiToken.issue(owner)
    auth = {"Authorization": f"Bearer {token}"}
    picks = [_pick(first, "baseline"), _pick(second, "eagle3-3step")]

    body = client.get("/api/compare", {"pick": picks}, headers=auth).json()

    assert body["reference"] == "baseline · monday"
    assert [p["pick"] for p in body["picks"]] == picks and body["picks"][1]["host"] == "other-host"
    assert {"host", "algorithm", "steps"} <= set(body["differences"])
    assert [row["verdict"] for row in body["comparison"]] == ["slower", "slower"]
    assert body["never_pays"] == ["eagle3-3step · <b>tuesday</b>"]
    refused = client.get("/api/compare", {"pick": [picks[0], "r999999999999"]}, headers=auth)
    assert refused.status_code == 404 and "no run" in refused.json()["errors"]["pick"][0]
    assert client.get("/api/compare", {"pick": picks}).status_code == 401


def test_it_leads_with_a_verdict_card_per_pick_against_the_reference(owner_client, two_experiments):
    first, second = two_experiments
    picks = [_pick(first, "baseline"), _pick(first, "eagle3-2step"), _pick(second, "eagle3-3step")]

    page = owner_client.get("/compare/", {"pick": picks}).content.decode()

    cards = page[page.index('id="verdict-cards"') :].split("</section>")[0]
    assert page.index('id="verdict-cards"') < page.index('id="picks"') < page.index('id="throughput"')
    assert cards.count("verdict-card ") == 2 and "verdict-card-faster" in cards and "verdict-card-slower" in cards
    assert "eagle3-2step" in cards and "faster" in cards and "[" in cards  # its interval


def test_an_empty_page_invites_a_pick_and_a_bad_addition_keeps_the_comparison(owner_client, two_experiments):
    first, _ = two_experiments
    empty = owner_client.get("/compare/")
    assert empty.status_code == 200
    assert 'id="compare-start"' in empty.content.decode() and "Cannot compare" not in empty.content.decode()

    picks = [_pick(first, "baseline"), _pick(first, "eagle3-2step")]
    response = owner_client.get("/compare/", {"pick": picks, "add": "r99999999"})

    page = response.content.decode()
    assert response.status_code == 200 and 'id="compare-add-error"' in page and "r99999999" in page
    assert 'id="comparison"' in page and "Cannot compare" not in page
    assert f'value="{picks[0]}"' in page and 'value="r99999999"' not in page  # the next Add keeps the good picks


def test_it_draws_the_picks_per_gpu_against_per_user_with_their_frontier(owner_client):
    # tp 8 against tp 4: the tp-4 pick makes fewer tokens in all, and more per GPU at a faster pace per user.
    experiment = make_experiment(
        profile=make_profile(concurrency=[1, 4], passes=3), baseline=make_config(name="tp8", tp_size=8),
        candidates=[make_config(name="tp4", tp_size=4)],
    )  # fmt: skip
    for run in experiment.run_set.select_related("config"):
        Run.objects.filter(pk=run.pk).update(state=Run.State.SUCCEEDED)
        total = {8: 400.0, 4: 300.0}[run.config.tp_size]
        for level in (1, 4):
            for pass_index in range(3):
                Measurement.objects.create(
                    run=run, pass_index=pass_index, concurrency=level, completed=16, duration_s=10.0,
                    output_throughput=total * level / 4 + pass_index, total_throughput=1.0, request_throughput=1.0,
                    mean_tpot_ms=(10.0 if run.config.tp_size == 8 else 9.0) * level,
                )  # fmt: skip
    picks = [_pick(experiment, "tp8"), _pick(experiment, "tp4")]

    response = owner_client.get("/compare/", {"pick": picks})

    figure = response.context["result"].figures["frontier"]
    curves = {trace["name"].split(" · ")[0]: trace for trace in figure["data"]}
    assert set(curves) == {"tp8", "tp4", "best (frontier)"}
    assert curves["tp4"]["y"][0] == pytest.approx(301.0 / 4)  # per GPU: 301 tok/s on 4 GPUs at c=4 (the slowest pace)
    assert curves["tp8"]["y"][0] == pytest.approx(401.0 / 8)
    assert [label.split(" · ")[0] for label in curves["best (frontier)"]["text"]] == ["tp4", "tp4"]
    assert 'id="frontier-figure"' in response.content.decode()
