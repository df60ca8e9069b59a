"""Shared fixtures: the owner/member/outsider users, a real OpenSSH sshd on loopback serving the simulated GPU
host, and a real Celery worker process sharing the test database."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from simhost import hostsetup
from simhost.ports import free_port, wait_for_port


@pytest.fixture(scope="session", autouse=True)
def _hypothesis_regex_support_imported_before_any_test() -> None:
    """Hypothesis imports its regex support lazily, at the first draw from a `from_regex` strategy, deep inside its
    own recursion, and pytest's assertion rewriter (hypothesis being a plugin) parses that module right there, mid-
    test. Under load, CPython 3.11.7's `ast.parse` failed there once ("SystemError: AST constructor recursion depth
    mismatch": a FlakyFailure of test_launch_safety.py on whichever xdist worker drew from one first). Imported here,
    once, at a shallow stack before the first test (not at conftest import, which hypothesis warns against)."""
    from hypothesis import strategies

    strategies.from_regex("a", fullmatch=True).validate()


REPO = Path(__file__).resolve().parent
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"

# Every process this test session starts carries this variable: the children of this process inherit it, and the
# test sshd sets it for every command it runs (so the simulated servers launched over SSH carry it too). At the end
# of the session, any process still carrying it is a leak: it is killed and the session fails, naming it.
SESSION_MARKER = "SPECDASH_TEST_SESSION"
LEAK_GRACE_SECONDS = 15.0


def pytest_configure(config) -> None:
    os.environ.setdefault(SESSION_MARKER, uuid.uuid4().hex)
    if os.getpriority(os.PRIO_PROCESS, 0) < SUITE_NICENESS:
        os.setpriority(os.PRIO_PROCESS, 0, SUITE_NICENESS)  # the simulated GPU host comes first (see sshd)
    if not config.pluginmanager.hasplugin("django"):
        return  # the pure suites (simhost, benchclient) also run without Django: `-p no:django`
    from django.conf import settings

    on_postgresql = "postgresql" in settings.DATABASES["default"]["ENGINE"]
    if on_postgresql:
        _flush_by_delete()
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        # Parallel workers each have their own test database (pytest-django names it after the worker), so run
        # ids repeat across workers: their broadcasts and queues must not meet in the shared Redis either.
        settings.SPECDASH_INSTANCE = f"{settings.SPECDASH_INSTANCE}-{worker}"
        settings.CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] = f"specdash-{settings.SPECDASH_INSTANCE}"
        settings.CELERY_TASK_DEFAULT_QUEUE = f"specdash-{settings.SPECDASH_INSTANCE}"
        if on_postgresql:
            config.pluginmanager.register(_TemplateDatabases, "specdash-template-databases")


def _flush_by_delete() -> None:
    """After each transactional test Django empties every table (`flush`) and then runs post_migrate again, which
    re-creates the content types, the permissions and the role groups. On PostgreSQL the emptying is one TRUNCATE of
    every table: a new file per table, ~0.16 CPU-seconds of the server's per test, where DELETEs of the few rows a
    test wrote cost ~0.004. The DELETEs run in the flush's own transaction, and Django's foreign keys on PostgreSQL
    are deferred, so their order does not matter. A flush that resets sequences (or cascades) truncates, as Django
    does."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences or allow_cascade:
            return truncate(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        delete = f"{style.SQL_KEYWORD('DELETE')} {style.SQL_KEYWORD('FROM')}"
        return [f"{delete} {self.quote_name(table)};" for table in tables]

    DatabaseOperations.sql_flush = sql_flush  # type: ignore[method-assign]


def _shares_module_fixture(item: pytest.Item) -> bool:
    fixture_info = getattr(item, "_fixtureinfo", None)
    if fixture_info is None:
        return False
    return any(
        definition.scope in ("module", "class", "package")
        for definitions in fixture_info.name2fixturedefs.values()
        for definition in definitions
        if definition.baseid.startswith(item.nodeid.split("::", 1)[0])
    )


def pytest_collection_modifyitems(config, items) -> None:
    # The integration tests take seconds to minutes each, the rest milliseconds. xdist's work stealing first deals
    # the collection out in contiguous chunks, one per worker, and an idle worker then steals the *tail* of the
    # longest queue. So each chunk starts with its own share of the long tests (dealt round-robin, the `slow` ones
    # first), and the short tests fill the tails that idle workers steal: every worker starts on long tests at once,
    # instead of one worker holding all of them and the last few running alone at the end.
    # Long tests that share a module-scoped fixture (a whole experiment run once for several assertions) are dealt
    # together: split over two workers, each would build the fixture.
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        if item.get_closest_marker("integration") is not None:
            units.setdefault(item.module.__name__ if _shares_module_fixture(item) else item.nodeid, []).append(item)
    long_units = sorted(units.values(), key=lambda unit: unit[0].get_closest_marker("slow") is None)
    short_tests = [item for item in items if item.get_closest_marker("integration") is None]
    if workers < 2:
        items[:] = [item for unit in long_units for item in unit] + short_tests
        return
    chunks: list[list[pytest.Item]] = [
        [item for unit in long_units[index::workers] for item in unit] for index in range(workers)
    ]
    remaining = len(items)
    for index, chunk in enumerate(chunks):
        size = remaining // (workers - index)  # the sizes xdist's first deal gives, in its order
        remaining -= size
        take = max(0, size - len(chunk))
        chunk += short_tests[:take]
        del short_tests[:take]
    items[:] = [item for chunk in chunks for item in chunk] + short_tests


def _marked_processes(marker: str, name: str = SESSION_MARKER) -> list[tuple[int, str]]:
    """Live processes (not zombies) whose environment sets `name` to `marker`, with their command lines."""
    needle = f"{name}={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if state != "Z":
            found.append((int(entry.name), cmdline))
    return found


class _TemplateDatabases:
    """A plugin (the class itself, a namespace), registered on xdist workers over PostgreSQL only (pytest_configure),
    where it overrides pytest-django's `django_db_setup`: each worker's test database is cloned from one that the
    first worker to get here migrated (PostgreSQL copies a database from a template in a fraction of a second;
    migrating one took ~6 CPU-seconds, once per worker, on two cores). Anywhere else pytest-django's own setup runs,
    untouched (its --reuse-db and --no-migrations included)."""

    @pytest.fixture(scope="session")
    def django_db_setup(django_test_environment, django_db_blocker, django_db_modify_db_settings):
        from django.conf import settings
        from django.db import connection

        marker = os.environ[SESSION_MARKER]
        creation = connection.creation
        own = creation._get_test_db_name()  # the worker's name (pytest-django added its suffix)
        template = _template_database(marker)
        original = connection.settings_dict["NAME"]
        with django_db_blocker.unblock():
            with open(Path(tempfile.gettempdir()) / f"specdash-test-{marker}.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # one worker migrates the template; the others wait, then copy it
                if not _database_exists(connection, template):
                    connection.settings_dict["TEST"]["NAME"] = template
                    creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
                    connection.close()
                    connection.settings_dict["TEST"]["NAME"] = own
                    connection.settings_dict["NAME"] = original
                with creation._nodb_cursor() as cursor:
                    quote = connection.ops.quote_name
                    cursor.execute(f"DROP DATABASE IF EXISTS {quote(own)}")
                    cursor.execute(f"CREATE DATABASE {quote(own)} TEMPLATE {quote(template)}")
            settings.DATABASES["default"]["NAME"] = connection.settings_dict["NAME"] = own
        yield
        with django_db_blocker.unblock():
            creation.destroy_test_db(original, verbosity=0)


def _template_database(marker: str) -> str:
    return f"test_specdash_template_{marker[:12]}"


def _database_exists(connection, name: str) -> bool:
    with connection.creation._nodb_cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
        return cursor.fetchone() is not None


def _drop_template_database(config, marker: str) -> None:
    """The controller, once every worker has ended: the template the workers' databases were copied from."""
    from django.db import connection
    from pytest_django.plugin import blocking_manager_key

    if connection.vendor != "postgresql":
        return
    with config.stash[blocking_manager_key].unblock(), connection.creation._nodb_cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {connection.ops.quote_name(_template_database(marker))}")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus) -> None:
    """Fail the run if a process it started outlived it (on a GPU host, that is a zombie holding GPU memory)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # the controller checks once every worker has ended (workers' fixtures have stopped their own)
    marker = os.environ.get(SESSION_MARKER)
    if not marker:
        return
    plugins = session.config.pluginmanager
    is_controller = getattr(session.config, "workerinput", None) is None and plugins.hasplugin("xdist")
    if is_controller and plugins.hasplugin("django"):  # (not in the pure suites' `-p no:django` runs)
        _drop_template_database(session.config, marker)
    # A process told to stop may take a moment to go.
    leaked = _wait_for_no_processes(marker, SESSION_MARKER, timeout=LEAK_GRACE_SECONDS)
    if not leaked:
        return
    for pid, _ in leaked:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [f"{len(leaked)} process(es) started by the suite were still running at its end (now killed):"]
    lines += [f"  pid {pid}: {cmdline[:300]}" for pid, cmdline in leaked]
    if reporter is not None:
        reporter.write_line("")
        for line in lines:
            reporter.write_line(line, red=True, bold=True)
    else:
        print("\n".join(lines), file=sys.stderr)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(autouse=True)
def _tasks_out_of_a_session_workers_reach(request):
    """A transactional test commits its runs, and a run released or finished enqueues its host's next turn: a
    session worker that an earlier test on this process started would claim the test's runs behind its back (a
    claim the test makes then finds none). Unless the test works with that worker, its tasks go to a queue nobody
    reads."""
    if not _transactional(request) or "celery_worker_process" in request.fixturenames:
        yield
        return
    request.getfixturevalue("private_queue")
    yield
    if "live_web" in request.fixturenames and _SESSION_WORKER_PID is not None:
        # The web server enqueues on the session queue, which that worker reads: it would still be claiming,
        # failing and releasing the test's runs while the database is emptied (a TRUNCATE deadlocked with it).
        _take_the_tests_runs_back_from_the_session_worker()


def _transactional(request) -> bool:
    marker = request.node.get_closest_marker("django_db")
    return marker is not None and bool(marker.kwargs.get("transaction") or marker.args[:1] == (True,))


@pytest.fixture(autouse=True)
def _orm_thread_connection_closed(request):
    """Async tests and the worker's `db()` make their ORM calls in asgiref's one thread for thread-sensitive calls,
    whose database connection outlives the test unless the test closes it: at the session's end this process's
    test database then cannot be dropped ("being accessed by other users") when no later test happened to close
    it. Closed after each transactional test, in that thread (handed the call directly: a browser test's thread
    runs Playwright's event loop, so no coroutine can be run from it)."""
    yield
    if _transactional(request):
        from asgiref.sync import SyncToAsync
        from django.db import connections

        SyncToAsync.single_thread_executor.submit(connections.close_all).result()


_SESSION_WORKER_PID: int | None = None  # the session's `celery worker` process, once a test started it
WORKER_LET_GO_SECONDS = 60


def _take_the_tests_runs_back_from_the_session_worker() -> None:
    """Cancel the test's queued runs, ask the worker to stop those it claimed, and wait until it has let go of them
    and of the database. (Runs a test put in a live state itself, or drove in-process, are left as they are.)"""
    import time

    from django.db import connection
    from django.utils import timezone

    from experiments.models import Run

    Run.objects.filter(state=Run.State.QUEUED).update(
        state=Run.State.CANCELLED, cancel_requested=True, finished_at=timezone.now()
    )
    assert _SESSION_WORKER_PID is not None
    names = [f"{socket.gethostname()}:{pid}" for pid in _child_pids(_SESSION_WORKER_PID)]
    claimed = Run.objects.exclude(state__in=Run.TERMINAL_STATES).filter(worker__in=names)
    claimed.update(cancel_requested=True)
    deadline = time.monotonic() + WORKER_LET_GO_SECONDS
    busy: list = []
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pid, state, left(query, 120) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND state <> 'idle'"
            )
            busy = list(claimed.values_list("pk", "state", "worker")) + cursor.fetchall()
        if not busy:
            return
        time.sleep(0.1)
    pytest.fail(f"{WORKER_LET_GO_SECONDS} s after the test, the session worker still held its runs or database: {busy}")


def _child_pids(pid: int) -> list[int]:
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            children += [int(child) for child in (task / "children").read_text().split()]
    return children


@pytest.fixture(autouse=True)
def _fresh_channel_layer():
    """Each test gets its own channel layer, and one that leaves a receive in flight fails, named.

    The layer is a process-wide object whose receive lock belongs to the event loop of the first receive; a
    consumer still receiving when its test's loop closed left it locked, and every later websocket test of that
    worker then failed with "bound to a different event loop" (13 tests, none of them the culprit)."""
    from channels.layers import channel_layers

    channel_layers.backends.clear()
    yield
    layer = channel_layers.backends.get("default")
    channel_layers.backends.clear()
    in_flight = getattr(layer, "receive_count", 0)
    if in_flight:
        pytest.fail(f"the test left {in_flight} channel-layer receive(s) in flight (a websocket left connected?)")


def _user(django_user_model, username: str, role: str | None):
    from experiments.actions.audit import Actor
    from experiments.actions.users import do_set_role

    user = django_user_model.objects.create_user(username, password=f"{username}-pass")
    if role is not None:
        do_set_role(user, role, Actor.command())
    return django_user_model.objects.get(pk=user.pk)  # no cached permissions


@pytest.fixture
def owner(django_user_model):
    """The team's admin, who also owns what most tests create (the per-role tests use the fixtures below)."""
    return _user(django_user_model, "owner", "admin")


@pytest.fixture
def viewer(django_user_model):
    return _user(django_user_model, "viewer", "viewer")


@pytest.fixture
def member(django_user_model):
    return _user(django_user_model, "member", "member")


@pytest.fixture
def maintainer(django_user_model):
    return _user(django_user_model, "maintainer", "maintainer")


@pytest.fixture
def outsider(django_user_model):
    """Logged in, in no role: sees nothing."""
    return _user(django_user_model, "outsider", None)


@pytest.fixture
def owner_client(client, owner):
    client.force_login(owner)
    return client


class SSHServer:
    def __init__(self, root: Path, port: int, host_key: str, key_dir: Path, client_key_name: str, pid: int) -> None:
        self.root = root
        self.pid = pid
        self.port = port
        self.host_key = host_key
        self.key_dir = key_dir
        self.client_key_name = client_key_name
        self.username = os.environ.get("USER") or __import__("getpass").getuser()

    def access(self, **fields):
        """How a worker reaches this sshd with the test key (for tests that open a HostConnection themselves)."""
        from workers.ssh import HostAccess

        key_path = self.key_dir / self.client_key_name
        return HostAccess(name="sshd", address="127.0.0.1", port=self.port, username=self.username,
                          key_path=key_path, host_key=self.host_key, **fields)  # fmt: skip

    @contextlib.contextmanager
    def variant(self, name: str, **options: str):
        """This daemon's configuration with `options` overriding it (sshd's own `-o`), on a port of its own."""
        port = free_port()
        overrides = [f"-oPort={port}", f"-oPidFile={self.root / name}.pid", *(f"-o{k}={v}" for k, v in options.items())]
        command = [SSHD, "-D", "-e", "-f", str(self.root / "sshd_config"), *overrides]
        with open(self.root / f"{name}.log", "wb") as log:
            process = subprocess.Popen(command, stderr=log)
        try:
            wait_for_port(port, process=process)
            yield SSHServer(self.root, port, self.host_key, self.key_dir, self.client_key_name, process.pid)
        finally:
            process.terminate()
            process.wait(timeout=10)


@pytest.fixture(scope="session")
def sshd(tmp_path_factory) -> SSHServer:
    """A real OpenSSH daemon on a loopback port: the 'GPU host' of the integration tests."""
    if not Path(SSHD).exists():
        pytest.fail("OpenSSH sshd is not installed (apt-get install openssh-server); `make test` installs it.")
    root = tmp_path_factory.mktemp("sshd")
    key_dir = root / "keys"
    key_dir.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(root / "host_key")], check=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key_dir / "id_test")], check=True)
    (root / "authorized_keys").write_text((key_dir / "id_test.pub").read_text())
    port = free_port()
    home = root / "home"
    home.mkdir()
    config = root / "sshd_config"
    config.write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {root / 'host_key'}",
                f"AuthorizedKeysFile {root / 'authorized_keys'}",
                f"PidFile {root / 'sshd.pid'}",
                "PermitRootLogin prohibit-password",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                "StrictModes no",
                "AllowTcpForwarding yes",
                "MaxSessions 64",
                "MaxStartups 64",
                "Subsystem sftp internal-sftp",
                "LogLevel ERROR",
                # Bash sources ~/.bashrc for every command sshd runs; this machine's root .bashrc runs `pyenv init`
                # (~120 ms a command, a third of a simulated run). A GPU host's service account has no such rc.
                f"SetEnv HOME={home} {SESSION_MARKER}={os.environ[SESSION_MARKER]}",
                "",
            ]
        )
    )
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        [SSHD, "-D", "-e", "-f", str(config)], stderr=open(root / "sshd.log", "wb"), preexec_fn=_gpu_host_priority
    )
    try:
        wait_for_port(port, process=process)
        host_key = (root / "host_key.pub").read_text().strip()
        yield SSHServer(root, port, host_key, key_dir, "id_test", process.pid)
    finally:
        process.terminate()
        process.wait(timeout=10)


