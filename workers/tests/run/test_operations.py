"""Operations: the services a worker depends on go away and come back while an experiment runs. A Redis restart
loses the queued wake-ups (the beat makes them good) and a PostgreSQL restart breaks the worker's connection (it
reconnects); a second deployment on the same Redis never takes this one's tasks or sees its broadcasts."""

from __future__ import annotations

import asyncio
import os
import re
import runpy
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

import psycopg
import pytest
import redis
from asgiref.sync import async_to_sync
from channels_redis.core import RedisChannelLayer  # type: ignore[import-untyped]
from django.conf import settings
from django.core import serializers
from django.db import OperationalError, connection, connections

from dashboard.celery import app
from experiments.actions.audit import Actor
from experiments.actions.experiments import do_create_experiment
from experiments.live import broadcast
from experiments.models import BenchmarkProfile, Host, Run
from simhost.ports import free_port, wait_for_port
from workers.run.database import db
from workers.tests.run.simruns import SMALL_PROFILE, lines_on_host, sim_config, wait_for_state

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

REPO = Path(__file__).resolve().parents[3]
FINISHED: set[str] = {Run.State.SUCCEEDED, Run.State.FAILED, Run.State.CANCELLED}


def _queue_launches(host: Host, owner, launches: int, **profile_fields) -> list[Run]:
    """The queued runs of a new experiment of one config launched `launches` times, in the order they run."""
    profile = BenchmarkProfile(name="p", **{**SMALL_PROFILE, "launches": launches, **profile_fields})
    experiment = do_create_experiment(
        actor=Actor(owner), name="operations", host=host, baseline=sim_config(host), candidates=[], profile=profile
    )
    return list(experiment.run_set.order_by("sequence"))


