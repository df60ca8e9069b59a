"""Stored configs: their list and page with its history, "Duplicate & edit" of a run or a config, the searches of the
new-experiment page's pickers, and a picked config submitted again (reused unchanged, a linked new version changed).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from experiments.models import Experiment, Run, ServerConfig
from experiments.reads.config_history import config_box_values, profile_initial
from experiments.serializers import config_history_json

from .factories import (
    make_config,
    make_eagle_config,
    make_experiment,
    make_host,
    make_measurement,
    make_profile,
    make_run,
)

pytestmark = pytest.mark.django_db


def _page_post(host, profile, blocks: dict[str, dict[str, Any]], name: str = "from saved configs") -> dict[str, Any]:
    """What the new-experiment page posts: the experiment, each config block's boxes under its prefix (an unticked
    checkbox is not posted) and the profile's."""
    post: dict[str, Any] = {"experiment-name": name, "experiment-host": host.name}
    for prefix, values in blocks.items():
        post.update({f"{prefix}-{key}": value for key, value in values.items() if value is not False})
    post.update({f"profile-{key}": value for key, value in profile_initial(profile).items()})
    post["candidate_count"] = str(len(blocks) - 1)
    return post


def _versions_table(content: str) -> str:
    return content.split('id="versions"', 1)[1].split("</table>", 1)[0]


# ---- the list ----------------------------------------------------------------------------------------------------


def test_it_lists_configs_newest_first_and_finds_them_by_name_path_or_hash(
    client, viewer, django_assert_max_num_queries
):
    old = make_config(name="plain-baseline", model_path="/models/llama-70b", created_by=viewer)
    spec = make_eagle_config(steps=3, name="eagle3-3step", created_by=viewer)
    for _ in range(2):
        make_run(experiment=make_experiment(baseline=old, candidates=[], with_runs=False), config=old)
    for i in range(3):
        make_config(name=f"more-{i}", created_by=viewer)
    client.force_login(viewer)

    # Session, user, permissions, the page count, the nav's flag badge, the page: whatever the number of rows.
    with django_assert_max_num_queries(7):
        content = client.get("/configs/").content.decode()

    assert content.index("eagle3-3step") < content.index("plain-baseline")
    row = content.split(f'data-config="{spec.pk}"', 1)[1].split("</tr>", 1)[0]
    assert spec.short_hash in row and "EAGLE3" in row and "3 / 1 / 4" in row and "<td>0</td>" in row
    old_row = content.split(f'data-config="{old.pk}"', 1)[1].split("</tr>", 1)[0]
    assert "<td>2</td>" in old_row  # two runs used it
    for query in ("PLAIN", "llama-70b", old.content_hash[:8]):
        found = client.get("/configs/", {"q": query}).content.decode()
        assert f'data-config="{old.pk}"' in found and f'data-config="{spec.pk}"' not in found, query
    assert "No config matches" in client.get("/configs/", {"q": "x" * 500}).content.decode()
    assert 'href="/configs/"' in content  # the nav link


def test_it_lists_a_config_submitted_twice_with_the_same_name_and_launch_once(client, member):
    host = make_host()
    typed = {"baseline": {"name": "baseline", "model_path": "/models/kimi-k2.5-sim", "tp_size": 8}}
    client.force_login(member)

    for name in ("first", "second"):  # typed in afresh each time, not picked from the stored configs
        response = client.post("/experiments/new/", _page_post(host, make_profile(), typed, name=name))
        assert response.status_code == 302, response.content.decode()[:2000]

    first, second = Experiment.objects.get(name="first"), Experiment.objects.get(name="second")
    assert first.baseline == second.baseline
    listed = client.get("/configs/").content.decode()
    assert listed.count(f'data-config="{first.baseline_id}"') == 1 and listed.count("data-config=") == 1


def test_it_pages_through_the_config_list(client, viewer, monkeypatch):
    monkeypatch.setattr("experiments.views.configs.CONFIGS_PAGE", 2)
    configs = [make_config(name=f"config-{i}") for i in range(3)]
    client.force_login(viewer)

    first = client.get("/configs/").content.decode()
    second = client.get("/configs/", {"page": "2"}).content.decode()

    assert f'data-config="{configs[2].pk}"' in first and f'data-config="{configs[0].pk}"' not in first
    assert f'data-config="{configs[0].pk}"' in second and "page 2 of 2 · 3 configs" in second
    assert 'href="?page=2" rel="next"' in first and 'href="?page=1" rel="prev"' in second
    searched = client.get("/configs/", {"q": "config <b>"}).content.decode()
    assert "config &lt;b&gt;" in searched  # the search is kept on the page links, escaped
    assert client.get("/configs/", {"page": "lots"}).status_code == 200


