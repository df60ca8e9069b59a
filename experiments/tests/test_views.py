"""The browser pages: login required everywhere, full state rendered server-side, the new-experiment form."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from experiments.models import ApiToken, Experiment, Host, Run

from .factories import make_eagle_config, make_experiment, make_host, make_log, make_run, row_counts

pytestmark = pytest.mark.django_db


@pytest.fixture
def experiment():
    return make_experiment(name="eagle3 vs baseline", candidates=[make_eagle_config(name="eagle3-2step")])


@pytest.fixture
def run(experiment):
    return experiment.run_set.order_by("sequence").first()


def _pages(experiment: Experiment, run: Run) -> list[str]:
    return [
        "/",
        "/experiments/new/",
        f"/experiments/{experiment.pk}/",
        f"/experiments/{experiment.pk}/export.csv",
        f"/runs/{run.pk}/",
        f"/runs/{run.pk}/log.txt",
        "/hosts/",
        "/hosts/new/",
        "/tokens/",
    ]


def test_it_sends_an_anonymous_visitor_to_the_login_page(client, experiment, run):
    for url in _pages(experiment, run):
        response = client.get(url)

        assert response.status_code == 302, url
        assert response["Location"] == f"/login/?next={url}"


def test_it_refuses_anonymous_writes(client, experiment, run):
    host = experiment.host
    host.is_dirty = True
    host.save(update_fields=["is_dirty"])
    before = row_counts()

    for url in [f"/runs/{run.pk}/cancel/", f"/hosts/{host.pk}/clean/", f"/hosts/{host.pk}/test/", "/hosts/new/",
                "/tokens/new/", "/experiments/new/"]:  # fmt: skip
        response = client.post(url, {"candidate_count": "1"})

        assert response.status_code == 302, url
        assert response["Location"].startswith("/login/")
    run.refresh_from_db()
    host.refresh_from_db()
    assert run.state == Run.State.QUEUED and not run.cancel_requested
    assert host.is_dirty
    assert ApiToken.objects.count() == 0
    assert row_counts() == before


def test_it_renders_every_page_for_a_logged_in_user(owner_client, experiment, run):
    for url in _pages(experiment, run):
        assert owner_client.get(url).status_code == 200, url


def test_it_lists_experiments_with_their_status(owner_client, owner, experiment):
    Experiment.objects.filter(pk=experiment.pk).update(created_by=owner)
    experiment.run_set.update(state=Run.State.LOADING)

    content = owner_client.get("/").content.decode()

    assert "eagle3 vs baseline" in content
    assert f'href="/experiments/{experiment.pk}/"' in content
    assert "state-running" in content
    assert ">owner<" in content


def test_it_lists_experiments_in_a_constant_number_of_queries(owner_client, owner, django_assert_max_num_queries):
    make_experiment(created_by=owner)
    with CaptureQueriesContext(connection) as one:
        owner_client.get("/")
    for _ in range(9):
        make_experiment(created_by=owner, candidates=[make_eagle_config(), make_eagle_config(steps=3)])

    with django_assert_max_num_queries(len(one.captured_queries)):
        response = owner_client.get("/")

    assert response.content.decode().count('href="/experiments/') >= 10


def test_it_shows_an_experiment_to_another_team_member(client, member, experiment, run):
    client.force_login(member)

    content = client.get(f"/experiments/{experiment.pk}/").content.decode()

    assert "eagle3 vs baseline" in content
    assert "eagle3-2step" in content
    assert f'data-run="{run.pk}"' in content
    assert f'action="/runs/{run.pk}/cancel/"' in content
    assert f'data-ws="/ws/experiments/{experiment.pk}/"' in content


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


def test_it_lists_hosts(owner_client):
    make_host(name="gpu-box-1", is_dirty=True, dirty_reason="pid 4242 still holds 80000 MiB")

    content = owner_client.get("/hosts/").content.decode()

    assert "gpu-box-1" in content
    assert "pid 4242 still holds 80000 MiB" in content


def test_it_creates_a_token_that_works_against_the_api(owner_client):
    response = owner_client.post("/tokens/new/", {"name": "ci"})

    assert response.status_code == 200
    match = re.search(r'<code id="new-token">([^<]+)</code>', response.content.decode())
    assert match is not None
    token = match.group(1)
    owner_client.logout()
    assert owner_client.get("/api/hosts").status_code == 401
    assert owner_client.get("/api/hosts", headers={"Authorization": f"Bearer {token}"}).status_code == 200


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


def test_it_marks_a_dirty_host_clean_only_on_post(owner_client):
    host = make_host(is_dirty=True, dirty_reason="GPU memory held")

    assert owner_client.get(f"/hosts/{host.pk}/clean/").status_code == 405
    response = owner_client.post(f"/hosts/{host.pk}/clean/")

    assert response.status_code == 302
    host.refresh_from_db()
    assert not host.is_dirty and host.dirty_reason == ""


# --- the new-experiment form -------------------------------------------------------------------------------


def _config_fields(prefix: str, **fields: str) -> dict[str, str]:
    """One config block of the page, as the browser posts it (every field, empty ones included)."""
    values = {
        "name": "",
        "model_path": "/models/kimi-k2.5-sim",
        "served_model_name": "",
        "speculative_algorithm": "",
        "speculative_draft_model_path": "",
        "speculative_num_steps": "",
        "speculative_eagle_topk": "",
        "speculative_num_draft_tokens": "",
        "tp_size": "8",
        "env_text": "",
        "extra_args_text": "",
        "expect": "",
        "log_metrics": "",
        **fields,
    }
    return {f"{prefix}-{key}": value for key, value in values.items()}


def _eagle_fields(prefix: str, name: str, steps: int = 2, **fields: str) -> dict[str, str]:
    return _config_fields(
        prefix,
        name=name,
        speculative_algorithm="EAGLE3",
        speculative_draft_model_path="/models/kimi-k2.5-sim-eagle3",
        speculative_num_steps=str(steps),
        speculative_eagle_topk="1",
        speculative_num_draft_tokens=str(steps + 1),
        **fields,
    )


def _browser_post(host: Host, candidates: dict[str, str], candidate_count: int) -> dict[str, str]:
    profile = {
        "concurrency_text": "1, 4",
        "input_len": "128",
        "output_len": "128",
        "num_prompts": "16",
        "warmup_requests": "1",
        "passes": "1",
        "launches": "1",
        "seed": "1",
        "request_timeout_s": "600",
        "readiness_timeout_s": "1800",
        "stall_timeout_s": "300",
    }
    return {
        "experiment-name": "from the browser",
        "experiment-host": host.name,
        **_config_fields("baseline", name="baseline"),
        **candidates,
        "candidate_count": str(candidate_count),
        **{f"profile-{key}": value for key, value in profile.items()},
    }


def _field_html(content: str, field_id: str) -> str:
    """The <label> block of one field: its input, help text and errors (templates/experiments/_field.html)."""
    match = re.search(rf'<label[^>]*for="{re.escape(field_id)}".*?</label>', content, re.S)
    assert match, f"no field {field_id} on the page"
    return match.group(0)


def test_it_offers_a_new_experiment_form_for_the_first_host(owner_client):
    make_host(name="simhost", models_root="/srv/models")

    content = owner_client.get("/experiments/new/").content.decode()

    assert 'name="cand-0-name"' in content
    assert "/srv/models/kimi-k2.5-sim-eagle3" in content
    assert '<option value="simhost" selected>' in content


def test_it_creates_an_experiment_from_the_browser(owner_client, owner):
    host = make_host()
    candidate = _eagle_fields(
        "cand-0",
        "eagle3-2step",
        env_text="NCCL_PROTO=LL\n# a comment\nSGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1",
        extra_args_text="--mem-fraction-static 0.85",
        expect='{"env_propagated": ["NCCL_PROTO"]}',
    )

    response = owner_client.post("/experiments/new/", _browser_post(host, candidate, candidate_count=1))

    experiment = Experiment.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/experiments/{experiment.pk}/"
    assert experiment.name == "from the browser"
    assert experiment.created_by == owner
    (config,) = experiment.ordered_candidates()
    assert config.env == {"NCCL_PROTO": "LL", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}
    assert config.extra_args == ["--mem-fraction-static", "0.85"]
    assert config.expect == {"env_propagated": ["NCCL_PROTO"]}
    assert [r.config.name for r in experiment.run_set.order_by("sequence")] == ["baseline", "eagle3-2step"]
    assert experiment.profile.concurrency == [1, 4]


def test_it_skips_candidate_blocks_removed_in_the_browser(owner_client):
    host = make_host()
    candidates = {**_eagle_fields("cand-0", "eagle3-2step"), **_eagle_fields("cand-2", "eagle3-3step", steps=3)}

    response = owner_client.post("/experiments/new/", _browser_post(host, candidates, candidate_count=3))

    assert response.status_code == 302
    experiment = Experiment.objects.get()
    assert [c.name for c in experiment.ordered_candidates()] == ["eagle3-2step", "eagle3-3step"]
    assert [c.speculative_num_steps for c in experiment.ordered_candidates()] == [2, 3]


def test_it_keeps_a_block_numbered_past_the_candidate_limit(owner_client):
    # Adding and removing blocks in the browser only ever raises the numbers; a late block is still a block.
    host = make_host()
    candidates = {**_eagle_fields("cand-0", "eagle3-2step"), **_eagle_fields("cand-55", "eagle3-3step", steps=3)}

    response = owner_client.post("/experiments/new/", _browser_post(host, candidates, candidate_count=56))

    assert response.status_code == 302
    assert [c.name for c in Experiment.objects.get().ordered_candidates()] == ["eagle3-2step", "eagle3-3step"]


def test_it_does_not_trust_the_candidate_counter(owner_client):
    host = make_host()
    post = _browser_post(host, _eagle_fields("cand-0", "eagle3-2step"), candidate_count=1)
    post["candidate_count"] = "lots"

    response = owner_client.post("/experiments/new/", post)

    assert response.status_code == 302
    assert [c.name for c in Experiment.objects.get().ordered_candidates()] == ["eagle3-2step"]


def test_it_shows_errors_next_to_their_fields_and_saves_nothing(owner_client):
    host = make_host()
    candidates = {
        **_eagle_fields("cand-0", "eagle3-2step"),
        **_eagle_fields("cand-2", "eagle3-3step", steps=3, extra_args_text="--tp 4"),
    }
    post = _browser_post(host, candidates, candidate_count=3)
    post["profile-concurrency_text"] = "1, x"
    before = row_counts()

    response = owner_client.post("/experiments/new/", post)

    assert response.status_code == 400
    content = response.content.decode()
    assert "The experiment was not saved" in content
    bad_args = _field_html(content, "id_cand-2-extra_args_text")
    assert "has-error" in bad_args
    assert "--tp is set by the config" in bad_args
    assert "&#x27;x&#x27; is not a whole number" in _field_html(content, "id_profile-concurrency_text")
    assert "error" not in _field_html(content, "id_cand-0-extra_args_text")
    # What the user typed is kept, so fixing one field is enough.
    assert 'value="from the browser"' in content
    assert 'value="eagle3-3step"' in content
    assert 'name="candidate_count" id="candidate-count" value="3"' in content
    assert row_counts() == before


def test_it_refuses_a_submission_without_candidates(owner_client):
    host = make_host()

    response = owner_client.post("/experiments/new/", _browser_post(host, {}, candidate_count=2))

    assert response.status_code == 400
    assert "Add at least one candidate config." in response.content.decode()
    assert Experiment.objects.count() == 0


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


def test_it_registers_a_host_from_the_browser_and_says_what_is_wrong(owner_client):
    good = {"name": "gpu-7", "address": "10.0.0.7", "port": "22", "username": "infer", "key_name": "id_gpu7",
            "work_dir": "specdash-work", "models_root": "/models", "launcher": "python3 -m sglang.launch_server",
            "python": "python3", "server_port": "30000", "shell_setup": ""}  # fmt: skip

    bad = owner_client.post("/hosts/new/", {**good, "key_name": "../id_rsa", "server_port": "70000"})

    assert bad.status_code == 400
    assert "A file name inside SPECDASH_SSH_KEY_DIR, not a path." in bad.content.decode()
    assert "A TCP port is between 1 and 65535." in bad.content.decode()
    assert not Host.objects.filter(name="gpu-7").exists()

    response = owner_client.post("/hosts/new/", good, follow=True)

    host = Host.objects.get(name="gpu-7")
    assert (host.address, host.username, host.key_name, host.is_pinned) == ("10.0.0.7", "infer", "id_gpu7", False)
    page = response.content.decode()
    assert "Host gpu-7 registered. Test the connection to pin its SSH host key." in page
    assert f'action="/hosts/{host.pk}/test/"' in page


def test_it_offers_the_hosts_model_listing_to_the_new_experiment_form(owner_client, experiment):
    page = owner_client.get("/experiments/new/").content.decode()

    host = experiment.host
    assert f'"{host.name}": "/api/hosts/{host.pk}/models"' in page
    assert page.count('list="host-models"') == 5  # the baseline's path; the candidate's and its template's two
    assert '<datalist id="host-models">' in page
