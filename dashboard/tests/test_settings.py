"""The settings as an operator meets them: parsed from the environment, checked, and booted in production mode
(`manage.py check --deploy`, migrate, daphne serving HTTPS-only pages behind a proxy)."""

from __future__ import annotations

import os
import re
import secrets
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from dashboard.checks import (
    allowlist_entry_error,
    check_host_allowlist,
    check_log_batch_gap,
    check_production,
    check_removed_settings,
    check_secret_key_file,
    check_server_metrics_interval,
)
from simhost.ports import free_port, wait_for_port

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "dashboard" / "deploy"
STRONG_KEY = secrets.token_urlsafe(50)
# For commands that never connect (`check`): production mode warns on SQLite.
UNREACHED_DATABASE = "postgres://specdash@db.invalid:5432/specdash"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A clean environment: nothing of this test run's own settings leaks into the child, except the database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECDASH_", "DJANGO_"))}
    env.pop("SECRET_KEY", None)
    env.pop("DEBUG", None)
    env["SPECDASH_VAR_DIR"] = str(tmp_path)
    env.update(extra)
    return env


def _example_env() -> dict[str, str]:
    """dashboard/deploy/specdash.env.example, as systemd's EnvironmentFile= reads it."""
    lines = (DEPLOY / "specdash.env.example").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line.strip() and not line.startswith("#"))


def _production_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The deploy example's environment, pointed at this machine: a real key, a scratch state directory."""
    example = _example_env()
    example.update(SECRET_KEY=STRONG_KEY, SPECDASH_VAR_DIR=str(tmp_path), SPECDASH_SSH_KEY_DIR=str(tmp_path / "ssh"))
    example.update(REDIS_URL=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"), DATABASE_URL=UNREACHED_DATABASE)
    return _env(tmp_path, **{**example, **extra})


def _server_env(env: dict[str, str]) -> dict[str, str]:
    """What the `server_process` fixture should set on top of this run's own environment."""
    return {key: value for key, value in env.items() if key in _example_env() or key.startswith("SPECDASH_")}


def _unit_argv(unit: str, port: int = 0) -> list[str]:
    """The ExecStart= of a deploy unit, run from this checkout's virtualenv."""
    (line,) = [line for line in (DEPLOY / unit).read_text().splitlines() if line.startswith("ExecStart=")]
    # systemd expands its specifiers first (%H: the host name).
    line = line.replace("%H", socket.gethostname()).replace("%%", "%")
    argv = line.removeprefix("ExecStart=").split()
    program = Path(argv[0]).name
    argv = [sys.executable, "-m", program, *argv[1:]]
    if port:
        argv[argv.index("-p") + 1] = str(port)
    return argv


def _manage(*args: str, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=check,
    )


def _settings_value(name: str, env: dict[str, str]) -> str:
    code = f"from dashboard import settings; print(repr(settings.{name}))"
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True
    ).stdout.strip()


def _test_database_url() -> str:
    from django.conf import settings
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("a separate process needs a shared database: run with PostgreSQL")
    db = settings.DATABASES["default"]
    return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


def test_it_parses_the_host_allowlist_into_a_tuple_of_entries(tmp_path):
    listed = " 10.0.0.0/8, gpu-1.example.com ,,fd00::/8 "

    assert _settings_value("SPECDASH_HOST_ALLOWLIST", _env(tmp_path, SPECDASH_HOST_ALLOWLIST=listed)) == repr(
        ("10.0.0.0/8", "gpu-1.example.com", "fd00::/8")
    )
    assert _settings_value("SPECDASH_HOST_ALLOWLIST", _env(tmp_path)) == repr(("127.0.0.0/8", "::1/128", "localhost"))
    # Production mode starts with no host at all until an operator lists them.
    assert _settings_value("SPECDASH_HOST_ALLOWLIST", _env(tmp_path, SPECDASH_PRODUCTION="1")) == "()"


@pytest.mark.parametrize(
    "entry", ["127.0.0.0/8", "::1/128", "10.1.2.3", "fd00::1", "localhost", "gpu-1.example.com", "GPU-2.lab.", "h100"]
)
def test_it_accepts_networks_addresses_and_host_names_in_the_allowlist(entry, settings):
    settings.SPECDASH_HOST_ALLOWLIST = (entry,)

    assert allowlist_entry_error(entry) is None
    assert check_host_allowlist(None) == []


