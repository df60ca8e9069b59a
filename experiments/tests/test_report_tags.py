"""The comparison page's template filters read back as Django's built-in ones would."""

from __future__ import annotations

import json

from django.template import Context, Template
from django.utils.html import json_script

from experiments.templatetags.report_tags import figure_script, fixed


def test_its_figure_scripts_and_numbers_read_back_as_the_built_in_filters_would() -> None:
    figure = {"data": [{"name": "</script><b>&x", "y": [1.5, None]}], "layout": {"title": {"text": "a > b"}}}
    html = figure_script(figure, "f")
    assert "</script><b>" not in html and html.count("</script>") == 1
    payload = html.removeprefix('<script id="f" type="application/json">').removesuffix("</script>")
    builtin = json_script(figure, "f")
    assert json.loads(payload) == figure == json.loads(builtin[builtin.index(">") + 1 : builtin.rindex("</script>")])

    floatformat = Template("{{ v|floatformat:3 }}|{{ v|floatformat:1 }}")
    for value in (0.0, 1.0004, 82.26, -3.14159, 12345.6789, 2, 0.99987):
        assert f"{fixed(value, 3)}|{fixed(value, 1)}" == floatformat.render(Context({"v": value}))
    assert fixed(None) == fixed("n/a") == ""
