"""The run page's log viewer in a real browser: live tail, follow/pause, filter, virtual rows, failure jumps, facts."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, transaction

from experiments.models import ApiToken, Experiment, LogChunk, Run

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

LIVE_STATES: set[str] = {Run.State.READY, Run.State.VERIFYING, Run.State.BENCHMARKING}


def _count(page, selector: str) -> int:
    return int(page.locator(selector).inner_text())


def _visible_rows(page) -> list[tuple[int, str]]:
    return page.eval_on_selector_all(
        "#log .line", "rows => rows.map(r => [Number(r.dataset.n), r.querySelector('.t').textContent])"
    )


def _wait_for_run(run_id: int, states: set[str], timeout: float) -> Run:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = Run.objects.get(pk=run_id)
        if run.state in states:
            return run
        if run.is_finished:
            raise AssertionError(f"run {run_id} ended {run.state}: {run.failure_message}")
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} did not reach {states} in {timeout} s (it is {run.state})")


def _flooding_experiment(client, owner, sim_host) -> Experiment:
    _, raw_token = ApiToken.issue(owner)
    models = sim_host.models_root
    flooding = {
        "name": "eagle3-flood",
        "model_path": f"{models}/kimi-k2.5-sim",
        "tp_size": 2,
        "speculative_algorithm": "EAGLE3",
        "speculative_draft_model_path": f"{models}/kimi-k2.5-sim-eagle3",
        "speculative_num_steps": 2,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 3,
        "env": {"SIMHOST_FAULTS": "log_flood", "SIMHOST_FLOOD_LINES_PER_S": "2000"},
        "log_metrics": {"gen_tps": r"gen throughput \(token/s\): (?P<gen_tps>[\d.]+)"},
    }
    payload = {
        "name": "log viewer under a flood",
        "host": sim_host.name,
        "baseline": flooding,
        "candidates": [{"name": "plain", "model_path": f"{models}/kimi-k2.5-sim", "tp_size": 2}],
        "profile": {"concurrency": [1], "num_prompts": 8, "input_len": 128, "output_len": 256, "seed": 1,
                    "passes": 1, "launches": 1, "stall_timeout_s": 60, "readiness_timeout_s": 60},
    }  # fmt: skip
    response = client.post(
        "/api/experiments", payload, content_type="application/json", headers={"Authorization": f"Bearer {raw_token}"}
    )
    assert response.status_code == 201, response.content
    return Experiment.objects.get(pk=response.json()["id"])


def _cancel_and_wait(experiment: Experiment, timeout: float = 60) -> None:
    """Cancel what is left, so the session's worker is idle before the database is flushed."""
    from experiments.actions.audit import Actor
    from experiments.actions.runs import do_cancel_run

    def cancel() -> None:
        try:
            for run in experiment.run_set.all():
                do_cancel_run(run, Actor.command())
        finally:
            connection.close()

    # Off this thread: Playwright's event loop runs here, and the broadcast after a cancel is sync-to-async.
    thread = threading.Thread(target=cancel)
    thread.start()
    thread.join()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(run.is_finished for run in experiment.run_set.all()):
            return
        time.sleep(0.5)