def test_it_shows_the_config_pages_to_readers_only(client, viewer, outsider):
    config = make_config()

    assert client.get(f"/configs/{config.pk}/").status_code == 302  # to the login page
    client.force_login(outsider)
    assert client.get("/configs/").status_code == 403
    assert client.get(f"/configs/{config.pk}/").status_code == 403
    client.force_login(viewer)
    assert client.get("/configs/999999/").status_code == 404
    assert "/experiments/new/?config=" not in client.get(f"/configs/{config.pk}/").content.decode()


# ---- one config's page -------------------------------------------------------------------------------------------


def test_it_shows_a_config_with_its_versions_and_the_runs_that_used_it(client, member):
    first = make_eagle_config(steps=2, name="eagle")
    second = make_eagle_config(steps=3, name="eagle v2", derived_from=first)
    third = make_eagle_config(steps=3, name="eagle v3", derived_from=second, env={"NCCL_PROTO": "LL"})
    sibling = make_eagle_config(steps=4, name="eagle-4", derived_from=first)
    renamed = make_eagle_config(steps=3, name="same launch")
    namesake = make_eagle_config(steps=5, name="eagle v2")
    unrelated = make_eagle_config(steps=2, name="other")
    experiment = make_experiment(candidates=[second], with_runs=False)
    run = make_run(experiment=experiment, config=second, state=Run.State.SUCCEEDED)
    for pass_index, tok_s in enumerate((90.0, 100.0)):
        make_measurement(run, concurrency=1, output_throughput=tok_s, pass_index=pass_index)
    client.force_login(member)

    content = client.get(f"/configs/{second.pk}/").content.decode()

    assert second.content_hash in content
    assert f'id="derived-from">{first.name}</a>' in content
    assert f'href="/experiments/new/?config={second.pk}"' in content
    history = _versions_table(content)
    relations = {
        config.pk: history.split(f'data-config="{config.pk}"', 1)[1].split("</tr>", 1)[0]
        for config in (first, third, sibling, renamed, namesake)
    }
    assert "<td>made from</td>" in relations[first.pk] and "steps, draft tokens" in relations[first.pk]
    assert "<td>made from this</td>" in relations[third.pk] and "<td>env</td>" in relations[third.pk]
    assert "another version of eagle" in relations[sibling.pk]
    assert "same launch, another name" in relations[renamed.pk] and "nothing (the same launch)" in relations[renamed.pk]
    assert "<td>same name</td>" in relations[namesake.pk]
    assert f'data-config="{unrelated.pk}"' not in history and f'data-config="{second.pk}"' not in history
    runs = content.split('id="runs"', 1)[1]
    assert f'href="/runs/{run.pk}/"' in runs and experiment.name in runs and "candidate" in runs
    assert "c1: 95.0" in runs and "succeeded" in runs


def test_it_gives_a_configs_history_as_json_for_the_api():
    first = make_config(name="base")
    second = make_config(name="base v2", derived_from=first, tp_size=4)
    run = make_run(experiment=make_experiment(baseline=second, candidates=[], with_runs=False), config=second)
    make_measurement(run, concurrency=4, output_throughput=321.0)

    history = config_history_json(second)

    assert (history["id"], history["derived_from"], history["content_hash"]) == (
        second.pk,
        first.pk,
        second.content_hash,
    )
    assert [(v["id"], v["relation"], v["differs"]) for v in history["versions"]] == [(first.pk, "made from", ["tp"])]
    (row,) = history["runs"]
    assert (row["id"], row["role"], row["state"], row["output_tok_s"]) == (run.pk, "baseline", "queued", {"4": 321.0})


def test_it_escapes_names_on_the_config_pages(client, viewer):
    hostile = make_config(name='<img src=x onerror="alert(1)">')
    make_config(name="child", derived_from=hostile, tp_size=4)
    client.force_login(viewer)

    for url in ("/configs/", f"/configs/{hostile.pk}/"):
        content = client.get(url).content.decode()
        assert "<img src=x" not in content and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in content, url


# ---- Duplicate & edit of a config or a run -----------------------------------------------------------------------


