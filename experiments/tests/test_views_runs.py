"""A run's page, its log download and cancelling it."""

from __future__ import annotations

import pytest

from experiments.models import Host, Run

from .browser_support import DROP_SOCKETS, KEEP_SOCKETS
from .factories import make_eagle_config, make_experiment, make_log, make_run

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


# ---- the server's facts and the remedies of a failure ----------------------------------------------------------

SERVER_FACTS = {
    "draft_loading_progress": 40,
    "graphs_captured": [["target", 18.28], ["draft", 4.56]],
    "limits": {"max_total_num_tokens": 600000, "max_running_requests": 48, "context_len": 131072},
    "retractions": 2,
    "last_retraction": "KV cache pool is full. Retract requests. #retracted_reqs: 3, <b>",
}


def test_it_shows_target_and_draft_loading_apart_and_the_servers_kv_pool_graphs_and_retractions(owner_client):
    run = make_run(state=Run.State.LOADING, loading_progress=100, live_facts={"server": SERVER_FACTS})

    content = owner_client.get(f"/runs/{run.pk}/").content.decode()

    assert "target: 100% of weight shards loaded" in content and "draft: 40% of weight shards loaded" in content
    assert '<dd data-server="max_total_num_tokens">600,000 tokens</dd>' in content
    assert '<dd data-server="context_len">131,072 tokens</dd>' in content
    assert '<dd data-server="capture">target 18.3 s · draft 4.6 s</dd>' in content
    assert '<dd data-server="retractions">2</dd>' in content
    assert "#retracted_reqs: 3, &lt;b&gt;" in content  # the log's words, escaped


def test_it_sends_the_servers_facts_with_each_state_change():
    from experiments.live import broadcast

    run = make_run(state=Run.State.LOADING, loading_progress=60, live_facts={"server": SERVER_FACTS})

    event = broadcast.run_state_event(run)

    assert event["server_facts"]["draft_progress"] == 40
    assert event["server_facts"]["shown"]["max_total_num_tokens"] == "600,000 tokens"


def _oom_run(**fields):
    candidate = make_eagle_config(name="eagle3")
    run = make_run(experiment=make_experiment(candidates=[candidate], with_runs=False), config=candidate, **fields)
    Run.objects.filter(pk=run.pk).update(
        state=Run.State.FAILED,
        failure_kind=Run.FailureKind.OOM,
        failure_message="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. <script>",
    )
    make_log(run, [["[2026-02-23 10:00:00] server_args=ServerArgs(mem_fraction_static=0.88, cuda_graph_max_bs=160)"]])
    return Run.objects.get(pk=run.pk)


def test_it_lists_the_remedies_of_a_failure_with_a_button_for_whoever_may_rerun(owner_client):
    run = _oom_run()

    content = owner_client.get(f"/runs/{run.pk}/").content.decode()

    assert '<li data-remedy="mem-fraction">' in content and "SGLang chose 0.88" in content
    assert "<code>--mem-fraction-static 0.83</code>" in content
    assert f'action="/runs/{run.pk}/remedy/"' in content and 'name="remedy" value="mem-fraction"' in content
    assert "<script>" not in content.split('id="failure"')[1].split("</section>")[0]  # the message, escaped


def test_it_shows_a_viewer_the_remedies_without_the_buttons(client, viewer):
    run = _oom_run()
    client.force_login(viewer)

    content = client.get(f"/runs/{run.pk}/").content.decode()

    assert '<li data-remedy="mem-fraction">' in content
    assert f'action="/runs/{run.pk}/remedy/"' not in content


def test_it_reruns_with_a_remedy_and_links_the_new_version_and_the_failure_both_ways(owner_client):
    run = _oom_run()
    assert owner_client.get(f"/runs/{run.pk}/remedy/").status_code == 405

    response = owner_client.post(f"/runs/{run.pk}/remedy/", {"remedy": "cuda-graph-bs"})

    assert response.status_code == 302 and response["Location"] == run.experiment.get_absolute_url()
    new = Run.objects.get(config__remedy_for_run=run)
    assert new.config.name == "eagle3 · graph bs 80" and new.state == Run.State.QUEUED
    new_page = owner_client.get(f"/runs/{new.pk}/").content.decode()
    assert f'<a href="/runs/{run.pk}/">remedy for run {run.pk}</a>' in new_page
    failed_page = owner_client.get(f"/runs/{run.pk}/").content.decode()
    assert f'<a href="/runs/{new.pk}/">run {new.pk}</a> (eagle3 · graph bs 80, queued)' in failed_page