def _wait_for_log(path: Path, text: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return
        time.sleep(0.2)
    raise AssertionError(f"{text!r} not in {path} after {timeout} s")


def _task_outcomes(log_path: Path, task: str, count: int, timeout: float = 15) -> list[str]:
    """How the worker's first `count` calls of `task` ended ("succeeded", "raised"), once they have."""
    outcome = re.compile(rf"workers\.tasks\.{task}\[[\w-]+\] (succeeded|raised)")
    deadline = time.monotonic() + timeout
    while True:
        ended = outcome.findall(log_path.read_text())
        if len(ended) >= count or time.monotonic() > deadline:
            return ended[:count]
        time.sleep(0.2)


# ---- a Redis restart -------------------------------------------------------------------------------------------


class PrivateRedis:
    """A redis-server of the test's own that it may kill: no persistence, so a restart comes back empty."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", str(self.root)]  # fmt: skip
        self.process = subprocess.Popen(argv, stdout=open(self.root / "redis.log", "ab"), stderr=subprocess.STDOUT)
        wait_for_port(self.port, process=self.process, what="redis-server")

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()


@pytest.fixture
def private_redis(tmp_path):
    server = PrivateRedis(tmp_path)
    server.start()
    yield server
    if server.process is not None and server.process.poll() is None:
        server.kill()


def test_it_finishes_an_experiment_across_a_redis_restart(
    sim_host, owner, private_queue, start_worker, private_redis, tmp_path
):
    log_path = tmp_path / "worker.log"
    redis_env = {"REDIS_URL": private_redis.url, "SPECDASH_WAKE_EVERY": "1"}
    # Two slots, as the demo's worker has: its consumer keeps reading the broker while a run's task holds its
    # message unacknowledged, so it meets the dropped connection at once (the path that took the worker down).
    worker = start_worker(private_queue, "ops", log_path, beat_schedule=tmp_path / "beat", concurrency=2, **redis_env)
    # The submission's own wake-up goes to this test's broker, which the worker does not read: the beat starts the
    # first run as well.
    runs = _queue_launches(sim_host, owner, 3)
    first, second = runs[0], runs[1]

    wait_for_state(first, {Run.State.BENCHMARKING}, timeout=60)
    private_redis.kill()
    _wait_for_log(log_path, "Connection to broker lost", timeout=15)
    first.refresh_from_db()
    assert not first.is_finished
    # Redis stays down until the first run is over, so the wake-up its end sends for the second run is lost.
    wait_for_state(first, FINISHED, timeout=60)
    private_redis.start()  # empty: no queued message, no channel group survived
    back_at = time.monotonic()
    wait_for_state(second, set(Run.State.values) - {Run.State.QUEUED}, timeout=60)
    woken_after = time.monotonic() - back_at
    for run in runs:
        wait_for_state(run, FINISHED, timeout=60)

    assert [run.state for run in runs] == [Run.State.SUCCEEDED] * 3, [run.failure() for run in runs]
    # The worker that met the restart drove them all: it reconnected instead of exiting.
    log = log_path.read_text()
    assert worker.poll() is None, log[-3000:]
    assert "Unrecoverable error" not in log
    assert all(os.getpgid(int(run.worker.rsplit(":", 1)[1])) == worker.pid for run in runs)  # its pool's pids
    assert woken_after < 15, woken_after  # the worker's reconnection to Redis, then the beat's next wake-up
    # The second run's wake-up was lost (Redis was down when the first run ended); the beat woke the host after.
    lost = log.index(f"host {sim_host.pk}: wake-up not sent")
    assert re.search(rf"wake_idle_hosts\[[\w-]+\] succeeded in [\d.]+s: \[{sim_host.pk}\]", log[lost:])
    print(f"Redis restart: the next queued run left the queue {woken_after:.1f} s after Redis was back")


# ---- a second deployment on the same Redis -----------------------------------------------------------------


def _worker_argv(name: str) -> list[str]:
    """A worker started as the deployment units start it: on whatever queue its settings name (no -Q)."""
    return [sys.executable, "-m", "celery", "-A", "dashboard", "worker", "--loglevel", "INFO", "--concurrency", "1",
            "--without-gossip", "--without-mingle", "--without-heartbeat", "-n", f"{name}@%h"]  # fmt: skip


def _deployment_names(database_url: str) -> tuple[str, str]:
    """The Celery queue and channel prefix of a process started with `database_url` (the settings derive both)."""
    with mock.patch.dict(os.environ, {"DATABASE_URL": database_url, "SPECDASH_INSTANCE": ""}):
        values = runpy.run_path(str(REPO / "dashboard" / "settings.py"))
    return values["CELERY_TASK_DEFAULT_QUEUE"], values["CHANNEL_LAYERS"]["default"]["CONFIG"]["prefix"]


def _test_database_url() -> str:
    db = connection.settings_dict
    return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


class Listener:
    """A browser's view of one channel prefix: a channel in the experiment's group, read after the fact."""

    def __init__(self, prefix: str, group: str) -> None:
        self.layer = RedisChannelLayer(hosts=[settings.REDIS_URL], prefix=prefix)
        self.group = group
        self.channel = async_to_sync(self.layer.new_channel)()
        async_to_sync(self.layer.group_add)(group, self.channel)

    def events(self) -> list[dict[str, Any]]:
        """What reached the channel (and has not expired); the channel leaves the group."""

        async def drain() -> list[dict[str, Any]]:
            received = []
            while True:
                try:
                    received.append(await asyncio.wait_for(self.layer.receive(self.channel), timeout=1))
                except TimeoutError:
                    await self.layer.group_discard(self.group, self.channel)
                    return received

        return async_to_sync(drain)()


def test_it_keeps_a_second_deployment_on_the_same_redis_apart(sim_host, owner, server_process, sshd, tmp_path):
    ours_url = _test_database_url()
    others_url = f"sqlite:///{tmp_path / 'other.sqlite3'}"
    ours, others = _deployment_names(ours_url), _deployment_names(others_url)
    # The other deployment's worker is up and idle first: had it our queue, it would take our wake-ups (and fail
    # them: its database has no such host).
    other_log, our_log = tmp_path / "other.log", tmp_path / "ours.log"
    # Each deployment's names derive from its own database (no SPECDASH_INSTANCE, unlike the other test processes).
    server_process(_worker_argv("other"), other_log, DATABASE_URL=others_url, SPECDASH_INSTANCE="")
    _wait_for_log(other_log, "ready.")

    previous_queue = app.conf.task_default_queue
    app.conf.task_default_queue = ours[0]  # this process is our deployment's web tier
    try:
        (run,) = _queue_launches(sim_host, owner, 1)
        group = broadcast.experiment_group(run.experiment_id)
        our_page, their_page = Listener(ours[1], group), Listener(others[1], group)
        # Ours has no beat: a wake-up the other worker took would strand the run until the wait below runs out.
        our_worker = server_process(
            _worker_argv("ours"), our_log, DATABASE_URL=ours_url, SPECDASH_SSH_KEY_DIR=str(sshd.key_dir),
            SPECDASH_INSTANCE="",
        )  # fmt: skip
        wait_for_state(run, FINISHED, timeout=60)
        # The submission's wake-up, then the one our worker sent itself as the run ended (the host's next turn).
        woken = _task_outcomes(our_log, "drive_host", count=2)
    finally:
        app.conf.task_default_queue = previous_queue
        redis.Redis.from_url(settings.REDIS_URL).delete(ours[0], others[0])

    assert run.state == Run.State.SUCCEEDED, run.failure()
    # Driven by a pool process of our worker (Run.worker is "host:pid"; the worker leads its process group).
    assert os.getpgid(int(run.worker.rsplit(":", 1)[1])) == our_worker.pid
    assert woken == ["succeeded", "succeeded"]
    assert "drive_host[" not in other_log.read_text()
    assert (run.pk, Run.State.SUCCEEDED) in {(e["run"], e["state"]) for e in our_page.events()}
    assert their_page.events() == []


# ---- a PostgreSQL restart --------------------------------------------------------------------------------------


class PrivatePostgres:
    """A PostgreSQL cluster of the test's own (trust auth, loopback, a free port) that it may stop and start."""

    def __init__(self) -> None:
        versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parts[-3]))
        if not versions:
            pytest.fail("PostgreSQL's server binaries are not installed (apt-get install postgresql).")
        self.bin = versions[-1].parent
        # Not under tmp_path: the server refuses to run as root, and its user must reach the data directory.
        self.root = Path(tempfile.mkdtemp(prefix="specdash-pg-"))
        self.port = free_port()
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *argv: str) -> None:
        as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*as_postgres, str(self.bin / argv[0]), *argv[1:]], cwd=self.root, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip

    def create(self) -> None:
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
        self._run("initdb", "-D", str(self.root / "data"), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync")
        self.start()

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.root / "data"), "-l", str(self.root / "server.log"), "-w", "-o", options,
                  "start")  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.root / "data"), "-w", "-m", mode, "stop")

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.url, connect_timeout=5) as conn:
            return conn.execute(sql, params).fetchall()

    def destroy(self) -> None:
        if (self.root / "data" / "postmaster.pid").exists():
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def private_postgres():
    cluster = PrivatePostgres()
    try:
        cluster.create()
        yield cluster
    finally:
        cluster.destroy()