def test_it_fills_the_new_experiment_form_from_a_config(client, member):
    host = make_host(name="b-host")
    make_host(name="a-first-host")
    config = make_eagle_config(steps=3, env={"NCCL_PROTO": "LL"})
    profile = make_profile(passes=5, concurrency=[2, 8], num_prompts=16)
    make_experiment(host=make_host(), candidates=[config])  # an older one
    experiment = make_experiment(host=host, candidates=[make_eagle_config(), config], profile=profile)
    client.force_login(member)

    content = client.get("/experiments/new/", {"config": config.pk}).content.decode()

    assert f'<option value="{host.name}" selected>' in content
    assert f'name="baseline-name" value="{experiment.baseline.name}"' in content
    assert f'name="baseline-source_config" value="{experiment.baseline.pk}"' in content
    assert f'name="cand-0-name" value="{config.name}"' in content
    assert f'name="cand-0-source_config" value="{config.pk}"' in content
    assert 'name="cand-0-speculative_num_steps" value="3"' in content
    assert 'name="cand-1-name"' not in content
    assert 'name="candidate_count" id="candidate-count" value="1"' in content
    assert 'name="profile-passes" value="5"' in content and 'name="profile-concurrency_text" value="2, 8"' in content
    sources = json.loads(content.split('id="config-sources" type="application/json">', 1)[1].split("</script>")[0])
    assert sources["cand-0"] == {
        "id": config.pk,
        "name": config.name,
        "short_hash": config.short_hash,
        "version_name": f"{config.name} v2",
    }


def test_it_fills_the_form_from_a_config_no_experiment_used_with_the_defaults(client, member):
    make_host(name="a-first-host")
    config = make_eagle_config(steps=1, name="fresh")

    client.force_login(member)

    content = client.get(f"/experiments/new/?config={config.pk}").content.decode()

    assert '<option value="a-first-host" selected>' in content
    assert 'name="baseline-name" value="baseline"' in content
    assert 'name="cand-0-name" value="fresh"' in content and 'value="fresh (copy)"' in content


def test_it_fills_the_form_from_a_candidate_run_and_from_a_baseline_run(client, member, viewer):
    baseline, candidate = make_config(name="the-baseline"), make_eagle_config(steps=3, name="the-candidate")
    experiment = make_experiment(baseline=baseline, candidates=[candidate], profile=make_profile(seed=7))
    baseline_run, candidate_run = experiment.run_set.order_by("sequence")
    client.force_login(member)
    assert (
        f'href="/experiments/new/?run={candidate_run.pk}"'
        in client.get(candidate_run.get_absolute_url()).content.decode()
    )

    content = client.get("/experiments/new/", {"run": candidate_run.pk}).content.decode()

    assert f'<option value="{experiment.host.name}" selected>' in content
    assert 'name="baseline-name" value="the-baseline"' in content
    assert 'name="cand-0-name" value="the-candidate"' in content and 'name="profile-seed" value="7"' in content

    content = client.get("/experiments/new/", {"run": baseline_run.pk}).content.decode()

    assert 'name="baseline-name" value="the-baseline"' in content
    assert 'name="cand-0-name"' not in content
    assert 'name="candidate_count" id="candidate-count" value="0"' in content
    client.force_login(viewer)
    assert "?run=" not in client.get(candidate_run.get_absolute_url()).content.decode()


@pytest.mark.parametrize(
    ("query", "status"),
    [("run=999999", 404), ("config=999999", 404), ("run=abc", 200), ("config=1e3", 200), ("config=" + "9" * 40, 200)],
)
def test_it_never_fails_on_a_bad_id_to_duplicate(client, member, query, status):
    make_host()
    client.force_login(member)

    assert client.get(f"/experiments/new/?{query}").status_code == status


# ---- the pickers' searches ---------------------------------------------------------------------------------------


