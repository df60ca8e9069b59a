"""The beat's safety net for tuning studies: a round whose end planned no next round gets one, once."""

from __future__ import annotations

import pytest
from django.utils import timezone

from experiments.models import ApiToken, Run, Study
from experiments.tests.factories import make_host, make_measurement
from experiments.tests.test_studies import BODY, TRUTH
from workers.tasks import advance_studies


@pytest.mark.django_db(transaction=True)  # the task closes the connection it finds (close_old_connections)
def test_it_plans_the_round_a_study_missed_once_and_only_once(client, owner, private_queue):
    _, token = ApiToken.issue(owner)
    created = client.post(
        "/api/studies", {**BODY, "host": make_host().name}, content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )  # fmt: skip
    study = Study.objects.get(pk=created.json()["id"])
    current = study.current_round()
    assert current is not None
    # The round's runs ended without their end planning the next round (its planning failed, say).
    for run in current.experiment.run_set.select_related("config"):
        truth = TRUTH.get(run.config.name, {1: 70.0, 8: 400.0})
        for level, tok_s in truth.items():
            make_measurement(run, concurrency=level, output_throughput=tok_s)
    current.experiment.run_set.update(state=Run.State.SUCCEEDED, started_at=timezone.now())

    assert advance_studies() == [study.pk]
    assert advance_studies() == []
    assert list(study.studyround_set.values_list("index", flat=True)) == [0, 1]
