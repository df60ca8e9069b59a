"""plotly.js comes from the installed plotly package, alone of that package's files."""

from __future__ import annotations

from pathlib import Path

import plotly
from django.contrib.staticfiles import finders

PLOTLY_JS = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"


def test_it_finds_plotly_js_in_the_installed_package_and_nothing_else_of_its_data():
    assert finders.find("vendor/plotly/plotly.min.js") == str(PLOTLY_JS)
    collected = [
        f"{getattr(storage, 'prefix', '') or ''}/{path}".lstrip("/")
        for finder in finders.get_finders()
        for path, storage in finder.list([])
    ]
    assert [path for path in collected if path.startswith("vendor/plotly/")] == ["vendor/plotly/plotly.min.js"]
    assert finders.find("vendor/plotly/widgetbundle.js") is None


def test_the_pages_get_plotly_js_from_the_web_server(client):
    response = client.get("/static/vendor/plotly/plotly.min.js")

    assert response.status_code == 200
    assert b"".join(response.streaming_content) == PLOTLY_JS.read_bytes()