def test_it_tails_filters_pauses_and_resumes_a_flooding_log(
    client, browser_user, log_in, sim_host, live_web, celery_worker_process, browser
):
    experiment = _flooding_experiment(client, browser_user, sim_host)
    run = experiment.run_set.get(config__name="eagle3-flood")
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        log_in(page)
        _wait_for_run(run.pk, LIVE_STATES, timeout=60)
        page.goto(f"{live_web}/runs/{run.pk}/")

        # Lines keep arriving, and the box holds only the rows in view, not one element per line.
        page.wait_for_selector("#log .line")
        start = _count(page, "#line-count")
        page.wait_for_function(
            f"() => Number(document.querySelector('#line-count').textContent) > {max(start, 5000)}", timeout=30_000
        )
        total = _count(page, "#line-count")
        assert page.locator("#log .line").count() < 150 < total
        # Following: the last drawn row is the last line received.
        page.wait_for_function(
            "() => (() => { const rows = document.querySelectorAll('#log .line');"
            " const count = Number(document.querySelector('#line-count').textContent);"
            " return Number(rows[rows.length - 1].dataset.n) === count; })()"
        )
        assert page.is_checked("#follow")

        # A regex filter shows only matching lines, with their original numbers (the flood has one Prefill
        # line per 40; real requests add theirs).
        page.check("#log-regex")
        page.fill("#log-filter", r"prefill batch.*#new-seq: \d+")
        page.wait_for_function("() => document.querySelector('#match-count').textContent.includes('matching')")
        page.wait_for_function("() => !document.querySelector('#match-count').textContent.includes('filtering')")
        rows = _visible_rows(page)
        assert rows, page.inner_text("#match-count")
        assert all("Prefill batch" in text for _, text in rows)
        numbers = [n for n, _ in rows]
        assert numbers == sorted(numbers) and numbers[-1] - numbers[0] > len(numbers)  # gaps: not renumbered
        assert page.locator("#log .line mark").count() == len(rows)

        # A broken regex says so and leaves the page working.
        page.fill("#log-filter", r"prefill batch (")
        page.wait_for_selector("#log-filter-error:not([hidden])")
        assert "Invalid regular expression" in page.inner_text("#log-filter-error")
        page.fill("#log-filter", "")
        page.wait_for_function("() => document.querySelector('#match-count').hidden")
        page.wait_for_selector("#log-filter-error", state="hidden")

        # Scrolling up pauses following; new lines are counted on the jump-to-bottom button.
        page.hover("#log")
        page.mouse.wheel(0, -3000)
        page.wait_for_selector("#jump-bottom", state="visible")
        assert not page.is_checked("#follow")
        page.wait_for_function("() => Number(document.querySelector('#new-lines').textContent) > 100")
        scroll_top = page.eval_on_selector("#log", "box => box.scrollTop")
        page.wait_for_timeout(500)
        assert page.eval_on_selector("#log", "box => box.scrollTop") == scroll_top  # stays where the user is

        # Jumping to the bottom resumes following.
        page.click("#jump-bottom")
        page.wait_for_selector("#jump-bottom", state="hidden")
        assert page.is_checked("#follow")
        page.wait_for_function(
            "() => (() => { const box = document.querySelector('#log');"
            " return box.scrollHeight - box.scrollTop - box.clientHeight < 17; })()"
        )
        before = _count(page, "#line-count")
        page.wait_for_function(f"() => Number(document.querySelector('#line-count').textContent) > {before + 200}")
        page.wait_for_function(
            "() => (() => { const box = document.querySelector('#log');"
            " return box.scrollHeight - box.scrollTop - box.clientHeight < 17; })()"
        )

        # The live facts: the current phase, the last Decode batch, its chart and the config's custom metric.
        page.wait_for_function(
            "() => document.querySelector('#decode-facts [data-fact=gen_throughput]').textContent.includes('tok/s')",
            timeout=30_000,
        )
        assert float(page.inner_text("#decode-facts [data-fact=accept_len]")) > 1
        assert page.locator("#decode-chart svg path").count() == 2
        page.wait_for_selector("#metric-facts li[data-metric=gen_tps] svg path")
        assert page.inner_text("#fact-phase") in {"ready", "verifying", "benchmarking", "teardown", "succeeded"}
        assert errors == []
    finally:
        context.close()
        _cancel_and_wait(experiment)


TRACEBACK = [
    "[2026-11-29 10:05:00 TP3] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2890, in run_scheduler_process',
    "    scheduler.event_loop_overlap()",
    '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 1843, in forward',
    "    raise RuntimeError(",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
    "",
    "[2026-11-29 10:05:01] Received sigquit from a child process. It usually means the child failed.",
]


def _store_log(run: Run, lines: list[str], chunk: int = 5000) -> None:
    LogChunk.objects.bulk_create(
        LogChunk(run=run, first_line=first + 1, line_count=len(lines[first : first + chunk]),
                 text="\n".join(lines[first : first + chunk]))
        for first in range(0, len(lines), chunk)
    )  # fmt: skip