# Run by `manage.py shell` against the private cluster: the test's key and host rows (copied), a user, and the
# experiment, submitted as the web tier submits it (its wake-up goes to the worker's queue).
SUBMIT = """
import os
from django.contrib.auth import get_user_model
from django.core import serializers
from workers.run.database import db
from workers.tests.run.simruns import queue_run, sim_config
for row in serializers.deserialize("json", os.environ["OPS_ROWS"]):
    row.save()
host = row.object
owner = get_user_model().objects.create_user("owner")
run = queue_run(host, sim_config(host, env={"SIMHOST_LOAD_SECONDS": "2"}), owner, name="postgres-restart")
print(run.pk)
"""


def _manage(*argv: str, env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "manage.py", *argv], cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _copy_test_database(cluster: PrivatePostgres) -> None:
    """The test database (migrated, with the rows post_migrate writes and this test's own) copied into the cluster:
    ~1 s of pg_dump and psql, where `manage.py migrate` took ~10 s (4 CPU-seconds in its client alone)."""
    db = connection.settings_dict
    where = [f"--host={db['HOST']}"] if db["HOST"] else []
    where += [f"--port={db['PORT']}"] if db["PORT"] else []
    dump = subprocess.run(
        ["pg_dump", *where, f"--username={db['USER']}", "--no-owner", "--no-privileges", db["NAME"]],
        capture_output=True,
        check=True,
    )
    subprocess.run(
        ["psql", "--quiet", "--set=ON_ERROR_STOP=1", cluster.url], input=dump.stdout, capture_output=True, check=True
    )


