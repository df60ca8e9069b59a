"""Prompt sets through the pages and the API, and what a profile does with one (series, sample)."""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from experiments.models import ApiToken, AuditEvent, BenchmarkProfile, PromptSet

from .factories import experiment_payload, make_host, make_profile

pytestmark = pytest.mark.django_db

UPLOAD = "\n".join(
    json.dumps(item)
    for item in [
        {"prompt": "write a quicksort in python please", "category": "code"},
        {"prompt": "tell me a story about a brave cat", "category": "chat"},
        {"conversations": [{"from": "human", "value": "what is two plus two"}, {"from": "gpt", "value": "it is four"}]},
    ]
)


def _upload(client, name="team prompts", content=UPLOAD):
    file = SimpleUploadedFile("prompts.jsonl", content.encode(), content_type="application/jsonl")
    return client.post("/prompt-sets/new/", {"name": name, "file": file})


def test_it_lets_a_member_upload_a_set_and_shows_it_escaped(client, member):
    client.force_login(member)
    content = UPLOAD + "\n" + json.dumps({"prompt": "<script>alert(1)</script> hi", "category": "<b>x</b>"})

    response = _upload(client, content=content)

    prompt_set = PromptSet.objects.get(name="team prompts")
    assert response.status_code == 302 and response["Location"] == f"/prompt-sets/{prompt_set.pk}/"
    assert prompt_set.kind == "upload" and prompt_set.prompt_count == 4
    assert prompt_set.categories == {"<b>x</b>": 1, "chat": 1, "code": 1, "general": 1}
    assert AuditEvent.objects.filter(action="promptset.create", target_id=prompt_set.pk, actor=member).exists()
    page = client.get(response["Location"]).content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt; hi" in page and "<script>alert" not in page
    assert "&lt;b&gt;x&lt;/b&gt;" in page


def test_it_keeps_one_row_per_version(client, member):
    client.force_login(member)
    _upload(client)
    _upload(client)
    _upload(client, content=UPLOAD + '\n{"prompt": "one more prompt"}')
    versions = PromptSet.objects.filter(name="team prompts")
    assert versions.count() == 2
    assert len({v.content_hash for v in versions}) == 2


def test_it_refuses_a_bad_file_naming_the_line(client, member):
    client.force_login(member)
    response = _upload(client, content='{"prompt": "fine"}\n{"prompt": ""}')
    assert response.status_code == 400
    assert "line 2: &quot;prompt&quot; must be non-empty text" in response.content.decode()
    assert not PromptSet.objects.filter(name="team prompts").exists()


@pytest.mark.parametrize(
    ("content", "says"),
    [
        pytest.param("[" * 100_000 + "]" * 100_000, "its JSON is nested too deeply", id="nested-json"),
        pytest.param('{"prompt": "x", "n": ' + "9" * 5000 + "}", "a number too long to read", id="huge-int"),
        pytest.param('{"prompt": "a \\ud800 b"}', "holds a lone surrogate", id="lone-surrogate"),
        pytest.param('{"prompt": "fine", "category": "\\udfff"}', "holds a lone surrogate", id="surrogate-category"),
    ],
)
def test_it_refuses_a_file_python_cannot_read_as_text_with_a_message(client, member, content, says):
    client.force_login(member)

    response = _upload(client, content=content)

    assert response.status_code == 400
    assert says in response.content.decode()
    assert not PromptSet.objects.filter(name="team prompts").exists()


def test_the_api_refuses_a_body_nested_too_deeply_with_a_json_error(client, member):
    _, token = ApiToken.issue(member)
    body = '{"name": "deep", "content": ' + "[" * 100_000 + "]" * 100_000 + "}"

    response = client.post(
        "/api/prompt-sets", body, content_type="application/json", headers={"Authorization": f"Bearer {token}"}
    )

    assert 400 <= response.status_code < 500 and response["Content-Type"].startswith("application/json")


def test_it_lets_a_viewer_read_but_not_upload_and_an_outsider_neither(client, viewer, outsider):
    client.force_login(viewer)
    page = client.get("/prompt-sets/")
    assert page.status_code == 200 and "upload-prompt-set" not in page.content.decode()
    assert _upload(client).status_code == 403
    client.force_login(outsider)
    assert client.get("/prompt-sets/").status_code == 403
    assert not PromptSet.objects.filter(kind="upload").exists()


def test_it_lists_the_builtin_sets(client, viewer):
    client.force_login(viewer)
    body = client.get("/prompt-sets/").content.decode()
    assert "random token ids" in body and "ShareGPT V3 unfiltered cleaned split" in body


