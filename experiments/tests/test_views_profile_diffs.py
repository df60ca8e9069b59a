"""Two runs' profiled breakdowns diffed where a user asks why: on the compare page (and its JSON), and beside a
regression flag, with Profile this run offered for the sides that were not profiled."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from experiments.models import Experiment, Flag, ProfileTrace, Run

from .factories import make_history, make_host

pytestmark = pytest.mark.django_db

SENTENCE = "verify 19.1 -&gt; 30.4 ms (+59%): all-reduce 4.2 -&gt; 12.8 ms; draft 3.0 -&gt; 3.1 ms"


def _profiled(run: Run, *, verify: float, draft: float, all_reduce: float, batch_sizes=(1, 4)) -> ProfileTrace:
    """A stored rank-0 trace whose summary has `verify` and `draft` ms per decode step at each batch size (twice
    as much at the second), all-reduce inside verify."""
    rows = [
        {"batch_size": bs, "steps": 8 - i, "step_ms": (verify + draft + 2.0) * (i + 1),
         "phases": {"draft": draft * (i + 1), "verify": verify * (i + 1), "draft_extend": 1.0 * (i + 1), "other": 1.0},
         "top_kernels": {}, "verify_collective_ms": all_reduce, "verify_collective_share": all_reduce / verify,
         "families": {"verify": {"all-reduce": all_reduce * (i + 1), "gemm": 9.0}, "draft": {"gemm": draft}}}
        for i, bs in enumerate(batch_sizes)
    ]  # fmt: skip
    return ProfileTrace.objects.create(
        run=run, concurrency=1, rank=0, file_name="p-TP-0.trace.json.gz", state=ProfileTrace.State.STORED,
        size_bytes=30, steps=8, summary={"speculative": True, "decode_steps": 8, "by_batch_size": rows},
    )  # fmt: skip


def _two_runs() -> tuple[Run, Run]:
    first, second = make_history([80.0, 60.0], host=make_host())
    return first, second


# ---- the compare page ------------------------------------------------------------------------------------------


def test_it_diffs_the_profiled_picks_on_the_compare_page_and_in_its_json(client, viewer):
    before, after = _two_runs()
    _profiled(before, verify=19.1, draft=3.0, all_reduce=4.2)
    _profiled(after, verify=30.4, draft=3.1, all_reduce=12.8)
    client.force_login(viewer)

    page = client.get("/compare/", {"pick": [f"r{before.pk}", f"r{after.pk}"]}).content.decode()
    data = client.get("/api/compare", {"pick": [f"r{before.pk}", f"r{after.pk}"]}).json()

    card = page.split('id="profile-diffs"')[1].split("</section>")[0]
    assert SENTENCE in card and "bs=1" in card
    assert f'href="/runs/{before.pk}/">run {before.pk}</a> → <a href="/runs/{after.pk}/">run {after.pk}</a>' in card
    # One compact table per shared batch size, in a scroll wrapper for narrow screens.
    assert card.count('<div class="table-scroll"><table class="grid profile-diff-table"') == 2
    bs4 = card.split('data-batch-size="4"')[1].split("</table>")[0]
    assert "<td><strong>verify</strong></td><td>38.20</td><td>60.80</td><td>+59%</td>" in bs4
    assert "<td>draft extend</td><td>2.00</td><td>2.00</td><td>0%</td>" in bs4
    (diff,) = data["profile_diffs"]
    assert diff["pick"] == f"r{after.pk}" and diff["before"] == before.pk and diff["after"] == after.pk
    assert diff["text"] == SENTENCE.replace("&gt;", ">") and diff["lead"] == "verify"
    assert [d["batch_size"] for d in diff["by_batch_size"]] == [1, 4]
    assert data["comparison"] and "reference" in data  # the rest of the contract is unchanged


def test_it_diffs_a_picked_config_by_its_latest_profiled_run(owner_client):
    before, after = _two_runs()
    _profiled(before, verify=19.1, draft=3.0, all_reduce=4.2)
    _profiled(after, verify=30.4, draft=3.1, all_reduce=12.8)

    data = owner_client.get(
        "/api/compare", {"pick": [f"r{before.pk}", f"c{after.experiment_id}-{after.config_id}"]}
    ).json()

    assert [(d["pick"], d["after"]) for d in data["profile_diffs"]] == [
        (f"c{after.experiment_id}-{after.config_id}", after.pk)
    ]


def test_it_shows_no_breakdown_unless_the_reference_and_a_pick_were_profiled(owner_client):
    before, after = _two_runs()
    _profiled(after, verify=30.4, draft=3.1, all_reduce=12.8)
    picks = {"pick": [f"r{before.pk}", f"r{after.pk}"]}

    with CaptureQueriesContext(connection) as unprofiled:
        page = owner_client.get("/compare/", picks).content.decode()
    unprofiled_json = owner_client.get("/api/compare", picks).json()
    _profiled(before, verify=19.1, draft=3.0, all_reduce=4.2)
    with CaptureQueriesContext(connection) as profiled:
        assert 'id="profile-diffs"' in owner_client.get("/compare/", picks).content.decode()

    assert 'id="profile-diffs"' not in page and unprofiled_json["profile_diffs"] == []
    assert len(profiled.captured_queries) == len(unprofiled.captured_queries)  # one read, profiled or not


# ---- beside a regression flag ----------------------------------------------------------------------------------


def _flag() -> tuple[Flag, Run, Run]:
    """A regression flag with the last run before the change and the flag's run (its first at the new level)."""
    host = make_host()
    runs = make_history([88.8, 88.9, 88.7, 88.8, 88.6, 88.9, 88.8, 88.7, 88.8, 82.2, 82.3, 82.1], host=host)
    flag = Flag.objects.get(host=host)
    assert flag.run_id == runs[9].pk
    return flag, runs[8], runs[9]


