"""Regenerate the screenshots in docs/screenshots/ from a running specdash (the demo, by default).

    make demo                                   # in another terminal: web, worker, simulated host, demo data
    .venv/bin/python docs/screenshots.py [--url http://127.0.0.1:8000] [--user demo --password demo]

Each main page at 1280 x 800 and 390 x 844 (a phone), in the light and the dark theme: the first screen, what a
person sees on arrival, as `<page>-<width>-<theme>.png`. The pages are found through the API (the newest finished
experiment, one of its runs, its first two configs on Compare), so the script needs no ids. Headless Debian
chromium through Playwright, as the browser tests use it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "screenshots"
SIZES = {"1280": {"width": 1280, "height": 800}, "390": {"width": 390, "height": 844}}
THEMES = ("light", "dark")


def pages(api_get) -> dict[str, str]:
    """Name -> path of the pages shown: the lists, and the newest finished experiment's page, run and comparison."""
    found = {"experiments": "/experiments/", "flags": "/flags/", "hosts": "/hosts/", "studies": "/studies/"}
    finished = [e for e in api_get("/api/experiments")["experiments"] if e.get("status") == "finished"]
    if finished:
        experiment = api_get(f"/api/experiments/{finished[0]['id']}")
        found["experiment"] = experiment["url"]
        runs = [r for r in experiment["runs"] if r["state"] == "succeeded"]
        if runs:
            found["run"] = runs[0]["url"]
        configs = sorted({r["config_id"] for r in runs})[:2]
        if len(configs) == 2:
            picks = "&".join(f"pick=c{experiment['id']}-{config}" for config in configs)
            found["compare"] = f"/compare/?{picks}"
    return found


# The charts in the first screen are drawn once plotly.js has loaded after the page's load event: wait for those.
FIRST_SCREEN_DRAWN = """() => [...document.querySelectorAll('[data-figure], [data-figure-url]')]
    .filter(h => h.offsetParent !== null && h.getBoundingClientRect().top < innerHeight)
    .every(h => h.querySelector('.main-svg'))"""


def _wait_for_first_screen_charts(page) -> None:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(FIRST_SCREEN_DRAWN, timeout=20_000)
    except PlaywrightTimeout:
        print(f"{page.url}: a chart of the first screen was not drawn within 20 s; taken as it is", file=sys.stderr)
    page.wait_for_timeout(300)  # Plotly's transitions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--user", default="demo")
    parser.add_argument("--password", default="demo")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    base = args.url.rstrip("/")
    args.out.mkdir(parents=True, exist_ok=True)
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    written = 0
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        for theme in THEMES:
            for size_name, viewport in SIZES.items():
                context = browser.new_context(viewport=viewport, color_scheme=theme, device_scale_factor=1)
                page = context.new_page()
                page.goto(f"{base}/login/")
                page.fill("#id_username", args.user)
                page.fill("#id_password", args.password)
                page.click("button[type=submit]")
                page.wait_for_url(f"{base}/")

                def api_get(path: str, page=page) -> dict:
                    response = page.request.get(f"{base}{path}")
                    if not response.ok:
                        raise SystemExit(f"{path}: HTTP {response.status}")
                    return json.loads(response.text())

                for name, path in pages(api_get).items():
                    page.goto(f"{base}{path}", wait_until="load")
                    _wait_for_first_screen_charts(page)
                    target = args.out / f"{name}-{size_name}-{theme}.png"
                    page.screenshot(path=str(target))
                    written += 1
                context.close()
        browser.close()
    print(f"{written} screenshots in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