# A real GPU host is a machine of its own; here it shares two cores with the rest of the suite (browsers, the fuzzer,
# web servers, Celery workers). Every test process takes a lower CPU priority (pytest_configure), and the sshd, with
# what it starts (the simulated servers and the benchmark client), the normal one, so the suite's own load does not
# slow the simulated host's measurements, as no other tenant slows a real GPU host. Raising a priority takes root
# (which the suite's sshd needs anyway); without it both stay at the same, lower one.
SUITE_NICENESS = 5


def _gpu_host_priority() -> None:
    with contextlib.suppress(PermissionError):
        os.setpriority(os.PRIO_PROCESS, 0, 0)


def registered_key(sshd: SSHServer):
    """The test client key as an admin registers it: by name, bound to its file and public key."""
    from experiments.models import SshKey

    public_key = (sshd.key_dir / f"{sshd.client_key_name}.pub").read_text().split()
    key, _ = SshKey.objects.get_or_create(
        name="test-key", defaults={"file_name": sshd.client_key_name, "public_key": " ".join(public_key[:2])}
    )
    return key


# The simulated servers' loading and graph capture (SIMHOST_LOAD_SECONDS; 8 s by default, as a real host's take
# minutes): long enough to be seen loading, short enough for the suite's ~100 launches. A test that needs a server
# held in loading sets a longer one in its config's env.
SIM_LOAD_SECONDS = 0.2