def test_it_finishes_a_run_across_a_postgresql_restart(
    sim_host, private_postgres, private_queue, start_worker, tmp_path
):
    env = {
        **os.environ,
        "DATABASE_URL": private_postgres.url,
        "SECRET_KEY": "test-only",
        "SPECDASH_QUEUE": private_queue,
    }
    _copy_test_database(private_postgres)
    env["OPS_ROWS"] = serializers.serialize("json", [sim_host.ssh_key, sim_host])
    run_id = int(_manage("shell", "-c", SUBMIT, env=env).split()[-1])
    log_path = tmp_path / "worker.log"
    start_worker(private_queue, "pg", log_path, DATABASE_URL=private_postgres.url)

    def state() -> str:
        return private_postgres.query("SELECT state FROM experiments_run WHERE id = %s", run_id)[0][0]

    deadline = time.monotonic() + 60
    while state() != Run.State.LOADING and time.monotonic() < deadline:
        time.sleep(0.1)
    assert state() == Run.State.LOADING
    private_postgres.stop()
    time.sleep(2)  # the worker beats every second and stores log lines as the server loads: it meets the outage
    private_postgres.start()
    deadline = time.monotonic() + 60
    while state() not in FINISHED and time.monotonic() < deadline:
        time.sleep(0.2)

    ((final, failure, log_lines, log_path_on_host),) = private_postgres.query(
        "SELECT state, failure_message, log_lines, log_path FROM experiments_run WHERE id = %s", run_id
    )
    assert final == Run.State.SUCCEEDED, failure
    assert "database unreachable" in log_path.read_text()  # the run met the outage
    chunks = private_postgres.query(
        "SELECT first_line, line_count FROM experiments_logchunk WHERE run_id = %s ORDER BY first_line", run_id
    )
    assert [first for first, _ in chunks] == [1 + sum(n for _, n in chunks[:i]) for i in range(len(chunks))]
    assert log_lines == sum(n for _, n in chunks) == len(lines_on_host(Run(log_path=log_path_on_host)))


# The experiment of a longer outage: two launches whose benchmark (two concurrencies, two passes) lasts a few
# seconds, so the outage meets a run while it stores its measurements.
SUBMIT_EXPERIMENT = """
import os
from django.contrib.auth import get_user_model
from django.core import serializers
from experiments.actions.audit import Actor
from experiments.actions.experiments import do_create_experiment
from experiments.models import BenchmarkProfile
from workers.tests.run.simruns import SMALL_PROFILE, sim_config
for row in serializers.deserialize("json", os.environ["OPS_ROWS"]):
    row.save()
host = row.object
owner = get_user_model().objects.create_user("owner")
profile = BenchmarkProfile(name="p", **{**SMALL_PROFILE, "concurrency": [1, 2], "num_prompts": 4, "output_len": 32,
                                        "passes": 2, "launches": 2})
experiment = do_create_experiment(actor=Actor(owner), name="postgres-outage", host=host,
                                  baseline=sim_config(host), candidates=[], profile=profile)
print(*experiment.run_set.order_by("sequence").values_list("pk", flat=True))
"""