@pytest.mark.parametrize(
    "entry", ["10.0.0.0/33", "10.0.0.300", "1.2.3", "*.example.com", "gpu_1", "-gpu", "a b", "fd00::/129", "host:22"]
)
def test_it_refuses_an_unparsable_allowlist_entry_loudly(entry, settings):
    settings.SPECDASH_HOST_ALLOWLIST = ("127.0.0.0/8", entry)

    (error,) = check_host_allowlist(None)

    assert error.id == "specdash.E101"
    assert repr(entry) in error.msg
    assert error.is_serious()


def test_it_warns_when_production_lists_no_host(settings):
    settings.PRODUCTION, settings.SPECDASH_HOST_ALLOWLIST = True, ()

    assert [w.id for w in check_host_allowlist(None)] == ["specdash.W101"]


@pytest.mark.parametrize(("interval", "refused"), [(0, False), (50, False), (10_000, False), (10, True), (-1, True)])
def test_it_refuses_a_server_metrics_interval_the_benchmark_client_would_refuse(interval, refused, settings):
    settings.SPECDASH_SERVER_METRICS_MS = interval

    assert [e.id for e in check_server_metrics_interval(None)] == (["specdash.E120"] if refused else [])


@pytest.mark.parametrize(("gap", "refused"), [(0.0, False), (0.02, False), (0.5, False), (-0.1, True), (2.0, True)])
def test_it_refuses_a_log_batch_gap_that_would_hold_live_lines(gap, refused, settings):
    settings.SPECDASH_LOG_BATCH_GAP = gap

    assert [e.id for e in check_log_batch_gap(None)] == (["specdash.E121"] if refused else [])


def test_it_warns_about_a_setting_that_is_no_longer_read(monkeypatch):
    monkeypatch.delenv("SPECDASH_LOG_BATCH_SECONDS", raising=False)
    assert check_removed_settings(None) == []

    monkeypatch.setenv("SPECDASH_LOG_BATCH_SECONDS", "0.1")
    (warning,) = check_removed_settings(None)
    assert warning.id == "specdash.W130" and "SPECDASH_LOG_BATCH_GAP" in warning.hint


def test_it_refuses_debug_in_production_mode(settings):
    settings.PRODUCTION, settings.DEBUG = True, True

    assert "specdash.E102" in [e.id for e in check_production(None)]


