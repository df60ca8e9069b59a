"""The experiments table (search, filters, sort, saved views) and notes on experiments and runs."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from experiments.actions.audit import Actor
from experiments.actions.users import do_set_role
from experiments.formats.markdown import render_markdown
from experiments.models import AuditEvent, Experiment, Measurement, Run
from experiments.reads import listing

from .factories import make_config, make_eagle_config, make_experiment, make_host, make_profile

pytestmark = pytest.mark.django_db


def _finish(experiment: Experiment, tok_s: dict[str, list[float]], minutes: int = 5) -> Experiment:
    """Every run succeeded after `minutes`, each with the passes `tok_s[config name]` at concurrency 1."""
    start = timezone.now() - timedelta(hours=1)
    for run in experiment.run_set.select_related("config"):
        run.state = Run.State.SUCCEEDED
        run.started_at, run.finished_at = start, start + timedelta(minutes=minutes)
        run.save(update_fields=["state", "started_at", "finished_at"])
        for pass_index, value in enumerate(tok_s.get(run.config.name, [])):
            Measurement.objects.create(
                run=run, pass_index=pass_index, concurrency=1, completed=16, duration_s=10.0,
                output_throughput=value, total_throughput=2 * value, request_throughput=1.0,
            )  # fmt: skip
    return experiment


def _table_rows(content: str) -> list[str]:
    """The experiment names in the table, in order."""
    body = content[content.index('id="experiments"') :]
    return re.findall(r'<tr data-experiment="\d+">\s*<td><a href="[^"]+">([^<]*)</a>', body)


@pytest.fixture
def three(owner, member):
    """A fast finished experiment (tagged), a slow finished one on another host, and a queued one by the member."""
    fast = make_experiment(
        name="fast one", created_by=owner, tags="nightly hopper", baseline=make_config(name="baseline"),
        candidates=[make_eagle_config(name="eagle3-2step")], profile=make_profile(passes=3),
    )  # fmt: skip
    _finish(fast, {"baseline": [80.0, 81.0, 82.0], "eagle3-2step": [96.0, 97.0, 98.0]}, minutes=5)
    slow = make_experiment(
        name="slow one", created_by=owner, host=make_host(name="other-host"), baseline=make_config(name="baseline"),
        candidates=[make_eagle_config(name="eagle3-3step", steps=3)], profile=make_profile(passes=3),
    )  # fmt: skip
    _finish(slow, {"baseline": [80.0, 81.0, 82.0], "eagle3-3step": [60.0, 61.0, 62.0]}, minutes=90)
    queued = make_experiment(name="queued one", created_by=member, candidates=[make_eagle_config(name="draft-x")])
    return fast, slow, queued


def test_it_shows_owner_host_candidates_best_speedup_status_duration_and_tags(owner_client, three):
    fast, slow, queued = three

    content = owner_client.get("/experiments/").content.decode()

    row = content[content.index(f'data-experiment="{fast.pk}"') :].split("</tr>")[0]
    assert ">owner<" in row and fast.host.name in row and "eagle3-2step" in row
    assert re.search(r"<strong>1\.19\d×</strong>", row) and "verdict-faster" in row
    assert "state-finished" in row and "5 min" in row
    assert 'href="?tag=nightly"' in row and 'href="?tag=hopper"' in row
    slow_row = content[content.index(f'data-experiment="{slow.pk}"') :].split("</tr>")[0]
    assert "verdict-slower" in slow_row and "1 h 30 min" in slow_row
    queued_row = content[content.index(f'data-experiment="{queued.pk}"') :].split("</tr>")[0]
    assert "state-queued" in queued_row and ">member<" in queued_row
    # The root address is the same table.
    assert _table_rows(owner_client.get("/").content.decode()) == _table_rows(content)


def test_it_filters_by_status_host_owner_and_tag(owner_client, three):
    assert _table_rows(owner_client.get("/experiments/?status=queued").content.decode()) == ["queued one"]
    assert _table_rows(owner_client.get("/experiments/?host=other-host").content.decode()) == ["slow one"]
    assert _table_rows(owner_client.get("/experiments/?owner=member").content.decode()) == ["queued one"]
    assert _table_rows(owner_client.get("/experiments/?tag=nightly").content.decode()) == ["fast one"]
    # A tag is a whole word: a prefix of one does not match.
    assert "No experiment matches" in owner_client.get("/experiments/?tag=night").content.decode()
    # Malformed filters are dropped, not errors.
    response = owner_client.get("/experiments/?status=bogus&tag=%3Cscript%3E&sort=password&page=x")
    assert response.status_code == 200 and len(_table_rows(response.content.decode())) == 3


def test_it_searches_names_configs_hosts_tags_and_notes_with_every_term(owner_client, three):
    _, slow, _ = three
    run = slow.run_set.get(config__name="eagle3-3step")
    run.notes = "NCCL hang seen on rank 3"
    run.save(update_fields=["notes"])

    assert _table_rows(owner_client.get("/experiments/?q=3step").content.decode()) == ["slow one"]
    assert _table_rows(owner_client.get("/experiments/?q=HOPPER").content.decode()) == ["fast one"]
    assert _table_rows(owner_client.get("/experiments/?q=nccl+hang").content.decode()) == ["slow one"]
    assert _table_rows(owner_client.get("/experiments/?q=other-host").content.decode()) == ["slow one"]
    assert _table_rows(owner_client.get("/experiments/?q=one+2step").content.decode()) == ["fast one"]
    # The search box gives back what was typed, escaped.
    content = owner_client.get("/experiments/?q=%22%3E%3Cscript%3Ealert(1)%3C/script%3E").content.decode()
    assert "<script>alert(1)" not in content and "&lt;script&gt;alert(1)" in content


def test_it_sorts_by_each_column_and_keeps_the_view_in_its_links(owner_client, three):
    by_speedup = _table_rows(owner_client.get("/experiments/?sort=-speedup").content.decode())
    assert by_speedup == ["fast one", "slow one", "queued one"]  # unmeasured last
    assert _table_rows(owner_client.get("/experiments/?sort=speedup").content.decode())[:2] == ["slow one", "fast one"]
    assert _table_rows(owner_client.get("/experiments/?sort=name").content.decode()) == [
        "fast one", "queued one", "slow one"]  # fmt: skip
    assert _table_rows(owner_client.get("/experiments/?sort=-duration").content.decode())[:2] == [
        "slow one", "fast one"]  # fmt: skip

    content = owner_client.get("/experiments/?q=one&status=finished&sort=name").content.decode()
    # Header links keep the filters and flip the direction of the current sort.
    assert 'href="?q=one&amp;status=finished&amp;sort=-name"' in content
    assert 'href="?q=one&amp;status=finished&amp;sort=-speedup"' in content
    assert 'id="copy-view"' in content


def test_it_ranks_by_speedup_among_a_bounded_number_of_experiments(owner_client, three, monkeypatch):
    monkeypatch.setattr("experiments.reads.listing.MAX_RANKED", 2)

    content = owner_client.get("/experiments/?sort=-speedup").content.decode()

    # The latest two (queued, then slow) are ranked; the oldest (fast) is not looked at.
    assert _table_rows(content) == ["slow one", "queued one"]
    assert "among the latest 2 matching experiments" in content
    assert "among the latest" not in owner_client.get("/experiments/?sort=-speedup&host=other-host").content.decode()


def test_it_reads_the_table_in_a_constant_number_of_queries(owner_client, owner):
    def one_more() -> None:
        experiment = make_experiment(created_by=owner, candidates=[make_eagle_config(), make_eagle_config()])
        names = {c.name: [80.0, 82.0] for c in [experiment.baseline, *experiment.ordered_candidates()]}
        _finish(experiment, names)

    views = ("?sort=-speedup", "", "?q=experiment&sort=name")
    one_more()
    counts = {}
    for params in views:
        with CaptureQueriesContext(connection) as one:
            owner_client.get(f"/experiments/{params}")
        counts[params] = len(one.captured_queries)
    for _ in range(9):
        one_more()
    for params in views:
        with CaptureQueriesContext(connection) as ten:
            response = owner_client.get(f"/experiments/{params}")
        assert len(_table_rows(response.content.decode())) == 10
        assert len(ten.captured_queries) == counts[params] <= 11, params


def test_it_renders_notes_as_markdown_without_scripts_handlers_or_javascript_links() -> None:
    html = render_markdown(
        "**bold** [docs](https://example.org/a) [bad](javascript:alert(1))\n\n"
        '<script>alert(2)</script><img src=x onerror=alert(3)><a href="https://x.org" onclick="alert(4)">x</a>\n\n'
        '<div style="background:url(javascript:alert(5))" onmouseover="alert(6)">styled</div>'
    )
    assert "<strong>bold</strong>" in html
    assert 'href="https://example.org/a"' in html and 'rel="noopener noreferrer nofollow"' in html
    lowered = html.lower()
    for forbidden in ("<script", "alert(2)", "javascript:", "onerror", "onclick", "onmouseover", "style=", "<img"):
        assert forbidden not in lowered, forbidden
    assert render_markdown("   ") == ""


def test_it_lets_the_owner_edit_notes_and_tags_and_audits_it(client, member, viewer, maintainer, owner):
    experiment = make_experiment(created_by=member)
    url = f"/experiments/{experiment.pk}/notes/"
    client.force_login(member)

    response = client.post(url, {"notes": "Looks **good**. <script>x()</script>", "tags": "Nightly, h200 nightly"})

    assert response.status_code == 302
    experiment.refresh_from_db()
    assert experiment.tags == "nightly h200"
    event = AuditEvent.objects.get(action=AuditEvent.Action.NOTES, target_id=experiment.pk)
    assert event.actor == member and event.detail["fields"] == ["notes", "tags"]
    page = client.get(experiment.get_absolute_url()).content.decode()
    notes = page[page.index('id="notes"') :].split("</section>")[0]
    assert "<strong>good</strong>" in notes and "<script>x()" not in notes and 'id="notes-form"' in notes
    # Saving the same text again records nothing.
    client.post(url, {"notes": experiment.notes, "tags": experiment.tags})
    assert AuditEvent.objects.filter(action=AuditEvent.Action.NOTES).count() == 1

    client.force_login(maintainer)
    assert client.post(url, {"notes": "checked", "tags": ""}).status_code == 302
    client.force_login(viewer)
    assert client.post(url, {"notes": "mine now", "tags": ""}).status_code == 403
    assert 'id="notes-form"' not in client.get(experiment.get_absolute_url()).content.decode()
    experiment.refresh_from_db()
    assert experiment.notes == "checked"


def test_it_refuses_tags_outside_the_allowlist_and_overlong_notes(client, member):
    experiment = make_experiment(created_by=member)
    client.force_login(member)
    url = f"/experiments/{experiment.pk}/notes/"

    for tags in ("<b>x</b>", "a b c d e f g h i", "x" * 33, "-lead"):
        response = client.post(url, {"notes": "", "tags": tags}, follow=True)
        assert "tag" in response.content.decode().lower()
    client.post(url, {"notes": "n" * 20_001, "tags": ""})
    experiment.refresh_from_db()
    assert experiment.tags == "" and experiment.notes == ""


def test_it_lets_the_owner_note_a_run_and_another_member_not(client, member, django_user_model):
    experiment = make_experiment(created_by=member)
    run = experiment.run_set.get(config=experiment.baseline)
    client.force_login(member)

    client.post(f"/runs/{run.pk}/notes/", {"notes": "[log](javascript:alert(1)) OOM at *step 3*"})

    run.refresh_from_db()
    assert run.notes.startswith("[log]")
    page = client.get(run.get_absolute_url()).content.decode()
    notes = page[page.index('id="notes-text"') :].split("</div>")[0]
    assert "<em>step 3</em>" in notes and "javascript:" not in notes
    assert AuditEvent.objects.filter(action=AuditEvent.Action.RUN_NOTES, target_id=run.pk).exists()
    other = django_user_model.objects.create_user("other")
    do_set_role(other, "member", Actor.command())
    client.force_login(other)
    assert client.post(f"/runs/{run.pk}/notes/", {"notes": "not mine"}).status_code == 403


def test_it_pages_the_table_keeping_its_view_in_the_page_links(owner_client, three, monkeypatch):
    monkeypatch.setattr(listing, "PAGE_SIZE", 2)
    first = owner_client.get("/experiments/?sort=name").content.decode()
    second = owner_client.get("/experiments/?sort=name&page=2").content.decode()

    assert "page 1 of 2 · 3 experiments" in first and 'href="?sort=name&amp;page=2" rel="next"' in first
    assert "page 2 of 2 · 3 experiments" in second and 'href="?sort=name" rel="prev"' in second
    assert 'aria-label="Pages"' not in owner_client.get("/experiments/?status=queued").content.decode()
