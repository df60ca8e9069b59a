"""No input gives a 500, and every bound answers a 4xx that names the field: the issue's attacks sent as a member
would, by the API and by the pages. Log-metric patterns bounded by their parse (the web process's memory measured
flat across the bypasses); JSON nested past its depth, lone surrogates and NaN in every body and JSON field; a
re-run past its limit."""

from __future__ import annotations

import json
import resource
import tracemalloc

import pytest

from experiments.formats.bounded_json import MAX_DEPTH
from experiments.models import ApiToken, Experiment, PromptSet, ServerConfig

from .factories import make_experiment, make_host, row_counts
from .test_imports import BASELINE
from .test_log_metrics import BYPASSES
from .test_prompt_sets import UPLOAD
from .test_views_experiments import _browser_post

pytestmark = pytest.mark.django_db

CONFIG = {"name": "probe", "model_path": "/models/kimi-k2.5-sim", "tp_size": 8}


@pytest.fixture
def post(client, member):
    """`post(url, body)`: the API called with a member's token; `body` as a str is sent as it is."""
    _, token = ApiToken.issue(member)

    def call(url: str, body):
        data = body if isinstance(body, str) else json.dumps(body)
        return client.post(url, data, content_type="application/json", headers={"Authorization": f"Bearer {token}"})

    return call


@pytest.fixture
def member_client(client, member):
    client.force_login(member)
    return client