def test_it_warns_about_a_secret_key_file_others_can_read(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    (tmp_path / "secret_key").write_text("k" * 60)
    (tmp_path / "secret_key").chmod(0o644)
    assert [w.id for w in check_secret_key_file(None)] == ["specdash.W102"]

    (tmp_path / "secret_key").chmod(0o600)
    assert check_secret_key_file(None) == []


def _make_secret_key(var_dir: Path) -> Path:
    target = var_dir / "secret_key"
    subprocess.run(
        ["make", "-s", "--no-print-directory", f"PY={sys.executable}", f"SPECDASH_VAR_DIR={var_dir}", str(target)],
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    return target


def test_it_writes_the_demo_secret_key_for_its_owner_only(tmp_path):
    key = _make_secret_key(tmp_path / "var")

    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert len(key.read_text().strip()) >= 50
    assert not list(key.parent.glob("*.tmp"))


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_it_runs_manage_commands_after_make_demo_without_exporting_the_key(tmp_path, django_user_model):
    from experiments.models import ApiToken

    key = _make_secret_key(tmp_path)
    env = _env(tmp_path, DATABASE_URL=_test_database_url())
    django_user_model.objects.create_user("alice")

    shell = _manage("shell", "-c", "from django.conf import settings; print(settings.SECRET_KEY)", env=env)
    token = _manage("create_api_token", "alice", env=env).stdout.strip()
    _manage("createsuperuser", "--noinput", "--username", "root", "--email", "root@example.com",
            env={**env, "DJANGO_SUPERUSER_PASSWORD": "a-long-root-password"})  # fmt: skip

    assert shell.stdout.strip().splitlines()[-1] == key.read_text().strip()
    assert ApiToken.objects.matching(token).filter(user__username="alice").exists()
    assert django_user_model.objects.get(username="root").is_superuser


@pytest.mark.integration
def test_it_refuses_to_start_without_a_key_when_there_is_no_key_file(tmp_path):
    result = _manage("check", env=_env(tmp_path), check=False)

    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr


@pytest.mark.integration
def test_it_passes_check_deploy_in_production_mode(tmp_path):
    env = _production_env(tmp_path)

    result = _manage("check", "--deploy", "--fail-level", "WARNING", env=env, check=False)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout
    assert "WARNING" not in result.stderr + result.stdout


@pytest.mark.integration
def test_it_fails_check_deploy_on_a_bad_allowlist_or_debug(tmp_path):
    env = _production_env(tmp_path)
    bad = _manage("check", env={**env, "SPECDASH_HOST_ALLOWLIST": "10.0.0.0/33"}, check=False)
    debug = _manage("check", env={**env, "DEBUG": "1"}, check=False)

    assert bad.returncode != 0 and "specdash.E101" in bad.stderr and "'10.0.0.0/33'" in bad.stderr
    assert debug.returncode != 0 and "specdash.E102" in debug.stderr


def _get(url: str, **headers: str) -> tuple[int, dict[str, str], str]:
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(urllib.request.Request(url, headers=headers), timeout=30) as response:
            return response.status, dict(response.headers), response.read().decode(errors="replace")
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), ""


@pytest.mark.integration
@pytest.mark.django_db
def test_it_serves_https_only_pages_in_production_behind_a_proxy(tmp_path, server_process):
    # The deploy example's environment and the web unit's own command line, on this machine's test database.
    env = _production_env(tmp_path, DATABASE_URL=_test_database_url())
    _manage("collectstatic", "--noinput", env=env)
    migrations = _manage("migrate", "--check", env=env, check=False)
    assert migrations.returncode == 0, migrations.stdout + migrations.stderr

    port = free_port()
    process = server_process(_unit_argv("specdash-web.service", port), tmp_path / "daphne.log", **_server_env(env))
    wait_for_port(port, timeout=30, process=process)
    base = f"http://127.0.0.1:{port}"
    proxied = {"Host": "specdash.example.com", "X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.7"}

    status, headers, page = _get(f"{base}/login/", **proxied)

    assert status == 200, (tmp_path / "daphne.log").read_text()[-3000:]
    assert headers["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains"
    assert "default-src 'self'" in headers["Content-Security-Policy"]
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["X-Frame-Options"] == "DENY"
    assert "Secure" in headers["Set-Cookie"] and "csrftoken=" in headers["Set-Cookie"]
    # Static files come from collectstatic, under hashed names that browsers may keep for good.
    (stylesheet,) = re.findall(r'href="(/static/specdash\.[0-9a-f]{12}\.css)"', page)
    status, headers, _ = _get(f"{base}{stylesheet}", **proxied)
    assert status == 200 and "immutable" in headers["Cache-Control"]
    # Plain http is sent to https, and a request for a host not in ALLOWED_HOSTS is refused.
    status, headers, _ = _get(f"{base}/login/", Host="specdash.example.com")
    assert (status, headers["Location"]) == (301, "https://specdash.example.com/login/")
    assert _get(f"{base}/login/", **{**proxied, "Host": "evil.example"})[0] == 400


@pytest.mark.integration
@pytest.mark.django_db
def test_it_starts_the_worker_with_the_beat_from_its_unit(tmp_path, server_process, private_queue):
    env = _production_env(tmp_path, DATABASE_URL=_test_database_url())
    argv = _unit_argv("specdash-worker-beat.service")
    argv[argv.index("--schedule") + 1] = str(tmp_path / "celerybeat-schedule")
    log = tmp_path / "worker.log"

    # With Django's system checks at start, as deployed (the suite's other workers skip them).
    process = server_process(argv, log, **_server_env(env), SPECDASH_QUEUE=private_queue, CELERY_SKIP_CHECKS="")

    deadline = time.monotonic() + 60
    while "ready." not in log.read_text() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    text = log.read_text()
    assert "ready." in text and "beat: Starting" in text, text[-3000:]
    assert private_queue in text  # it consumes the queue specdash.env names


def test_it_gives_two_deployments_on_one_redis_their_own_queue_and_channels(tmp_path):
    """Two checkouts (two databases) never take each other's tasks or see each other's broadcasts by default."""

    def names(database_url: str, **extra: str) -> tuple[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("SPECDASH_QUEUE", "SPECDASH_CHANNEL_PREFIX")}
        env = {**env, "SECRET_KEY": "x", "DATABASE_URL": database_url, "SPECDASH_INSTANCE": "", **extra}
        return (
            _settings_value("CELERY_TASK_DEFAULT_QUEUE", env),
            _settings_value("CHANNEL_LAYERS['default']['CONFIG']['prefix']", env),
        )

    first = names(f"sqlite:///{tmp_path}/one.sqlite3")
    second = names(f"sqlite:///{tmp_path}/two.sqlite3")
    again = names(f"sqlite:///{tmp_path}/one.sqlite3")
    named = names(f"sqlite:///{tmp_path}/two.sqlite3", SPECDASH_INSTANCE="lab")

    assert first == again
    assert first[0] != second[0] and first[1] != second[1]
    assert named == ("'specdash-lab'", "'specdash-lab'")