@pytest.fixture
def sim_host(sshd, tmp_path, settings, task_queue):
    """A Host row for the simulated GPU host behind the real sshd, with its own GPU state and port."""
    from experiments.models import Host

    settings.SPECDASH_SSH_KEY_DIR = sshd.key_dir
    state_dir = tmp_path / "simhost-state"
    state_dir.mkdir()
    host = Host.objects.create(
        name=f"sim-{uuid.uuid4().hex[:6]}",
        address="127.0.0.1",
        port=sshd.port,
        username=sshd.username,
        ssh_key=registered_key(sshd),
        host_key=sshd.host_key,
        work_dir=str(tmp_path / "work"),
        models_root=str(hostsetup.MODELS_ROOT),
        shell_setup=hostsetup.shell_setup(state_dir, SIM_LOAD_SECONDS, hostsetup.FAST_HEALTH_POLL_SECONDS),
        launcher=hostsetup.LAUNCHER,
        vllm_launcher=hostsetup.VLLM_LAUNCHER,
        specforge_launcher=hostsetup.SPECFORGE_LAUNCHER,
        python="python",
        server_port=free_port(),
        gpu_inventory=[{"index": i, "name": "NVIDIA H200 (simulated)"} for i in range(8)],
        extra_env_prefixes=["SIMHOST_"],  # the simulated host's fault knobs, set in the tests' config envs
    )
    host.state_dir = state_dir  # type: ignore[attr-defined]  (tests read the simulated GPUs' registry)
    yield host
    # Every simulated server of this host carries its state dir: one still running after the test is a zombie
    # the run lifecycle left behind (a worker still tearing down gets a moment to finish).
    leaked = _wait_for_no_processes(str(state_dir), "SIMHOST_STATE_DIR", timeout=15.0)
    for pid, _ in leaked:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    if leaked:
        names = "\n".join(f"  pid {pid}: {cmdline[:200]}" for pid, cmdline in leaked)
        pytest.fail(f"{len(leaked)} simulated server process(es) outlived the test (now killed):\n{names}")


