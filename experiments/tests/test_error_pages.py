"""A page that may not be opened, or is not there, answers with the site's own page: the navigation, a plain
sentence and a way back; a server error's page needs nothing that may have failed (no query, no session); the JSON
API answers JSON for each."""

from __future__ import annotations

import pytest
from django.test import Client, RequestFactory
from django.views.defaults import server_error

from experiments.models import ApiToken, Subscription

pytestmark = pytest.mark.django_db


def _text(response) -> str:
    return response.content.decode().replace("&#x27;", "'")


def test_a_viewer_opening_a_member_page_gets_the_styled_403(client, viewer):
    client.force_login(viewer)

    response = client.get("/experiments/new/")

    page = _text(response)
    assert response.status_code == 403 and response["Content-Type"].startswith("text/html")
    assert '<link rel="stylesheet" href="/static/specdash.css">' in page
    assert '<nav id="main-nav" aria-label="Main">' in page and 'viewer <small class="meta">(viewer)</small>' in page
    assert "You may not open this page" in page
    assert "Your role, viewer, does not allow it: an admin of your team can change that on the Team page." in page
    assert '<a href="/" id="error-back">Back to the experiments</a>' in page


def test_the_403_says_the_reason_an_action_gave(client, member, maintainer):
    client.force_login(member)
    subscription_owner = Client()
    subscription_owner.force_login(maintainer)
    subscription_owner.post("/notifications/", {"channel": "browser", "events": ["flag_raised"]})
    theirs = Subscription.objects.get(user=maintainer)

    response = client.post(f"/notifications/{theirs.pk}/delete/")

    assert response.status_code == 403
    assert "Only its owner, or an admin for the team's, may remove a subscription." in _text(response)
    assert '<nav id="main-nav"' in _text(response)


def test_a_user_in_no_role_is_told_to_ask_an_admin(client, outsider):
    client.force_login(outsider)

    page = _text(client.get("/hosts/"))

    assert "Your account holds no role yet: an admin of your team can change that on the Team page." in page


def test_a_missing_page_gets_the_styled_404_with_the_navigation(client, viewer):
    client.force_login(viewer)

    missing_object = client.get("/experiments/999999/")
    no_route = client.get("/no/such/<script>page/")

    assert missing_object.status_code == no_route.status_code == 404
    assert 'There is nothing at <code class="hash">/experiments/999999/</code>' in _text(missing_object)
    assert '<nav id="main-nav"' in _text(missing_object)
    assert "/no/such/%3Cscript%3Epage/" in _text(no_route) and "<script>page" not in _text(no_route)


def test_a_logged_out_visitor_gets_a_404_with_a_way_to_log_in(client):
    page = _text(client.get("/no-such-page/"))

    assert "No such page" in page and '<a href="/login/">Log in</a>' in page
    assert "main-nav" not in page  # the navigation is for those logged in


def test_the_500_page_needs_no_query_session_or_context(django_assert_num_queries):
    request = RequestFactory().get("/experiments/1/")  # no session, no user: the middleware may be what failed

    with django_assert_num_queries(0):
        response = server_error(request)

    page = response.content.decode()
    assert response.status_code == 500
    assert '<link rel="stylesheet" href="/static/specdash.css">' in page and '<header class="topbar">' in page
    assert "specdash failed to answer this page" in page and 'href="/" id="error-back"' in page


def test_the_api_answers_json_for_403_and_404(client, viewer):
    _, token = ApiToken.issue(viewer)
    auth = {"Authorization": f"Bearer {token}"}

    forbidden = client.post("/api/experiments", {}, content_type="application/json", headers=auth)
    missing = client.get("/api/experiments/999999", headers=auth)
    no_route = client.get("/api/no-such-thing", headers=auth)

    for response in (forbidden, missing, no_route):
        assert response["Content-Type"].startswith("application/json"), response.content[:200]
        assert set(response.json()) == {"detail"}
    assert (forbidden.status_code, missing.status_code, no_route.status_code) == (403, 404, 404)
