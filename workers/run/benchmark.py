"""The benchmark phase: the shipped client (`workers/benchclient`) runs on the host against the server's loopback
port, once per (pass, concurrency) cell of the profile; each cell is stored with the server's own view of it
(its accept length and Decode-batch lines) before the next starts, so a resumed run continues at the next cell.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import logging
import re
import shlex
import time
import uuid
from pathlib import Path
from typing import Any

from django.conf import settings

from experiments import serializers
from experiments.actions.environments import do_add_server_metric_samples
from experiments.actions.measurements import do_record_measurement, do_record_prompt_results
from experiments.analysis import telemetry
from experiments.analysis.telemetry import ServerMetricReading
from experiments.formats import prompt_sampling
from experiments.live import broadcast
from experiments.models import BenchmarkProfile, Host, Run
from experiments.reads import series
from experiments.remedies import acceptance_remedies
from experiments.rules import gpu_hours

from .. import engines, hosts
from ..ssh import HostConnection, quote_command
from .errors import RunFailed
from .session import RunSession, db

BENCHCLIENT_DIR = Path(__file__).resolve().parent.parent / "benchclient"
# Copied under the host's work directory, into a directory named after its content; run from there as
# `python -m benchclient`.
REMOTE_DIR = ".specdash"
TIMEOUT_MARGIN_S = gpu_hours.CELL_MARGIN_S
# The longest stretch of log read back for one cell's Decode-batch summary.
MAX_WINDOW_LINES = 500_000
FLUSH_WAIT_S, FLUSH_RETRY_S = 10.0, 0.1
# The server writes a cell's last Decode lines a moment after its last token: the tail reads them meanwhile.
LAST_LINES_WAIT_S = 0.2

log = logging.getLogger(__name__)


@functools.cache
def client_version() -> str:
    """A digest of the client's files: the name of the directory it is installed in on every host."""
    digest = hashlib.sha256()
    for path in sorted(BENCHCLIENT_DIR.rglob("*.py")):
        digest.update(str(path.relative_to(BENCHCLIENT_DIR)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def client_dir(work_dir: str) -> str:
    return f"{work_dir}/{REMOTE_DIR}/client-{client_version()}"


async def install_client(conn: HostConnection, work_dir: str) -> None:
    """Install this client version on the host once. It is uploaded beside its place and moved in whole, so runs of
    hosts that share one machine and work directory never write the same files, and no run sees half a client."""
    target = client_dir(work_dir)
    present = await conn.run(
        f"mkdir -p -- {shlex.quote(f'{work_dir}/{REMOTE_DIR}')} && test -d {shlex.quote(target)}", timeout=30
    )
    if present.ok:
        return
    staging = f"{work_dir}/{REMOTE_DIR}/upload-{uuid.uuid4().hex}"
    await conn.put_tree(BENCHCLIENT_DIR, staging)
    # Another run may have won the race: its copy is the same version, and this one goes.
    await conn.run(
        f"mv -T -- {shlex.quote(staging)} {shlex.quote(target)} 2>/dev/null || rm -rf -- {shlex.quote(staging)}"
    )


def prompts_path(work_dir: str, name: str) -> str:
    return f"{work_dir}/{REMOTE_DIR}/prompts-{name}.jsonl"


async def install_prompts(conn: HostConnection, work_dir: str, profile: BenchmarkProfile) -> str | None:
    """Put the profile's sampled prompts on the host, once per sample version (named by its digest, uploaded beside
    its place and moved in whole); their path there, or None for random ids."""
    sample = await db(profile.prompt_sample)()
    if sample is None:
        return None
    data, _ = sample
    target = prompts_path(work_dir, prompt_sampling.sample_hash(data))
    present = await conn.run(
        f"mkdir -p -- {shlex.quote(f'{work_dir}/{REMOTE_DIR}')} && test -f {shlex.quote(target)}", timeout=30
    )
    if not present.ok:
        staging = f"{target}.upload-{uuid.uuid4().hex}"
        await conn.put_bytes(data, staging)
        await conn.run(f"mv -f -- {shlex.quote(staging)} {shlex.quote(target)}")
    return target


async def run_cells(session: RunSession) -> None:
    await session.advance(Run.State.BENCHMARKING)
    await watch_acceptance(session)
    profile = session.profile
    prompts_file = await install_prompts(session.require_conn(), session.work_dir, profile)
    for index, (pass_index, concurrency) in enumerate(profile.benchmark_cells()):
        if index < session.run.benchmark_cell:
            continue  # done before a re-attach
        # /flush_cache also resets the server's accept-length counters (SGLang 0.5.9), so what
        # /get_server_info reports after the cell is this cell's alone, provided the flush happened.
        flushed = await _flush_cache(session)
        window_start = session.server_log.lines_read + 1
        # The first cell keeps every request's outputs (greedy runs: the equivalence gate reads them).
        keep_outputs = index == 0 and profile.is_greedy
        result = await _run_client(session, concurrency, prompts_file, keep_outputs)
        # The worker's clock (the GPU samples' clock) as the client returned: the cell's window ends here, and began
        # its duration before (the client's start-up and warm-up are not in it). The client dates its samples of the
        # server's gauges by their age as it wrote the result: this instant too, give or take the SSH latency.
        returned_at = time.time()
        server_metrics = telemetry.server_metric_readings(result.pop("server_metrics", None), returned_at)
        result["ended_at"] = returned_at
        figures = await _server_figures(session, window_start)
        if figures["server_accept_length"] is None:
            # The engine has no window figure of its own to read: the client's, from the counters around the
            # cell's requests (vLLM's), stands.
            figures.pop("server_accept_length")
        elif not flushed:
            figures["server_accept_length"] = None  # it counts the cell before too: no figure beats a wrong one
        result.update(figures)
        requests = result.get("requests")
        # Random ids too: at temperature 0 the same seed sends every config the same prompts, whose outputs the
        # equivalence gate compares as it does a prompt set's.
        if requests is not None and index == 0:
            await db(do_record_prompt_results)(session.run, pass_index, concurrency, requests)
        await db(do_record_measurement)(session.run, pass_index, concurrency, result)
        await store_and_send_server_metrics(session.run, server_metrics)
        if result.get("failed"):
            # Kept for the record, but a cell with failed requests measures the failures, not the speed.
            await session.raise_if_server_died()
            errors = "; ".join(result.get("errors") or [])
            raise RunFailed(
                Run.FailureKind.BENCHMARK_FAILED,
                f"{result['failed']} of {result['failed'] + result['completed']} requests failed at "
                f"concurrency {concurrency}: {errors}",
            )
        await session.update(benchmark_cell=index + 1, cell_requests_done=0, cell_requests_total=0)


async def watch_acceptance(session: RunSession) -> None:
    """Arm the live acceptance alarm for a speculative config: its history from the database, what the models'
    config.json files say for the remedies. Not again once it has spoken (before a re-attach, say)."""
    run, config = session.run, session.config
    if not config.speculative_algorithm:
        return
    if any(w.get("kind") in engines.ACCEPTANCE_ALARM_KINDS for w in run.warnings or [] if isinstance(w, dict)):
        return
    history = await db(series.recent_accept_lengths)(run.host_id, config.content_hash, session.profile.series_key)
    target = await _model_config(session, config.model_path, "target")
    draft = (
        await _model_config(session, config.speculative_draft_model_path, "draft")
        if config.speculative_draft_model_path
        else None
    )
    engine = engines.of(config)
    diagnosis = engine.algorithm_problem(config.speculative_algorithm, draft) or ""
    remedies = [r.as_json({}, {}) for r in acceptance_remedies(config.speculative_algorithm, target, draft)]
    watch = engines.AcceptanceWatch(history, diagnosis=diagnosis, step_lines=engine.step_lines)
    session.server_log.watch_acceptance(watch, remedies)


async def _model_config(session: RunSession, path: str, role: str) -> dict[str, Any] | None:
    """A model's config.json, or None where it cannot be read now (the alarm then names the causes unproven)."""
    try:
        return await hosts.model_config(session.require_conn(), session.host, path, role)
    except hosts.HostReadError:
        return None


async def _flush_cache(session: RunSession) -> bool:
    """Reset the server between cells (the engine's `reset_between_cells`), waiting out requests it still holds:
    SGLang refuses a flush (400, "Cache not flushed because there are pending requests") until the last cell's
    requests have left its scheduler, which a loaded host can take a moment after the client saw their last token.
    False when it never reset."""
    engine = engines.of(session.config)
    deadline = time.monotonic() + FLUSH_WAIT_S
    while True:
        status = await engine.reset_between_cells(session.api)
        if status != 400:
            return status is not None and status < 400
        if time.monotonic() >= deadline:
            log.warning("run %s: the server did not flush its cache within %s s", session.run.pk, FLUSH_WAIT_S)
            return False
        await asyncio.sleep(FLUSH_RETRY_S)


async def _server_figures(session: RunSession, window_start: int) -> dict[str, Any]:
    """The server's own view of the cell just run: its accept length and its Decode-batch log lines."""
    await asyncio.sleep(LAST_LINES_WAIT_S)
    await session.server_log.flush()
    engine = engines.of(session.config)
    accept = await engine.server_accept_length(session.api)
    window = min(max(session.server_log.lines_read - window_start + 1, 1), MAX_WINDOW_LINES)
    # Past the log's cut, the window's Decode lines come from those the server log keeps in memory.
    lines = await session.server_log.lines(after=window_start - 1, limit=window)
    summary = engines.decode_summary(engine.grammar, window_start, [line["text"] for line in lines])
    return {"server_accept_length": accept, "server_decode": summary}


async def _run_client(
    session: RunSession, concurrency: int, prompts_file: str | None, keep_outputs: bool
) -> dict[str, Any]:
    argv = command(
        session.host,
        session.profile,
        concurrency,
        session.work_dir,
        client_pid_file(session),
        prompts_file=prompts_file,
        keep_outputs=keep_outputs,
        backend=session.server_log.engine.bench_backend,
    )
    reported = (0, 0)

    async def on_progress(line: str) -> None:
        nonlocal reported
        if await store_streamed_metrics(session.run, line):
            return
        counts = progress_counts(line)
        if counts is not None and counts != reported:
            reported = counts
            await session.update(cell_requests_done=counts[0], cell_requests_total=counts[1])

    result = await session.require_conn().run_reading_stderr(
        argv, on_stderr_line=on_progress, timeout=timeout(session.profile, concurrency)
    )
    data = parse_result(result.stdout)
    if not result.ok or data is None or not data.get("completed"):
        await session.raise_if_server_died()
        errors = "; ".join((data or {}).get("errors") or []) or _stderr_tail(result.stderr)
        raise RunFailed(
            Run.FailureKind.BENCHMARK_FAILED,
            f"The benchmark at concurrency {concurrency} failed (exit {result.exit_status}): {errors}",
        )
    return data


async def store_streamed_metrics(run: Run, line: str) -> bool:
    """Store the samples of the client's streamed line, dated by its arrival, and send them to the run page; False
    for a line of another kind. Stored before sent: a page that misses the broadcast reads them on reload; the
    client leaves them out of its result, so each is stored once."""
    report = streamed_server_metrics(line)
    if report is None:
        return False
    await store_and_send_server_metrics(run, telemetry.server_metric_readings(report, time.time()))
    return True


async def store_and_send_server_metrics(run: Run, readings: list[ServerMetricReading]) -> None:
    """The one way samples of the server's gauges are kept: stored, then sent to the run's open pages with their ids
    and the id before them, so a page whose broadcast was lost is refilled from storage."""
    if not readings:
        return
    stored = await db(do_add_server_metric_samples)(run, readings)
    await broadcast.send_server_metrics(
        run.pk, serializers.server_metric_samples_json(readings, stored.ids), after=stored.after
    )


def _stderr_tail(stderr: str, lines: int = 5) -> str:
    """The client's last words before it failed, its streamed samples left out: what a failure message quotes."""
    said = [line for line in stderr.strip().splitlines() if not line.startswith(STREAMED_METRICS_PREFIX)]
    return "\n".join(said[-lines:])


def client_pid_file(session: RunSession) -> str:
    return f"{session.work_dir}/runs/run-{session.run.pk}.benchclient.pid"


async def stop_client(session: RunSession) -> None:
    """Stop a benchmark client still running on the host (the run was cancelled or failed mid-cell). Closing the
    SSH channel does not stop it, and while it keeps requests in flight the server's graceful shutdown waits for
    them until teardown has to SIGKILL it. The pid is killed only if it is still a benchmark client."""
    pid_file = shlex.quote(client_pid_file(session))
    await session.require_conn().run(
        f"pid=$(cat -- {pid_file} 2>/dev/null) || exit 0; rm -f -- {pid_file}; "
        'case "$pid" in ""|*[!0-9]*) exit 0;; esac; '
        'grep -qs benchclient "/proc/$pid/cmdline" && kill -TERM "$pid" 2>/dev/null; exit 0'
    )


# ---- the client's command line and output (pure) ---------------------------------------------------------

# The client's prefix (workers/benchclient/prometheus.py STREAM_PREFIX); the client imports nothing of ours.
STREAMED_METRICS_PREFIX = "benchclient: metrics "
_PROGRESS_LINE = re.compile(r"benchclient: (\d{1,9})/(\d{1,9}) done")


def progress_counts(line: str) -> tuple[int, int] | None:
    """(finished, all) from the client's progress line on stderr (`benchclient: 12/32 done, 0 failed`), else None."""
    match = _PROGRESS_LINE.match(line.strip())
    if match is None:
        return None
    done, total = int(match[1]), int(match[2])
    return (done, total) if 0 <= done <= total else None


def streamed_server_metrics(line: str) -> Any:
    """The report of the client's streamed-samples line (`benchclient: metrics {...}`, the result's `server_metrics`
    shape), else None; what it holds is checked by telemetry.server_metric_readings, as the result's is."""
    line = line.strip()
    if not line.startswith(STREAMED_METRICS_PREFIX):
        return None
    try:
        return json.loads(line[len(STREAMED_METRICS_PREFIX) :])
    except json.JSONDecodeError:
        return None  # a line cut at the SSH reader's limit: its samples are lost, never misread


def command(
    host: Host,
    profile: BenchmarkProfile,
    concurrency: int,
    work_dir: str,
    pid_file: str = "",
    *,
    prompts_file: str | None = None,
    keep_outputs: bool = False,
    backend: str = "sglang",
) -> str:
    """The shell command that benchmarks the host's server at `concurrency` with `profile`, speaking to it as the
    client's `backend` (its engine's); with `pid_file`, the client's pid is written there first (`exec` keeps the
    shell's pid) so that teardown can stop it."""
    argv = [
        *shlex.split(host.python),
        "-m",
        "benchclient",
        # The client's default backend (SGLang's native API) goes unsaid, so an SGLang run's command is as it was.
        *(["--backend", backend] if backend != "sglang" else []),
        "--base-url",
        f"http://127.0.0.1:{host.server_port}",
        "--concurrency",
        str(concurrency),
        "--num-prompts",
        str(profile.num_prompts),
        "--input-len",
        str(profile.input_len),
        "--output-len",
        str(profile.output_len),
        "--seed",
        str(profile.seed),
        "--warmup-requests",
        str(profile.warmup_requests),
        "--request-timeout",
        str(profile.request_timeout_s),
        "--temperature",
        repr(profile.temperature),
        "--top-p",
        repr(profile.top_p),
        "--metrics-interval-ms",
        str(settings.SPECDASH_SERVER_METRICS_MS),
        "--stream-metrics",
    ]
    if prompts_file is not None:
        argv += ["--prompts-file", prompts_file]
    if keep_outputs:
        argv.append("--keep-outputs")
    record_pid = f"echo $$ > {shlex.quote(pid_file)} && exec " if pid_file else ""
    return f"cd -- {shlex.quote(client_dir(work_dir))} && {record_pid}{quote_command(argv)}"


def timeout(profile: BenchmarkProfile, concurrency: int) -> float:
    """Every wave of `concurrency` requests may take a whole request timeout; then a margin for the warm-up. The
    daily GPU-hour quotas reserve a queued launch's time by the same bound."""
    return gpu_hours.cell_time_bound_s(profile.num_prompts, concurrency, profile.request_timeout_s)


def parse_result(stdout: str) -> dict[str, Any] | None:
    """The client's JSON summary: its last line that is a JSON object (progress lines may precede it)."""
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                continue
            return data if isinstance(data, dict) else None
    with contextlib.suppress(json.JSONDecodeError):
        data = json.loads(stdout)
        return data if isinstance(data, dict) else None
    return None