def _wait_for_no_processes(marker: str, name: str, timeout: float) -> list[tuple[int, str]]:
    import time

    deadline = time.monotonic() + timeout
    leaked = _marked_processes(marker, name)
    while leaked and time.monotonic() < deadline:
        time.sleep(0.2)
        leaked = _marked_processes(marker, name)
    return leaked


@pytest.fixture(scope="session")
def task_queue():
    """A Celery queue of this test session's own, so a demo worker on this machine never takes its tasks."""
    from dashboard.celery import app

    queue = f"specdash-test-{uuid.uuid4().hex[:8]}"
    app.conf.task_default_queue = queue
    yield queue
    # Tests that drive a run in-process still enqueue the host's next turn; leave nothing behind in Redis.
    import redis
    from django.conf import settings

    redis.Redis.from_url(settings.REDIS_URL).delete(queue)


def _shared_database_env(**extra: str) -> dict[str, str]:
    """The environment of a server process that must see the test database (which PostgreSQL allows)."""
    from django.conf import settings
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("a separate server process needs a shared database: run the integration tests with PostgreSQL")
    db = settings.DATABASES["default"]
    return {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "SECRET_KEY": settings.SECRET_KEY,
        # The instance this test process broadcasts and queues under (by default it derives from the database
        # name, which the test database's differs from).
        "SPECDASH_INSTANCE": settings.SPECDASH_INSTANCE,
        # A Celery worker runs Django's system checks as it starts (every URL and the API's schema imported: ~0.3
        # of its ~3 CPU-seconds; the suite starts dozens of workers). test_settings runs them (`manage.py check
        # --deploy`) and starts the deployed worker unit with them.
        "CELERY_SKIP_CHECKS": "1",
        **extra,
    }


