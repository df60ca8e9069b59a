"""How long an experiment took, as the experiments table and GET /api/experiments say it: its runs' own time, and
for launches spread over days (a nightly series) the launches and the days rather than a span no run took."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.demo.history import NAME, seed_drift_history
from dashboard.demo.management.commands.demo import demo_experiment_payload
from experiments.models import Experiment, Run

from .factories import make_experiment, make_host

pytestmark = pytest.mark.django_db


def _row(content: str, experiment: Experiment) -> str:
    return content[content.index(f'data-experiment="{experiment.pk}"') :].split("</tr>")[0]


def test_it_says_the_demos_nightly_series_took_launches_over_days_not_312_hours(owner_client, owner, api):
    host = make_host()
    payload = demo_experiment_payload(host.models_root)
    nightly = seed_drift_history(host, payload["baseline"], payload["profile"], owner)
    assert nightly is not None and nightly.name == NAME
    launches = nightly.run_set.count()

    row = _row(owner_client.get("/experiments/").content.decode(), nightly)
    (shown,) = re.findall(r'<td class="time-taken">([^<]*)</td>', row)
    # Fourteen nights and a confirming launch, each 20 minutes, a night apart: 13 days from the first to the last.
    run_time = launches * 20
    assert launches == 15 and shown == "15 launches over 13 days (5 h of runs)"
    assert " h" not in shown.split("(")[0] and "312" not in row

    (listed,) = [e for e in api(owner, "get", "/api/experiments").json()["experiments"] if e["id"] == nightly.pk]
    assert listed["duration_text"] == shown and listed["run_time_s"] == run_time * 60
    assert 312 * 3600 <= listed["duration_s"] < 313 * 3600  # the calendar span, as the field always meant


def test_it_gives_an_experiment_of_one_sitting_its_span_and_sorts_by_the_runs_own_time(owner_client, owner, api):
    sitting = make_experiment(name="one sitting")
    start = timezone.now() - timedelta(hours=3)
    for i, run in enumerate(sitting.run_set.order_by("sequence")):
        Run.objects.filter(pk=run.pk).update(
            state=Run.State.SUCCEEDED,
            started_at=start + timedelta(minutes=30 * i),
            finished_at=start + timedelta(minutes=30 * i + 25),
        )
    spread = make_experiment(name="spread out")
    for i, run in enumerate(spread.run_set.order_by("sequence")):
        at = start - timedelta(days=3 * (i + 1))
        Run.objects.filter(pk=run.pk).update(
            state=Run.State.SUCCEEDED, started_at=at, finished_at=at + timedelta(minutes=5)
        )
    unfinished = make_experiment(name="unfinished")

    content = owner_client.get("/experiments/?sort=-duration").content.decode()

    runs = sitting.run_set.count()
    assert f'<td class="time-taken">{30 * runs - 5} min</td>' in _row(content, sitting)
    spread_text = r'<td class="time-taken">\d+ launches over \d+ days \(\d+ min of runs\)</td>'
    assert re.search(spread_text, _row(content, spread))
    assert '<td class="time-taken">—</td>' in _row(content, unfinished)
    names = re.findall(r'<tr data-experiment="\d+">\s*<td><a href="[^"]+">([^<]*)</a>', content)
    # Sorted by the runs' own time: the sitting's 25 min runs before the spread one's 5 min runs, days apart.
    assert names.index("one sitting") < names.index("spread out")
    assert sitting.time_taken is not None and not sitting.time_taken.is_spread_out
    assert unfinished.time_taken is None