def _nested(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


# --- log-metric patterns ---------------------------------------------------------------------------------------------

THE_ISSUES_THREE = BYPASSES[:3]


@pytest.mark.parametrize("pattern", BYPASSES)
def test_it_refuses_every_pattern_bypass_through_the_api(post, pattern):
    response = post("/api/configs", {**CONFIG, "log_metrics": {"x": pattern}})

    assert response.status_code == 422, response.content
    (message,) = response.json()["errors"]["log_metrics"]
    assert "counted repeat" in message
    assert not ServerConfig.objects.filter(name="probe").exists()


@pytest.mark.parametrize("pattern", [*THE_ISSUES_THREE, r"(?P<x>a{e<=1})", r"(?P<x>\p{L})"])
def test_it_refuses_every_pattern_bypass_through_the_config_form(member_client, pattern):
    form = _browser_post(make_host(), {}, candidate_count=0)
    form["baseline-log_metrics"] = json.dumps({"x": pattern})
    before = row_counts()

    response = member_client.post("/experiments/new/", form)

    assert response.status_code == 400
    assert "The pattern of &#x27;x&#x27; is refused" in response.content.decode()
    assert row_counts() == before


def test_it_keeps_the_web_process_flat_across_the_bypasses(post):
    """Each of the issue's three once grew the web process by ~150 MB that it never gave back; validating a config
    now parses them and compiles nothing (it failed with the text scanner: a 245 MB peak per pattern)."""
    post("/api/configs", {**CONFIG, "log_metrics": {"x": "(?P<x>a)"}})  # the first request's imports and caches
    resident_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    peaks, statuses = [], []
    for pattern in BYPASSES:
        tracemalloc.start()
        try:
            statuses.append(post("/api/configs", {**CONFIG, "log_metrics": {"x": pattern}}).status_code)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()

    assert max(peaks) < 8_000_000, [f"{peak / 1e6:.1f} MB" for peak in peaks]
    grown_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - resident_before
    assert grown_kb < 32_000, f"the peak resident size grew by {grown_kb / 1000:.0f} MB"
    assert set(statuses) == {422}


# --- JSON depth, lone surrogates and NaN -----------------------------------------------------------------------------


def _import(host, **file) -> dict:
    return {"host": host.name, "files": [{"name": "a.json", **file}]}


def test_it_refuses_an_import_100000_levels_deep_in_the_body_or_in_a_file(post):
    host = make_host()
    deep = _nested(100_000)

    whole = post("/api/imports", f'{{"host": "{host.name}", "files": {deep}}}')
    given = post("/api/imports", _import(host, content="{}", given={"model_path": json.loads(_nested(MAX_DEPTH))}))
    auto = post("/api/imports", _import(host, content=deep))
    vllm = post("/api/imports", _import(host, format="vllm-bench-serve", content=f'{{"x": {deep}}}'))

    assert whole.status_code == 400
    assert whole.json()["detail"] == f"The request body is refused: nested deeper than {MAX_DEPTH} levels."
    assert given.status_code == 422
    assert given.json()["errors"] == {"files.0.given.model_path": [f"Nested deeper than {MAX_DEPTH} levels."]}
    for response in (auto, vllm):
        assert response.status_code == 400
        assert f"nested deeper than {MAX_DEPTH} levels" in response.json()["errors"]["files[0]"][0]
    assert not Experiment.objects.exists()


@pytest.mark.parametrize(
    ("url", "body", "field"),
    [
        ("/api/prompt-sets", {"name": "x\ud800", "content": UPLOAD}, "name"),
        ("/api/configs", {**CONFIG, "name": "\udfff"}, "name"),
        ("/api/configs", {**CONFIG, "expect": {"log_contains": ["a\ud800"]}}, "expect.log_contains.0"),
        ("/api/configs", {**CONFIG, "env": {"NCCL_\ud800": "1"}}, "env"),
    ],
)
def test_it_refuses_a_lone_surrogate_in_any_string_of_a_body_and_names_it(post, url, body, field):
    response = post(url, json.dumps(body))  # json.dumps writes "\ud800" as the escape a client would send

    assert response.status_code == 422, response.content
    (message,) = response.json()["errors"][field]
    assert "lone surrogate" in message
    assert not PromptSet.objects.filter(kind=PromptSet.Kind.UPLOAD).exists()


def test_it_refuses_a_lone_surrogate_in_an_imported_file_name_and_in_its_text(post):
    host = make_host()
    named = post("/api/imports", _import(host, name="a\ud800.jsonl", content=BASELINE))
    line = json.loads(BASELINE.splitlines()[0])
    line["backend"] = "sglang\ud800"
    inside = post("/api/imports", _import(host, content=json.dumps(line)))

    assert named.status_code == 422 and "lone surrogate" in named.json()["errors"]["files.0.name"][0]
    assert inside.status_code == 400
    assert "line 1: backend: holds a lone surrogate" in inside.json()["errors"]["files[0]"][0]
    assert not Experiment.objects.exists()


def test_it_refuses_nan_and_infinity_which_json_has_not(post):
    for constant in ("NaN", "Infinity", "-Infinity"):
        response = post("/api/configs", f'{{"name": "probe", "model_path": "/m", "tp_size": {constant}}}')

        assert response.status_code == 400
        assert response.json()["detail"] == f"The request body is refused: {constant} is not a JSON number."


def test_it_answers_a_viewer_whose_role_changes_nothing_403_whatever_the_body(client, viewer):
    _, token = ApiToken.issue(viewer)

    response = client.post(
        "/api/configs", _nested(100), content_type="application/json", headers={"Authorization": f"Bearer {token}"}
    )

    assert response.status_code == 403


@pytest.mark.parametrize("field", ["expect", "log_metrics"])
@pytest.mark.parametrize(
    ("text", "says"),
    [
        (_nested(50_000), f"nested deeper than {MAX_DEPTH} levels"),
        ('{"a": ' + _nested(MAX_DEPTH) + "}", f"nested deeper than {MAX_DEPTH} levels (at a.0.0.0)"),
        ('{"x": "\\ud800"}', "holds a lone surrogate (\\ud800-\\udfff), which is not text (at x)"),
        ('{"x": NaN}', "NaN is not a JSON number"),
    ],
)
def test_it_refuses_a_json_field_of_the_config_form_past_its_bounds(member_client, field, text, says):
    form = _browser_post(make_host(), {}, candidate_count=0)
    form[f"baseline-{field}"] = text
    before = row_counts()

    response = member_client.post("/experiments/new/", form)

    assert response.status_code == 400
    assert f"This JSON is refused: {says}." in response.content.decode()
    assert row_counts() == before


def test_it_reads_surrogate_bytes_in_a_page_upload_as_text_never_as_a_500(member_client):
    # A browser cannot send a lone surrogate: the closest are its UTF-8-like bytes, raw or percent-encoded, which
    # Django decodes as U+FFFD (a raw file name that is not UTF-8 drops the file: "This field is required").
    def upload(filename: bytes):
        body = (
            b'--b\r\nContent-Disposition: form-data; name="name"\r\n\r\nset \xed\xa0\x80\r\n'
            b'--b\r\nContent-Disposition: form-data; name="file"; ' + filename + b"\r\n"
            b"Content-Type: application/jsonl\r\n\r\n" + UPLOAD.encode() + b"\r\n--b--\r\n"
        )
        return member_client.generic("POST", "/prompt-sets/new/", body, content_type="multipart/form-data; boundary=b")

    raw = upload(b'filename="p\xed\xa0\x80.jsonl"')
    encoded = upload(b"filename*=UTF-8''p%ED%A0%80.jsonl")

    assert raw.status_code == 400 and "This field is required." in raw.content.decode()
    assert encoded.status_code == 302
    assert PromptSet.objects.get(kind=PromptSet.Kind.UPLOAD).name == "set \ufffd\ufffd\ufffd"


# --- a re-run past its limit -----------------------------------------------------------------------------------------


def test_it_names_the_limit_and_the_field_of_a_rerun_of_21_launches(client, owner):
    experiment = make_experiment()
    _, token = ApiToken.issue(owner)
    auth = {"Authorization": f"Bearer {token}"}

    api = client.post(
        f"/api/experiments/{experiment.pk}/rerun", {"launches": 21}, content_type="application/json", headers=auth
    )
    schedule = client.post(
        f"/api/experiments/{experiment.pk}/schedule",
        {"every": "hourly", "hour_utc": 2},
        content_type="application/json",
        headers=auth,
    )
    client.force_login(owner)
    page = client.post(f"/experiments/{experiment.pk}/rerun/", {"launches": 21}, follow=True)

    says = "At most 20 more launches of every config at once."
    assert api.status_code == 422
    assert api.json() == {"detail": "invalid re-run", "errors": {"launches": [says]}}
    assert schedule.status_code == 422 and schedule.json()["errors"]["every"][0].startswith("Select a valid choice.")
    assert says in page.content.decode()
    assert experiment.run_set.count() == 2
