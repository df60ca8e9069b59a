"""The live acceptance alarm's domain side: the history it compares with (a read), the warning stored with its
remedies and carried by the run's state events, and the run page and API that show it."""

from __future__ import annotations

import re

import pytest

from experiments.actions.runs import do_add_run_warning
from experiments.live import broadcast
from experiments.models import ApiToken, Measurement, Run
from experiments.reads.series import recent_accept_lengths
from experiments.remedies import acceptance_remedies

from .factories import make_eagle_config, make_history, make_run

pytestmark = pytest.mark.django_db

MESSAGE = "Acceptance collapsed: accept length 1.00 on 3 Decode lines in a row with requests running. Likely causes."
DECODE = "[2026-11-29 10:00:01 TP0] Decode batch, #running-req: 4, accept len: 1.00, accept rate: 0.33"


def _remedies() -> list[dict]:
    draft = {"architectures": ["LlamaForCausalLMEagle3"]}
    return [r.as_json({}, {}) for r in acceptance_remedies("EAGLE", None, draft)]


def test_it_reads_the_accept_length_of_the_configs_last_successful_runs_newest_first():
    config = make_eagle_config()
    runs = make_history([90.0] * 4, config=config)
    for run, accept in zip(runs, [2.0, 2.1, 2.2, 2.3], strict=True):
        Measurement.objects.filter(run=run).update(accept_length=accept)
    key = (runs[0].host_id, config.content_hash, runs[0].experiment.profile.series_key)
    Run.objects.filter(pk=runs[-1].pk).update(state=Run.State.FAILED)  # not a successful run: left out
    make_history([90.0], host=runs[0].host)  # another config's: left out

    assert recent_accept_lengths(*key) == pytest.approx([2.2, 2.1, 2.0])
    assert recent_accept_lengths(*key, limit=2) == pytest.approx([2.2, 2.1])


def test_it_reads_no_history_of_runs_without_accept_lengths(django_assert_num_queries):
    runs = make_history([90.0, 91.0])
    key = (runs[0].host_id, runs[0].config.content_hash, runs[0].experiment.profile.series_key)

    with django_assert_num_queries(1):
        assert recent_accept_lengths(*key) == []


def test_it_stores_the_alarm_with_its_remedies_and_sends_it_with_the_runs_state():
    run = make_run(state=Run.State.BENCHMARKING)

    do_add_run_warning(run, "acceptance_collapse", MESSAGE, line=812, text=DECODE, remedies=_remedies())
    do_add_run_warning(run, "acceptance_collapse", MESSAGE, line=812, text=DECODE, remedies=_remedies())

    run.refresh_from_db()
    (warning,) = run.warnings  # once
    assert warning["line"] == 812 and warning["remedies"][0]["id"] == "eagle3-algorithm"
    event = broadcast.run_state_event(run)
    assert event["warnings"] == run.warnings and event["state"] == "benchmarking"


def test_it_shows_the_alarm_and_its_likely_causes_on_the_run_page_and_in_the_api(client, owner_client, owner):
    run = make_run(state=Run.State.BENCHMARKING)
    do_add_run_warning(run, "acceptance_collapse", MESSAGE, line=812, text=DECODE, remedies=_remedies())

    content = owner_client.get(f"/runs/{run.pk}/").content.decode()
    _, token = ApiToken.issue(owner)
    body = client.get(f"/api/runs/{run.pk}", headers={"Authorization": f"Bearer {token}"}).json()

    assert '<div id="warnings-slot">' in content and 'data-kind="acceptance_collapse"' in content
    assert MESSAGE in content and '<a href="#L812">log line 812</a>' in content
    assert '<li data-remedy="eagle3-algorithm"><strong>Serve this EAGLE3 draft with --speculative-algorithm EAGLE3' in (
        content
    )
    assert '<li data-remedy="draft-weights">' in content
    assert [r["id"] for r in body["warnings"][0]["remedies"]] == ["eagle3-algorithm", "draft-target-mismatch",
                                                                  "draft-weights"]  # fmt: skip


def test_it_keeps_a_page_without_warnings_free_of_the_card(owner_client):
    content = owner_client.get(f"/runs/{make_run().pk}/").content.decode()

    # The slot is there for a warning that arrives live; the card only with a warning.
    assert re.search(r'<div id="warnings-slot">\s*</div>', content) and 'id="warnings"' not in content