def test_a_flag_shows_the_breakdown_diff_when_both_sides_were_profiled(client, member):
    flag, before, after = _flag()
    _profiled(before, verify=19.1, draft=3.0, all_reduce=4.2)
    _profiled(after, verify=30.4, draft=3.1, all_reduce=12.8)
    client.force_login(member)

    page = client.get(f"/flags/{flag.pk}/").content.decode()

    diff = page.split('id="flag-profile-diff"')[1].split("</p>")[0]
    assert SENTENCE in diff and f'run {before.pk}</a> → <a href="/runs/{after.pk}/#profile">run {after.pk}' in diff
    assert 'id="flag-profile"' not in page  # nothing left to profile


def test_a_flag_offers_a_member_to_profile_the_sides_not_profiled(client, member):
    flag, before, after = _flag()
    _profiled(before, verify=19.1, draft=3.0, all_reduce=4.2)
    client.force_login(member)

    page = client.get(f"/flags/{flag.pk}/").content.decode()

    offer = page.split('id="flag-profile"')[1].split("</div>")[0]
    assert 'id="flag-profile-diff"' not in page
    assert f'action="/runs/{after.pk}/profile/"' in offer and f'action="/runs/{before.pk}/profile/"' not in offer
    assert "csrfmiddlewaretoken" in offer and "Profile this run" in offer
    response = client.post(f"/runs/{after.pk}/profile/")
    queued = Experiment.objects.get(name__startswith=f"Profile of run {after.pk}")
    assert response.status_code == 302 and queued.run_set.get().profile_requested


def test_a_flag_offers_both_sides_when_neither_was_profiled_and_a_viewer_no_button(client, member, viewer):
    flag, before, after = _flag()

    client.force_login(member)
    offer = client.get(f"/flags/{flag.pk}/").content.decode().split('id="flag-profile"')[1].split("</div>")[0]
    client.force_login(viewer)
    seen = client.get(f"/flags/{flag.pk}/")

    assert f'action="/runs/{before.pk}/profile/"' in offer and f'action="/runs/{after.pk}/profile/"' in offer
    assert seen.status_code == 200 and "Profile this run" not in seen.content.decode()
    assert client.post(f"/runs/{after.pk}/profile/").status_code == 403
