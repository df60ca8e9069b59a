"""The experiment page answers in its first screen: the first verdict card inside the viewport on a laptop and on a
phone, in light and dark mode, with nothing scrolling sideways; the headline chart beside the cards, or below them."""

from __future__ import annotations

import pytest

from .test_verdict_cards import CANDIDATE, CELLS, _finished

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

NO_SIDEWAYS_SCROLL = "document.documentElement.scrollWidth <= window.innerWidth"
CARD = f"#card-{CANDIDATE}"


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_first_verdict_card_is_in_the_first_screen(browser_user, log_in, live_web, browser, scheme):
    experiment = _finished(CELLS)
    for width, height in ((1280, 800), (390, 844)):
        context = browser.new_context(viewport={"width": width, "height": height}, color_scheme=scheme)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error, errors=errors: errors.append(str(error)))
        try:
            log_in(page)
            page.goto(f"{live_web}{experiment.get_absolute_url()}")

            box = page.locator(CARD).bounding_box()
            assert box is not None, (width, scheme)
            assert box["x"] >= 0 and box["y"] >= 0, (width, scheme, box)
            assert box["x"] + box["width"] <= width and box["y"] + box["height"] <= height, (width, scheme, box)
            assert "would likely settle it" in page.inner_text(CARD)
            assert page.locator(f"{CARD} button[type=submit]").is_visible()
            assert page.evaluate(NO_SIDEWAYS_SCROLL), (width, scheme)
            # The headline chart: beside the cards on a wide screen, below them on a phone.
            page.wait_for_selector("#speedup-chart .main-svg", timeout=15_000)
            chart = page.locator("#speedup-chart").bounding_box()
            assert chart is not None
            if width >= 1280:
                assert chart["x"] >= box["x"] + box["width"] and chart["y"] < box["y"] + box["height"]
            else:
                assert chart["y"] >= box["y"] + box["height"]
            # Dark mode is the dark palette, not the light one in a dark browser.
            background = page.eval_on_selector(CARD, "el => getComputedStyle(el).backgroundColor")
            assert (background == "rgb(22, 27, 38)") == (scheme == "dark"), background
            # The warnings and the runs are below the answer.
            runs = page.locator("#runs-card").bounding_box()
            assert runs is not None and runs["y"] > box["y"]
            assert "{#" not in page.inner_text("main")
            assert errors == []
        finally:
            context.close()