def test_it_jumps_to_the_failure_and_errors_in_a_large_stored_log(browser_user, log_in, sim_host, live_web, browser):
    from experiments.actions.audit import Actor
    from experiments.actions.experiments import do_create_experiment
    from experiments.models import BenchmarkProfile, ServerConfig

    models = sim_host.models_root
    total, failure_at, warning_at = 200_000, 150_001, 120_000
    lines = [f"[2026-11-29 10:00:00 TP{i % 8}] Decode batch, #running-req: 1, line {i + 1}" for i in range(total)]
    lines[warning_at - 1] = "[2026-11-29 10:04:00] WARNING: the draft model's vocabulary is smaller"
    lines[failure_at - 1 : failure_at - 1 + len(TRACEBACK)] = TRACEBACK
    decode = [{"n": n, "ts": "2026-11-29 10:00:00", "running_req": 1, "tokens": 100, "token_usage": 0.1,
               "accept_len": 2.0 + n / 100, "accept_rate": 0.6, "gen_throughput": 90.0 + n, "queue_req": 0,
               "cuda_graph": True} for n in range(1, 11)]  # fmt: skip
    # One transaction: a worker of this session that is told about the new runs finds them already ended.
    with transaction.atomic():
        experiment = do_create_experiment(
            actor=Actor(browser_user),
            name="a failed run",
            host=sim_host,
            baseline=ServerConfig(name="base", model_path=f"{models}/kimi-k2.5-sim", tp_size=8),
            candidates=[ServerConfig(name="cand", model_path=f"{models}/kimi-k2.5-sim", tp_size=8)],
            profile=BenchmarkProfile(name="short", concurrency=[1], num_prompts=2, output_len=32),
        )
        run = experiment.run_set.order_by("sequence")[0]
        experiment.run_set.exclude(pk=run.pk).update(state=Run.State.CANCELLED)
        _store_log(run, lines)
        Run.objects.filter(pk=run.pk).update(
            state=Run.State.FAILED, log_lines=total, failure_kind=Run.FailureKind.OOM,
            failure_message="CUDA out of memory", failure_first_line=failure_at,
            live_facts={"decode": decode, "metrics": {"verify_ms": [[5, 17.1], [9, 18.4]]}},
        )  # fmt: skip

    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        log_in(page)
        page.goto(f"{live_web}/runs/{run.pk}/")

        # The stored facts are on the page before any websocket message (a reload is always correct).
        assert page.inner_text("#decode-facts [data-fact=gen_throughput]") == "100.0 tok/s"
        assert page.inner_text("#decode-facts [data-fact=accept_len]") == "2.10"
        assert page.inner_text("#metric-facts li[data-metric=verify_ms] .metric-value") == "18.4"

        page.wait_for_function(f"() => document.querySelector('#line-count').textContent === '{total}'", timeout=30_000)
        assert page.locator("#log .line").count() < 150
        rows = _visible_rows(page)
        assert rows[-1][0] == total  # following: the end of the log
        assert page.locator("#log .line[data-n='199999'] .tp").inner_text() == "TP6"

        # The failure: highlighted as one block (the traceback) and scrolled to.
        page.click("#jump-failure")
        page.wait_for_selector(f"#log .line.target-line[data-n='{failure_at}']")
        assert not page.is_checked("#follow")
        block = page.eval_on_selector_all("#log .failure-line", "rows => rows.map(r => Number(r.dataset.n))")
        assert block == list(range(failure_at, failure_at + 7))  # through the blank line, not the sigquit line
        target = page.locator(f"#log .line[data-n='{failure_at}']")
        assert "TP3" in target.locator(".tp").inner_text()
        box, row = page.locator("#log").bounding_box(), target.bounding_box()
        assert box["y"] <= row["y"] <= box["y"] + box["height"] - row["height"]  # really in view
        assert "error-line" in (page.locator(f"#log .line[data-n='{failure_at + 5}']").get_attribute("class") or "")

        # Errors: the first error block is the traceback; the warning before it is marked, but not an error.
        page.click("#jump-error")
        page.wait_for_selector(f"#log .line.target-line[data-n='{failure_at}']")
        assert "(2)" in page.inner_text("#jump-error")  # the traceback and the lone sigquit line
        page.click("#next-error")
        page.wait_for_selector(f"#log .line.target-line[data-n='{failure_at + len(TRACEBACK) - 1}']")
        page.evaluate(f"document.querySelector('#log').scrollTop = {(warning_at - 10) * 17}")
        page.wait_for_selector(f"#log .line.warn-line[data-n='{warning_at}']")

        # Filtering 200,000 lines stays responsive and finds the one OOM line, numbered as in the log.
        page.fill("#log-filter", "out of memory")
        page.wait_for_function("() => document.querySelector('#match-count').textContent === ' · 1 matching'")
        assert _visible_rows(page) == [[failure_at + 5, TRACEBACK[5]]]
        page.fill("#log-filter", "no line says this")
        page.wait_for_selector("#log .log-empty")
        assert page.locator("#log .line").count() == 0

        # Permalinks: a line number links to #L<n>, and opening such an address shows and marks that line.
        page.goto(f"{live_web}/runs/{run.pk}/#L{warning_at}")
        page.wait_for_selector(f"#log .line.target-line[data-n='{warning_at}']", timeout=30_000)
        assert not page.is_checked("#follow")
        page.click(f"#log .line[data-n='{warning_at + 3}'] a.n")
        page.wait_for_selector(f"#log .line.target-line[data-n='{warning_at + 3}']")
        assert page.evaluate("window.location.hash") == f"#L{warning_at + 3}"
        assert errors == []
    finally:
        context.close()
