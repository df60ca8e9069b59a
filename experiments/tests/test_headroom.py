"""Acceptance headroom studies: starting one (page form and API), its page, who may, bad input, the attack on the
simulated accept length, and what simulated-acceptance configs may never be (a headline, the best speedup, gated)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from experiments.models import ApiToken, AuditEvent, Experiment, HeadroomStudy, Measurement, Run, ServerConfig
from experiments.rules.headroom import SIMULATE_ENV

from .factories import make_config, make_eagle_config, make_experiment, make_profile

pytestmark = pytest.mark.django_db

REAL = "eagle3-s2"
BASELINE_TOK_S = {1: 80.0, 4: 280.0}
NEEDED = 2.0  # the accept length at which the config's cycle costs what the baseline's tokens do


def _source() -> Experiment:
    return make_experiment(
        name="eagle3 vs baseline",
        baseline=make_config(name="baseline"),
        candidates=[make_eagle_config(name=REAL), make_config(name="other-baseline-like")],
        profile=make_profile(concurrency=[1, 4], passes=3, launches=2),
    )


def _measure(experiment: Experiment, real_accept_length: float = 2.4) -> None:
    """Every run of `experiment` succeeded with three passes on the break-even model: a config of accept length AL
    serves AL / NEEDED times the baseline (slightly noisy, so intervals exist)."""
    for run in experiment.run_set.select_related("config"):
        Run.objects.filter(pk=run.pk).update(state=Run.State.SUCCEEDED)
        config = run.config
        length = config.simulated_accept_length or (real_accept_length if config.is_speculative else None)
        for level, tok_s in BASELINE_TOK_S.items():
            for pass_index, noise in enumerate((0.99, 1.0, 1.01)):
                value = tok_s * (length / NEEDED if length else 1.0) * noise
                Measurement.objects.create(
                    run=run, pass_index=pass_index, concurrency=level, completed=16, duration_s=10.0,
                    output_throughput=value, total_throughput=2 * value, request_throughput=1.0,
                    accept_length=length,
                )  # fmt: skip


def _real(source: Experiment) -> ServerConfig:
    return next(c for c in source.ordered_candidates() if c.name == REAL)


def test_a_member_starts_one_from_the_experiment_page_and_it_queues_the_copies_interleaved(client, member):
    source = _source()
    client.force_login(member)
    page = client.get(f"/experiments/{source.pk}/").content.decode()
    assert 'id="headroom-form"' in page and f'action="/experiments/{source.pk}/headroom/new/"' in page

    response = client.post(f"/experiments/{source.pk}/headroom/new/", {"config": _real(source).pk})

    study = HeadroomStudy.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/experiments/{study.experiment_id}/headroom/"
    assert study.accept_lengths == [1.5, 2.0, 2.5, 3.0] and study.source == source
    experiment = study.experiment
    names = [c.name for c in experiment.ordered_candidates()]
    assert names == [REAL, f"{REAL} · AL 1.5", f"{REAL} · AL 2", f"{REAL} · AL 2.5", f"{REAL} · AL 3"]
    copies = experiment.ordered_candidates()[1:]
    assert [c.env[SIMULATE_ENV] for c in copies] == ["1.5", "2", "2.5", "3"]
    assert all(c.env["SGLANG_SIMULATE_ACC_METHOD"] == "match-expected" for c in copies)
    assert all(c.speculative_num_steps == 2 and c.speculative_num_draft_tokens == 3 for c in copies)
    runs = list(experiment.run_set.order_by("sequence").select_related("config"))
    # Each config once per launch, the baseline first: interleaved, 2 launches of 6 configs.
    assert [r.config.name for r in runs] == ["baseline", *names] * 2
    assert experiment.created_by == member
    event = AuditEvent.objects.get(action=AuditEvent.Action.HEADROOM_START)
    assert event.actor == member and event.detail == {"source": source.pk, "accept_lengths": [1.5, 2.0, 2.5, 3.0]}


def test_it_refuses_a_viewer_an_outsider_and_an_anonymous_user(client, viewer, outsider):
    source = _source()
    for user in (viewer, outsider):
        client.force_login(user)
        assert client.post(f"/experiments/{source.pk}/headroom/new/", {"config": _real(source).pk}).status_code == 403
    client.logout()
    assert client.post(f"/experiments/{source.pk}/headroom/new/", {"config": _real(source).pk}).status_code == 302
    assert not HeadroomStudy.objects.exists()
    client.force_login(outsider)
    _start(source)
    assert client.get(f"/experiments/{HeadroomStudy.objects.get().experiment_id}/headroom/").status_code == 403


@pytest.mark.parametrize(
    ("lengths", "error"),
    [
        ("0.5", "Accept length 0.5 is outside 1 to 3"),
        ("3.5", "Accept length 3.5 is outside 1 to 3"),
        ("2.5; rm -rf /", "Accept lengths are numbers such as 2.5, not '2.5; rm -rf /'"),
        ("$(id)", "Accept lengths are numbers such as 2.5, not '$(id)'"),
        ("1e1", "Accept lengths are numbers such as 2.5"),
        ("nan", "Accept lengths are numbers such as 2.5"),
        ("2, 2", "Each accept length once."),
    ],
)
def test_it_refuses_bad_accept_lengths_with_a_clear_error(client, member, lengths, error):
    source = _source()
    client.force_login(member)

    response = client.post(
        f"/experiments/{source.pk}/headroom/new/", {"config": _real(source).pk, "accept_lengths": lengths}, follow=True
    )

    assert error in response.content.decode().replace("&#x27;", "'")
    assert not HeadroomStudy.objects.exists() and Experiment.objects.count() == 1


def test_it_takes_only_an_eagle_family_candidate_of_the_experiment(client, member):
    source = _source()
    foreign = make_eagle_config(name="not-in-this-experiment")
    client.force_login(member)
    for config in (foreign, ServerConfig.objects.get(name="other-baseline-like"), source.baseline):
        client.post(f"/experiments/{source.pk}/headroom/new/", {"config": config.pk})
    assert not HeadroomStudy.objects.exists()


def _start(source: Experiment, lengths: list[float] | None = None) -> HeadroomStudy:
    from experiments.actions.audit import Actor
    from experiments.actions.headroom import do_start_headroom

    config = _real(source)
    return do_start_headroom(
        source, config=config, accept_lengths=lengths or [1.5, 2.0, 2.5, 3.0], actor=Actor.command(source.created_by)
    )


def test_its_page_leads_with_the_gain_and_says_simulated_runs_measure_speed_only(owner_client):
    study = _start(_source())
    _measure(study.experiment)

    page = owner_client.get(f"/experiments/{study.experiment_id}/headroom/").content.decode()

    sentence = page[page.index('id="headroom-sentence"') :]
    assert sentence.index("Raising accept length from 2.4 to 3.0 would give 1.50x [") < sentence.index("</p>")
    assert "at c=1 instead of 1.20x [" in sentence
    assert "breaks even at accept length 2.00 at c=1" in page
    assert "Simulated-acceptance runs measure speed, never output quality" in page
    assert 'id="headroom-chart"' in page and 'id="headroom-figure"' in page
    # The source experiment's page links to it (the study's experiment's page: below).
    assert (
        f'href="/experiments/{study.experiment_id}/headroom/"'
        in owner_client.get(f"/experiments/{study.source_id}/").content.decode()
    )


def test_simulated_configs_are_marked_and_never_the_headline_or_the_best_speedup(owner_client):
    study = _start(_source())
    _measure(study.experiment)

    page = owner_client.get(f"/experiments/{study.experiment_id}/").content.decode()

    assert f'href="/experiments/{study.experiment_id}/headroom/">what a better draft would be worth' in page
    headline = page[page.index('id="headline"') : page.index("</p>", page.index('id="headline"'))]
    assert f"{REAL} serves 1.20x" in headline and "AL" not in headline  # AL 3 ran 1.5x: not a result to deploy
    card = page[page.index(f'id="card-{REAL.lower()}-al-3"') :]
    assert "simulated acceptance" in card[: card.index("</article>")]
    real_card = page[page.index(f'id="card-{REAL.lower()}"') :]
    assert "simulated acceptance" not in real_card[: real_card.index("</article>")]
    table = owner_client.get("/experiments/").content.decode()
    row = table[table.index(f'href="/experiments/{study.experiment_id}/"') :]
    assert "1.20" in row[: row.index("</tr>")] and "1.50" not in row[: row.index("</tr>")]


def test_its_page_reads_in_the_same_number_of_queries_whatever_the_lengths(owner_client):
    small = _start(_source(), [1.5, 3.0])
    _measure(small.experiment)
    with CaptureQueriesContext(connection) as few:
        owner_client.get(f"/experiments/{small.experiment_id}/headroom/")
    large = _start(_source(), [1.5, 1.75, 2.0, 2.25, 2.5, 2.75, 3.0])
    _measure(large.experiment)

    with CaptureQueriesContext(connection) as many:
        response = owner_client.get(f"/experiments/{large.experiment_id}/headroom/")

    assert response.status_code == 200 and len(many.captured_queries) <= len(few.captured_queries)


def _api(client, user, method: str, path: str, body=None):
    _, token = ApiToken.issue(user)
    headers = {"Authorization": f"Bearer {token}"}
    if method == "post":
        return client.post(path, body, content_type="application/json", headers=headers)
    return client.get(path, headers=headers)


def test_the_api_starts_one_by_config_name_and_reads_it(client, member, viewer):
    source = _source()

    created = _api(
        client,
        member,
        "post",
        f"/api/experiments/{source.pk}/headroom",
        {"config": REAL, "accept_lengths": [2, 1.5, 3]},
    )

    assert created.status_code == 201, created.content
    body = created.json()
    assert body["accept_lengths"] == [1.5, 2.0, 3.0] and body["config"] == REAL and body["status"] == "queued"
    assert body["simulated_acceptance_measures"] == "speed only, never output quality"
    study = HeadroomStudy.objects.get()
    _measure(study.experiment)
    for experiment_id in (source.pk, study.experiment_id):  # by the source, or by the study's own experiment
        read = _api(client, viewer, "get", f"/api/experiments/{experiment_id}/headroom").json()
        assert read["id"] == study.pk and read["sentence"].startswith("Raising accept length from 2.4 to 3.0")
        first = read["levels"][0]
        assert first["concurrency"] == 1 and first["break_even_accept_length"] == pytest.approx(NEEDED, rel=0.02)
        assert [p["accept_length"] for p in first["simulated"]] == [1.5, 2.0, 3.0]


def test_the_api_refuses_bad_input_with_the_field_named(client, member, viewer):
    source = _source()
    path = f"/api/experiments/{source.pk}/headroom"

    unknown = _api(client, member, "post", path, {"config": "no-such-config"})
    out_of_range = _api(client, member, "post", path, {"config": REAL, "accept_lengths": [3.5]})
    unbounded = _api(client, member, "post", path, {"config": REAL, "accept_lengths": [40]})
    forbidden = _api(client, viewer, "post", path, {"config": REAL})
    missing = _api(client, viewer, "get", path)

    assert unknown.status_code == 404 and unknown.json()["detail"].startswith("config: ")
    # Past this config's steps + 1: a rule between the config and the lengths; past any config's, the schema's.
    assert out_of_range.status_code == 409, out_of_range.json()
    assert unbounded.status_code == 422 and list(unbounded.json()["errors"]) == ["accept_lengths.0"]
    assert "outside 1 to 3" in out_of_range.json()["errors"]["accept_lengths"][0], out_of_range.json()
    assert forbidden.status_code == 403 and missing.status_code == 404
    assert _api(client, viewer, "get", "/api/experiments/999999/headroom").status_code == 404
    assert not HeadroomStudy.objects.exists()


def test_it_is_held_to_the_member_s_launch_quota(client, member, settings):
    settings.SPECDASH_QUOTA_LAUNCHES_PER_USER = 5  # the study would queue 2 launches of 6 configs
    source = _source()

    over = _api(client, member, "post", f"/api/experiments/{source.pk}/headroom", {"config": REAL})
    client.force_login(member)
    page = client.post(f"/experiments/{source.pk}/headroom/new/", {"config": _real(source).pk}, follow=True)

    assert over.status_code == 429
    assert over.json()["errors"]["quota"][0].startswith("5 pending runs allowed for you")
    assert "5 pending runs allowed for you" in page.content.decode()
    assert not HeadroomStudy.objects.exists() and Experiment.objects.count() == 1
