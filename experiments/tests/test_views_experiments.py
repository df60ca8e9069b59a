"""The experiment pages: the list, the new-experiment form, an experiment's page, a re-run."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from experiments.actions.audit import Actor
from experiments.actions.review import do_pin_baseline
from experiments.models import ApiToken, Experiment, Host, Run

from .factories import make_config, make_eagle_config, make_experiment, make_history, make_host, row_counts

pytestmark = pytest.mark.django_db


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


def test_it_shows_an_experiment_to_another_team_member_without_their_buttons(client, member, experiment, run):
    client.force_login(member)

    content = client.get(f"/experiments/{experiment.pk}/").content.decode()

    assert "eagle3 vs baseline" in content
    assert "eagle3-2step" in content
    assert f'data-run="{run.pk}"' in content
    assert f'action="/runs/{run.pk}/cancel/"' not in content  # not theirs: only its owner or a maintainer
    assert f'action="/experiments/{experiment.pk}/rerun/"' not in content
    assert f'data-ws="/ws/experiments/{experiment.pk}/"' in content


def test_it_says_on_the_experiment_page_whether_its_baseline_is_the_pinned_one(owner_client, owner):
    runs = make_history([88.8, 88.9])
    experiment = runs[0].experiment
    page = owner_client.get(f"/experiments/{experiment.pk}/").content.decode()
    assert "No baseline is pinned" in page

    do_pin_baseline(
        host=experiment.host,
        profile=experiment.profile,
        config=make_config(name="other", tp_size=2),
        actor=Actor(owner),
    )
    assert "Not the pinned baseline" in owner_client.get(f"/experiments/{experiment.pk}/").content.decode()

    do_pin_baseline(host=experiment.host, profile=experiment.profile, config=experiment.baseline, actor=Actor(owner))
    assert "is the one the team pinned" in owner_client.get(f"/experiments/{experiment.pk}/").content.decode()


def test_it_reruns_an_experiment_with_more_interleaved_launches(owner_client, client, owner):
    experiment = make_experiment()  # baseline + one candidate, one launch each
    assert owner_client.post(f"/experiments/{experiment.pk}/rerun/", {"launches": 2}).status_code == 302

    runs = list(experiment.run_set.order_by("sequence").values_list("config__name", "launch_index", "sequence"))
    names = [name for name, _, _ in runs]
    assert names == [names[0], names[1]] * 3
    assert [launch for _, launch, _ in runs] == [0, 0, 1, 1, 2, 2]

    _, token = ApiToken.issue(owner)
    response = client.post(
        f"/api/experiments/{experiment.pk}/rerun",
        {"launches": 1},
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )
    assert response.status_code == 201
    assert len(response.json()["runs"]) == 2
    bad = client.post(
        f"/api/experiments/{experiment.pk}/rerun",
        {"launches": 0},
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )
    assert bad.status_code == 422


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


def test_it_starts_the_new_experiment_form_with_the_models_the_settings_suggest(owner_client, settings):
    settings.SPECDASH_SUGGESTED_MODELS = ("llama-3-70b", "llama-3-70b-eagle3")
    make_host(models_root="/srv/models")

    content = owner_client.get("/experiments/new/").content.decode()

    assert 'value="/srv/models/llama-3-70b"' in content
    assert 'value="/srv/models/llama-3-70b-eagle3"' in content
    assert "kimi" not in content


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


def test_it_accepts_a_baseline_alone_and_shows_its_throughput(owner_client):
    host = make_host()

    response = owner_client.post("/experiments/new/", _browser_post(host, {}, candidate_count=2))

    assert response.status_code == 302
    experiment = Experiment.objects.get()
    assert experiment.ordered_candidates() == [] and experiment.run_set.count() == 1
    page = owner_client.get(response["Location"])
    assert page.status_code == 200
    assert "No candidates: this experiment measures its baseline" in page.content.decode()


def test_it_offers_the_hosts_model_listing_to_the_new_experiment_form(owner_client, experiment):
    page = owner_client.get("/experiments/new/").content.decode()

    host = experiment.host
    assert f'"{host.name}": "/api/hosts/{host.pk}/models"' in page
    assert page.count('list="host-models"') == 5  # the baseline's path; the candidate's and its template's two
    assert '<datalist id="host-models">' in page


def test_it_starts_the_expect_and_log_metrics_boxes_empty(owner_client):
    make_host()

    content = owner_client.get("/experiments/new/").content.decode()

    for field_id in ("id_baseline-expect", "id_baseline-log_metrics", "id_cand-0-expect", "id_cand-0-log_metrics"):
        textarea = re.search(r"<textarea[^>]*>(.*?)</textarea>", _field_html(content, field_id), re.S)
        assert textarea and textarea.group(1).strip() == "", field_id
    assert "null" not in content


def test_it_gives_each_model_path_a_full_row(owner_client):
    root = "/srv/a-long-models-root/of-a-team-that-names-things-in-full"
    make_host(models_root=root)

    content = owner_client.get("/experiments/new/").content.decode()

    blocks = re.findall(r'<div class="config-grid model-paths"[^>]*>(.*?)</div>', content, re.S)
    assert len(blocks) == 3  # the baseline's, the candidate's and its template's
    assert 'name="baseline-model_path"' in blocks[0]
    assert f'value="{root}/kimi-k2.5-sim-eagle3"' in blocks[1]
    assert 'name="cand-0-speculative_draft_model_path"' in blocks[1]
    assert "model_path" not in re.sub(r'<div class="config-grid model-paths".*?</div>', "", content, flags=re.S)


def test_it_warns_after_submitting_a_profile_that_gives_no_verdict(owner_client):
    host = make_host()
    post = _browser_post(host, _eagle_fields("cand-0", "eagle3-2step"), candidate_count=1)

    response = owner_client.post("/experiments/new/", post, follow=True)

    assert response.redirect_chain[-1][0] == f"/experiments/{Experiment.objects.get().pk}/"
    assert "the comparison can give no interval and no verdict" in response.content.decode()
    post["experiment-name"], post["profile-passes"] = "three passes", "3"
    assert "no verdict" not in owner_client.post("/experiments/new/", post, follow=True).content.decode()


def test_it_shows_a_check_across_configs_next_to_its_field(owner_client):
    host = make_host()
    candidates = {**_eagle_fields("cand-0", "baseline"), **_eagle_fields("cand-1", "eagle3-3step", steps=3)}
    candidates["cand-1-tp_size"] = "16"

    response = owner_client.post("/experiments/new/", _browser_post(host, candidates, candidate_count=2))

    assert response.status_code == 400
    content = response.content.decode()
    assert "already named &#x27;baseline&#x27;" in _field_html(content, "id_cand-0-name")
    assert "fewer than tp 16" in _field_html(content, "id_cand-1-tp_size")


def test_it_fills_the_new_experiment_form_from_an_experiment_to_duplicate(owner_client, client, viewer):
    make_host(name="a-first-host")
    steps3 = make_eagle_config(steps=3, env={"NCCL_PROTO": "LL"}, extra_args=["--mem-fraction-static", "0.85"])
    source = make_experiment(candidates=[make_eagle_config(), steps3])
    source.profile.passes, source.profile.concurrency = 5, [2, 8]
    source.profile.save()
    detail = owner_client.get(f"/experiments/{source.pk}/").content.decode()
    assert f'href="/experiments/new/?from={source.pk}"' in detail

    content = owner_client.get(f"/experiments/new/?from={source.pk}").content.decode()

    assert f'value="{source.name} (copy)"' in content
    assert f'<option value="{source.host.name}" selected>' in content
    assert f'name="baseline-model_path" value="{source.baseline.model_path}"' in content
    assert f'name="cand-1-name" value="{steps3.name}"' in content
    assert 'name="cand-1-speculative_num_steps" value="3"' in content
    assert "NCCL_PROTO=LL</textarea>" in _field_html(content, "id_cand-1-env_text")
    assert 'value="--mem-fraction-static 0.85"' in _field_html(content, "id_cand-1-extra_args_text")
    assert 'name="candidate_count" id="candidate-count" value="2"' in content
    assert 'name="profile-passes" value="5"' in content
    assert 'name="profile-concurrency_text" value="2, 8"' in content
    assert owner_client.get("/experiments/new/?from=999999").status_code == 404
    client.force_login(viewer)
    assert 'id="duplicate"' not in client.get(f"/experiments/{source.pk}/").content.decode()
