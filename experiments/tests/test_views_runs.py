"""A run's page, its log download and cancelling it."""

from __future__ import annotations

import pytest

from experiments.models import Run

from .factories import make_eagle_config, make_log, make_run

pytestmark = pytest.mark.django_db


def test_it_shows_a_run_with_its_failure(owner_client):
    run = make_run(
        state=Run.State.FAILED,
        failure_kind=Run.FailureKind.CONTEXT_LENGTH,
        failure_message="draft context 131072 below target 262144",
        log_lines=12,
    )

    content = owner_client.get(f"/runs/{run.pk}/").content.decode()

    assert f"Run {run.pk}" in content
    assert "context_length" in content
    assert "draft context 131072 below target 262144" in content
    assert f'data-ws="/ws/runs/{run.pk}/log/"' in content
    assert f'action="/runs/{run.pk}/cancel/"' not in content  # finished: nothing to cancel


def test_it_shows_requested_vs_effective_server_args_and_marks_a_difference(owner_client):
    run = make_run(
        config=make_eagle_config(steps=2),
        state="failed",
        effective_args={"tp_size": 1, "speculative_num_steps": 2, "speculative_num_draft_tokens": 4, "port": 30000},
    )

    response = owner_client.get(f"/runs/{run.pk}/")

    rows = {row["arg"]: row for row in response.context["run"].requested_vs_effective()}
    assert rows["speculative_num_steps"]["differs"] is False
    assert rows["speculative_num_draft_tokens"] == {
        "arg": "speculative_num_draft_tokens", "requested": 3, "effective": 4, "differs": True
    }  # fmt: skip
    assert "port" not in rows
    assert b'class="differs"' in response.content


def test_it_streams_the_whole_log_in_order(owner_client, run):
    lines = make_log(run, [[f"line {i}" for i in range(k * 100, k * 100 + 50)] for k in range(7)])

    response = owner_client.get(f"/runs/{run.pk}/log.txt")

    assert response.streaming
    assert f'filename="run-{run.pk}.log"' in response["Content-Disposition"]
    assert b"".join(response.streaming_content).decode() == "".join(f"{line}\n" for line in lines)


def test_it_cancels_a_run_only_on_post(owner_client, experiment, run):
    assert owner_client.get(f"/runs/{run.pk}/cancel/").status_code == 405
    run.refresh_from_db()
    assert run.state == Run.State.QUEUED

    response = owner_client.post(f"/runs/{run.pk}/cancel/", {"next": f"/experiments/{experiment.pk}/"})

    assert response.status_code == 302
    assert response["Location"] == f"/experiments/{experiment.pk}/"
    run.refresh_from_db()
    assert run.state == Run.State.CANCELLED


def test_it_says_when_a_run_has_already_finished(owner_client):
    run = make_run(state=Run.State.SUCCEEDED)

    response = owner_client.post(f"/runs/{run.pk}/cancel/", follow=True)

    assert "has already finished" in response.content.decode()
    run.refresh_from_db()
    assert run.state == Run.State.SUCCEEDED and not run.cancel_requested