def test_it_finishes_every_run_of_an_experiment_across_a_postgresql_outage_longer_than_its_window(
    sim_host, private_postgres, private_queue, start_worker, tmp_path
):
    env = {
        **os.environ,
        "DATABASE_URL": private_postgres.url,
        "SECRET_KEY": "test-only",
        "SPECDASH_QUEUE": private_queue,
    }
    _copy_test_database(private_postgres)
    env["OPS_ROWS"] = serializers.serialize("json", [sim_host.ssh_key, sim_host])
    run_ids = [int(pk) for pk in _manage("shell", "-c", SUBMIT_EXPERIMENT, env=env).split()[-2:]]
    log_path = tmp_path / "worker.log"
    # The run's writes wait 2 s for the database, less than the outage: its worker leaves it, and the beat hands it
    # to a worker (here the same one) once the database is back and its heartbeat is stale.
    outage_env = {"SPECDASH_DB_OUTAGE_WINDOW": "2", "SPECDASH_HEARTBEAT_STALE": "3", "SPECDASH_REATTACH_EVERY": "1",
                  "SPECDASH_WAKE_EVERY": "1"}  # fmt: skip
    worker = start_worker(private_queue, "pg", log_path, beat_schedule=tmp_path / "beat", concurrency=2,
                          DATABASE_URL=private_postgres.url, **outage_env)  # fmt: skip

    def states() -> list[str]:
        rows = dict(private_postgres.query("SELECT id, state FROM experiments_run WHERE id = ANY(%s)", run_ids))
        return [rows[pk] for pk in run_ids]

    deadline = time.monotonic() + 60
    while states()[0] != Run.State.BENCHMARKING and time.monotonic() < deadline:
        time.sleep(0.1)
    assert states()[0] == Run.State.BENCHMARKING
    private_postgres.stop()
    _wait_for_log(log_path, "leaving it for a worker to re-attach", timeout=30)
    private_postgres.start()
    back_at = time.monotonic()
    deadline = time.monotonic() + 90
    while not set(states()) <= FINISHED and time.monotonic() < deadline:
        time.sleep(0.2)
    recovered_after = time.monotonic() - back_at

    runs = private_postgres.query(
        "SELECT id, state, failure_message FROM experiments_run WHERE id = ANY(%s) ORDER BY sequence", run_ids
    )
    assert [state for _, state, _ in runs] == [Run.State.SUCCEEDED] * 2, runs
    # Every cell of every run was measured once: 2 passes x 2 concurrencies, none lost or stored twice.
    cells = private_postgres.query(
        "SELECT run_id, pass_index, concurrency, count(*) FROM experiments_measurement WHERE run_id = ANY(%s) "
        "GROUP BY run_id, pass_index, concurrency",
        run_ids,
    )
    assert sorted((run, p, c, n) for run, p, c, n in cells) == [
        (run, p, c, 1) for run in sorted(run_ids) for p in range(2) for c in (1, 2)
    ]
    log = log_path.read_text()
    assert re.search(rf"run {run_ids[0]}: re-attached in state", log), log[-3000:]
    assert worker.poll() is None and "Unrecoverable error" not in log
    print(f"PostgreSQL outage: the experiment finished {recovered_after:.1f} s after the database was back")


def test_it_raises_the_error_of_a_working_connection_at_once():
    # Only a connection that is gone is waited for; a query the database refused is the caller's error.
    def timed_out_query() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SET statement_timeout = 50")
            cursor.execute("SELECT pg_sleep(5)")

    async def main() -> None:
        try:
            await db(timed_out_query)()
        finally:
            await db(connections.close_all)()

    started = time.monotonic()
    with pytest.raises(OperationalError, match="statement timeout"):
        asyncio.run(main())
    assert time.monotonic() - started < 3