def _start_server_process(argv: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen:
    return subprocess.Popen(
        argv, cwd=REPO, env=env, stdout=open(log_path, "wb"), stderr=subprocess.STDOUT, start_new_session=True
    )


def _stop_server_process(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@pytest.fixture
def private_queue():
    """A queue no worker listens to: for tests that drive runs in-process, so that a session worker started by
    another test cannot claim their runs behind their back (finishing a run enqueues the host's next turn)."""
    from dashboard.celery import app

    previous = app.conf.task_default_queue
    queue = f"specdash-private-{uuid.uuid4().hex[:8]}"
    app.conf.task_default_queue = queue
    yield queue
    app.conf.task_default_queue = previous
    import redis
    from django.conf import settings

    redis.Redis.from_url(settings.REDIS_URL).delete(queue)


@pytest.fixture
def server_process(django_db_setup):
    """Start server processes (workers, web) on the test database; whatever still runs is stopped after."""
    started: list[subprocess.Popen] = []

    def start(argv: list[str], log_path: Path, **extra_env: str) -> subprocess.Popen:
        process = _start_server_process(argv, _shared_database_env(**extra_env), log_path)
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            _stop_server_process(process)


def _celery_worker_argv(
    queue: str, *, concurrency: int, name: str = "", beat_schedule: Path | None = None
) -> list[str]:
    argv = [sys.executable, "-m", "celery", "-A", "dashboard", "worker", "--loglevel", "INFO",
            "--concurrency", str(concurrency), "--without-gossip", "--without-mingle", "--without-heartbeat",
            "-Q", queue]  # fmt: skip
    if name:
        argv += ["-n", f"{name}@%h"]
    if beat_schedule is not None:
        argv += ["--beat", "--schedule", str(beat_schedule)]
    return argv


@pytest.fixture(scope="session")
def celery_worker_process(django_db_setup, sshd, task_queue, tmp_path_factory):
    """A real `celery worker` process on the session's queue, connected to the test database."""
    env = _shared_database_env(SPECDASH_QUEUE=task_queue, SPECDASH_SSH_KEY_DIR=str(sshd.key_dir))
    global _SESSION_WORKER_PID
    log_path = tmp_path_factory.mktemp("celery") / "worker.log"
    process = _start_server_process(_celery_worker_argv(task_queue, concurrency=2), env, log_path)
    _SESSION_WORKER_PID = process.pid
    try:
        yield process, log_path
    finally:
        _SESSION_WORKER_PID = None
        _stop_server_process(process)


@pytest.fixture
def start_worker(server_process, sshd):
    """Start a `celery worker` of the test's own (a test that kills workers needs its own): on `queue`, named
    `name`, logging to `log_path`, with `concurrency` slots (one unless told), with the beat when `beat_schedule`
    is given; stopped after the test."""

    def start(
        queue: str, name: str, log_path: Path, *, beat_schedule: Path | None = None, concurrency: int = 1, **env: str
    ):
        argv = _celery_worker_argv(queue, concurrency=concurrency, name=name, beat_schedule=beat_schedule)
        return server_process(argv, log_path, SPECDASH_QUEUE=queue, SPECDASH_SSH_KEY_DIR=str(sshd.key_dir), **env)

    return start


@pytest.fixture(scope="session")
def live_web(django_db_setup, sshd, task_queue, tmp_path_factory):
    """The real ASGI server (daphne: HTTP and websockets) on a free port, sharing the test database."""
    env = _shared_database_env(SPECDASH_QUEUE=task_queue, SPECDASH_SSH_KEY_DIR=str(sshd.key_dir))
    port = free_port()
    argv = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "dashboard.asgi:application"]
    process = _start_server_process(argv, env, tmp_path_factory.mktemp("web") / "daphne.log")
    try:
        wait_for_port(port, timeout=30, process=process)
        yield f"http://127.0.0.1:{port}"
    finally:
        _stop_server_process(process)


@functools.cache
def _owner_password_hash() -> str:
    """A production hash of "owner-pass", made once: each PBKDF2 hash costs half a CPU-second, and any one checks."""
    from django.contrib.auth.hashers import make_password

    return make_password("owner-pass", hasher="pbkdf2_sha256")


@pytest.fixture
def browser_user(owner):
    """The owner, with a password the web server process can verify (it runs with the production hashers)."""
    owner.password = _owner_password_hash()
    owner.save(update_fields=["password"])
    return owner


@pytest.fixture
def log_in(live_web, browser_user):
    """Log a browser page in as the owner: by default with the session cookie a login makes (the session made here,
    in the database the web server shares); `through_form=True` types the password into the real login form (the
    web server then checks its PBKDF2 hash, half a CPU-second, and lands on the home page)."""
    from django.conf import settings
    from django.test import Client

    def go(page, *, through_form: bool = False) -> None:
        if through_form:
            page.goto(f"{live_web}/login/")
            page.fill("#id_username", "owner")
            page.fill("#id_password", "owner-pass")
            page.click("button[type=submit]")
            page.wait_for_url(f"{live_web}/")
            return
        client = Client()
        client.force_login(browser_user)
        cookie = client.cookies[settings.SESSION_COOKIE_NAME]
        page.context.add_cookies([{"name": cookie.key, "value": cookie.value, "url": live_web, "httpOnly": True}])

    return go


@pytest.fixture(scope="module")
def browser():
    """Headless Debian Chromium driven by Playwright (no browser download: the system binary)."""
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).exists():
        pytest.fail("Debian chromium is not installed (apt-get install chromium); `make test` installs it.")
    # Playwright's sync API runs an event loop in this thread; the tests' own ORM calls stay synchronous.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(
            executable_path=chromium,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        yield instance
        instance.close()
    if previous is None:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture(autouse=True)