def test_it_says_why_a_remedy_cannot_be_applied(owner_client):
    run = _oom_run()

    response = owner_client.post(f"/runs/{run.pk}/remedy/", {"remedy": "no-such-remedy"}, follow=True)

    assert "has no remedy “no-such-remedy”" in response.content.decode()
    assert not Run.objects.filter(config__remedy_for_run=run).exists()


def test_it_lets_only_whoever_manages_the_experiment_rerun_with_a_remedy(client, viewer, member):
    run = _oom_run()
    for user in (viewer, member):  # a member, on someone else's experiment
        client.force_login(user)
        assert client.post(f"/runs/{run.pk}/remedy/", {"remedy": "mem-fraction"}).status_code == 403
    assert not Run.objects.filter(config__remedy_for_run=run).exists()


@pytest.mark.browser
@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_it_shows_a_failure_that_arrives_live_with_its_remedies_and_the_servers_facts(
    browser_user, log_in, live_web, browser
):
    run = _oom_run()
    Run.objects.filter(pk=run.pk).update(state=Run.State.LOADING, failure_kind="", loading_progress=100)
    run.experiment.created_by = browser_user
    run.experiment.save(update_fields=["created_by"])
    page = browser.new_context().new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.add_init_script(KEEP_SOCKETS)
    log_in(page)
    page.goto(f"{live_web}/runs/{run.pk}/")
    page.wait_for_function("() => document.body.dataset.live === 'on'")
    assert page.is_hidden("#failure") and page.inner_text("#server-facts [data-server=draft_progress]") == "—"

    # The run fails while the page is open; the reconnecting page gets the state as a live page would.
    failure = {"failure_kind": Run.FailureKind.OOM, "failure_message": "CUDA out of memory."}
    Run.objects.filter(pk=run.pk).update(state=Run.State.FAILED, live_facts={"server": SERVER_FACTS}, **failure)
    page.evaluate(DROP_SOCKETS)

    page.wait_for_selector("#remedy-list li[data-remedy=mem-fraction] form button")
    assert page.input_value("#remedy-list li[data-remedy=mem-fraction] input[name=remedy]") == "mem-fraction"
    assert "--mem-fraction-static 0.83" in page.inner_text("#remedy-list li[data-remedy=mem-fraction]")
    assert page.inner_text("#failure [data-field=kind]") == "oom"
    assert page.inner_text("#server-facts [data-server=draft_progress]") == "40%"
    assert page.inner_text("#server-facts [data-server=capture]") == "target 18.3 s · draft 4.6 s"
    assert page.is_hidden("#loading-progress") and not errors


def test_it_names_the_processes_on_a_dirty_host_and_lets_only_who_may_clean_it_mark_it_clean(
    owner_client, client, viewer
):
    held = "GPU memory is still held after SIGKILL: pid 4242 still holds 81920 MiB"
    run = make_run(state=Run.State.FAILED, failure_kind=Run.FailureKind.TEARDOWN_INCOMPLETE, failure_message=held)
    Host.objects.filter(pk=run.host_id).update(
        is_dirty=True, dirty_reason=f"run {run.pk}: pid 4242 still holds 81920 MiB"
    )
    clean = f'action="/hosts/{run.host_id}/clean/"'

    content = owner_client.get(f"/runs/{run.pk}/").content.decode()

    assert '<li data-remedy="clean-host">' in content and "pid 4242 (81920 MiB) hold GPU memory" in content
    assert clean in content and f'href="/hosts/{run.host_id}/"' in content
    client.force_login(viewer)
    assert clean not in client.get(f"/runs/{run.pk}/").content.decode()