def test_it_creates_and_lists_sets_through_the_api(client, member, viewer):
    _, token = ApiToken.issue(member)
    headers = {"Authorization": f"Bearer {token}"}
    created = client.post(
        "/api/prompt-sets", {"name": "api set", "content": UPLOAD}, content_type="application/json", headers=headers
    )
    assert created.status_code == 201, created.content
    assert created.json()["prompt_count"] == 3 and created.json()["categories"]["code"] == 1

    bad = client.post(
        "/api/prompt-sets", {"name": "bad", "content": "[1]"}, content_type="application/json", headers=headers
    )
    assert bad.status_code == 400  # the file's text is not a prompt set, as a body that is not JSON
    assert bad.json()["errors"]["content"] == ['item 1: expected an object with "prompt" or "conversations".']

    _, viewer_token = ApiToken.issue(viewer)
    listed = client.get("/api/prompt-sets", headers={"Authorization": f"Bearer {viewer_token}"}).json()
    assert {s["name"] for s in listed} >= {"api set", "random token ids"}
    refused = client.post(
        "/api/prompt-sets",
        {"name": "x", "content": UPLOAD},
        content_type="application/json",
        headers={"Authorization": f"Bearer {viewer_token}"},
    )
    assert refused.status_code == 403


def _uploaded(member) -> PromptSet:
    from experiments.actions.audit import Actor
    from experiments.actions.prompts import do_create_prompt_set

    return do_create_prompt_set(Actor(member), "set", UPLOAD.encode())


def test_it_puts_the_set_version_and_sampling_in_the_series_key(member):
    random_profile = make_profile()
    # A profile of random ids at temperature 0 keeps the key it had before prompt sets.
    assert random_profile.series_key == make_profile(prompt_set=PromptSet.objects.get(kind="random")).series_key
    on_set = make_profile(prompt_set=_uploaded(member))
    assert on_set.dataset == "upload" and on_set.series_key != random_profile.series_key
    second_version = PromptSet.objects.create(name="set", kind="upload", content_hash="other")
    assert make_profile(prompt_set=second_version).series_key != on_set.series_key
    assert make_profile(temperature=0.7).series_key != random_profile.series_key


def test_it_samples_a_profiles_prompts_and_caches_the_sample(member):
    profile = make_profile(prompt_set=_uploaded(member), num_prompts=2, seed=3, input_len=6, output_len=2)
    data, prompts = profile.prompt_sample()  # type: ignore[misc]
    assert len(prompts) == 2 and all(p.input_len <= 6 and p.output_len == 2 for p in prompts)
    assert profile.prompt_sample() == (data, prompts)
    assert make_profile().prompt_sample() is None


def test_it_takes_a_prompt_set_and_sampling_in_an_experiments_profile(client, owner, member):
    prompt_set = _uploaded(member)
    _, token = ApiToken.issue(owner)
    payload = experiment_payload(make_host())
    payload["profile"].update(prompt_set=prompt_set.pk, temperature=0, top_p=0.9)
    response = client.post(
        "/api/experiments", payload, content_type="application/json", headers={"Authorization": f"Bearer {token}"}
    )
    assert response.status_code == 201, response.content
    profile = BenchmarkProfile.objects.get(experiment__id=response.json()["id"])
    assert (profile.prompt_set, profile.top_p, profile.dataset) == (prompt_set, 0.9, "upload")

    payload["profile"].update(prompt_set=999999)
    missing = client.post(
        "/api/experiments", payload, content_type="application/json", headers={"Authorization": f"Bearer {token}"}
    )
    assert (missing.status_code, missing.json()) == (
        404,
        {"detail": "profile.prompt_set: no prompt set with id 999999"},
    )
    payload["profile"].update(prompt_set=prompt_set.pk, top_p=0)
    refused = client.post(
        "/api/experiments", payload, content_type="application/json", headers={"Authorization": f"Bearer {token}"}
    )
    assert refused.status_code == 422
    assert set(refused.json()["errors"]) >= {"profile.top_p"}


def test_it_refuses_an_api_upload_over_the_request_limit(client, member):
    _, token = ApiToken.issue(member)
    line = json.dumps({"prompt": "word " * 200}) + "\n"
    content = line * (3 * 1024 * 1024 // len(line))  # 3 MiB: over Django's 2.5 MiB request body limit
    response = client.post(
        "/api/prompt-sets",
        {"name": "big", "content": content},
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )
    assert response.status_code == 400
    assert "the API accepts at most 2,621,440" in response.json()["detail"]
    assert not PromptSet.objects.filter(name="big").exists()