def _fast_password_hashing(request):
    # The default hasher costs ~0.2 s per user; tests create many users and test no hashing strength.
    # PBKDF2 stays available for users that a separate web server process (browser tests) must verify.
    if not request.config.pluginmanager.hasplugin("django"):
        return  # the pure suites (simhost, benchclient) also run without Django: `-p no:django`
    request.getfixturevalue("settings").PASSWORD_HASHERS = [
        "django.contrib.auth.hashers.MD5PasswordHasher",
        "django.contrib.auth.hashers.PBKDF2PasswordHasher",
    ]


# ---- a webhook receiver (notification tests of the domain and of the worker's delivery) ----------------


class Receiver:
    def __init__(self, failures: int = 0, status: int = 200, location: str = "") -> None:
        self.bodies: list[dict] = []
        self.failures = failures
        self.status = status
        self.location = location

    def handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if receiver.failures > 0:
                    receiver.failures -= 1
                    self.send_response(503)
                elif receiver.location:
                    self.send_response(302)
                    self.send_header("Location", receiver.location)
                else:
                    receiver.bodies.append(json.loads(body))
                    self.send_response(receiver.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        return Handler


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    hook = Receiver()
    server = ThreadingHTTPServer(("127.0.0.1", 0), hook.handler())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield hook, f"http://127.0.0.1:{server.server_address[1]}/hooks/team"
    server.shutdown()
    server.server_close()