def test_it_searches_configs_for_the_pickers(client, viewer, outsider):
    hostile = make_config(name="</script><script>alert(1)</script>")
    spec = make_eagle_config(name="eagle v2", env={"NCCL_PROTO": "LL"}, expect={"env_propagated": ["NCCL_PROTO"]})
    make_config(name="eagle v5")
    for i in range(22):
        make_config(name=f"bulk-{i}")
    client.force_login(outsider)
    assert client.get("/configs/search.json").status_code == 403
    client.force_login(viewer)

    everything = client.get("/configs/search.json").json()["configs"]
    found = client.get("/configs/search.json", {"q": "eagle v2"}).json()["configs"]
    scripted = client.get("/configs/search.json", {"q": "script"})
    baselines = client.get("/configs/search.json", {"q": "eagle", "baseline": "1"}).json()["configs"]

    assert len(everything) == 20 and everything[0]["name"] == "bulk-21"  # at most 20, newest first
    (match,) = found
    assert match["id"] == spec.pk and match["short_hash"] == spec.short_hash
    assert match["version_name"] == "eagle v6"  # past every stored version of the name
    assert match["form"]["env_text"] == "NCCL_PROTO=LL" and match["form"]["source_config"] == spec.pk
    assert json.loads(match["form"]["expect"]) == {"env_propagated": ["NCCL_PROTO"]}
    assert match["form"]["log_metrics"] == "" and match["form"]["speculative_num_steps"] == 2
    assert scripted["Content-Type"] == "application/json"
    assert [c["name"] for c in scripted.json()["configs"]] == [hostile.name]  # data, returned exactly as stored
    assert [c["name"] for c in baselines] == ["eagle v5"]
    by_hash = client.get("/configs/search.json", {"q": spec.content_hash[:7].upper()}).json()["configs"]
    assert [c["id"] for c in by_hash] == [spec.pk]
    assert client.get("/configs/search.json", {"q": "%_" * 300}).json() == {"configs": []}


def test_it_searches_profiles_for_the_picker(client, viewer, outsider):
    profile = make_profile(name="nightly c1-c64", concurrency=[1, 64], num_prompts=128, passes=3)
    make_profile(name="other")
    client.force_login(outsider)
    assert client.get("/profiles/search.json").status_code == 403
    client.force_login(viewer)

    (found,) = client.get("/profiles/search.json", {"q": "NIGHTLY"}).json()["profiles"]

    assert found["id"] == profile.pk and found["summary"] == profile.summary
    assert found["form"]["concurrency_text"] == "1, 64" and found["form"]["num_prompts"] == 128


# ---- a picked config, submitted --------------------------------------------------------------------------------


def test_it_reuses_a_stored_config_submitted_unchanged_and_links_a_changed_one(client, member):
    host = make_host()
    baseline, stored = make_config(name="baseline"), make_eagle_config(steps=2, name="eagle")
    client.force_login(member)
    blocks = {"baseline": config_box_values(baseline), "cand-0": config_box_values(stored)}
    before = ServerConfig.objects.count()

    response = client.post("/experiments/new/", _page_post(host, make_profile(), blocks, name="unchanged"))

    assert response.status_code == 302, response.content.decode()[:2000]
    experiment = Experiment.objects.get(name="unchanged")
    assert experiment.baseline == baseline and experiment.ordered_candidates() == [stored]
    assert ServerConfig.objects.count() == before

    blocks["cand-0"] = {**blocks["cand-0"], "name": "eagle v2", "speculative_num_steps": 3}
    blocks["cand-0"]["speculative_num_draft_tokens"] = 4
    client.post("/experiments/new/", _page_post(host, make_profile(), blocks, name="changed"))
    client.post("/experiments/new/", _page_post(host, make_profile(), blocks, name="changed again"))

    (version,) = Experiment.objects.get(name="changed").ordered_candidates()
    assert version.pk != stored.pk and version.derived_from == stored and version.speculative_num_steps == 3
    assert Experiment.objects.get(name="changed again").ordered_candidates() == [version]  # not a third row
    assert stored.speculative_num_steps == ServerConfig.objects.get(pk=stored.pk).speculative_num_steps == 2


@pytest.mark.parametrize("source", ["abc", "999999", "9" * 40, "-1"])
def test_it_ignores_a_source_that_names_no_config(client, member, source):
    host = make_host()
    stored = make_eagle_config(steps=2, name="eagle")
    blocks = {
        "baseline": config_box_values(make_config()),
        # Another name: a new row, which a source naming a config would link to (the same name and launch would
        # be the stored row itself, whatever the source).
        "cand-0": {**config_box_values(stored), "name": "eagle copy", "source_config": source},
    }
    client.force_login(member)

    response = client.post("/experiments/new/", _page_post(host, make_profile(), blocks))

    assert response.status_code == 302
    (candidate,) = Experiment.objects.get().ordered_candidates()
    assert candidate.pk != stored.pk and candidate.derived_from is None
    assert candidate.content_hash == stored.content_hash
