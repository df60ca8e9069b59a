"""`make demo`: migrate, create the demo user, start the simulated GPU host's SSH endpoint, a Celery worker and
the ASGI web server, register the simulated host (pinning its key), seed a demo experiment, and keep everything
in the foreground until Ctrl-C, then stop every process it started.

The children write to var/log/; the terminal shows the URLs, each run's progress and the experiment's verdicts."""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import asyncssh
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from experiments import roles
from experiments.actions.audit import Actor
from experiments.actions.experiments import do_create_experiment
from experiments.actions.hosts import do_request_model_listing
from experiments.actions.runs import do_cancel_run
from experiments.actions.users import do_set_role
from experiments.analysis.explanations import MODEL_METRICS
from experiments.forms import ExperimentSubmission
from experiments.models import Experiment, Host, Run
from simhost import hostsetup, ports

from ... import host as demo_host
from ... import lock, suggestions
from ...history import seed_drift_history
from ...progress import DemoProgress

REPO = Path(settings.BASE_DIR)
DEMO_USER = "demo"
DEMO_HOST = "simhost"
# The children the demo starts again when they exit, and how often before it gives up.
RESTARTABLE = ("worker",)
MAX_RESTARTS, RESTART_WINDOW_S = 5, 600.0


def demo_experiment_payload(models_root: str) -> dict:
    target = f"{models_root}/{suggestions.TARGET}"
    draft = f"{models_root}/{suggestions.DRAFT}"

    def eagle(name: str, steps: int) -> dict:
        return {
            "name": name,
            "model_path": target,
            "tp_size": 8,
            "speculative_algorithm": "EAGLE3",
            "speculative_draft_model_path": draft,
            "speculative_num_steps": steps,
            "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": steps + 1,
            # EAGLE3_PROFILE makes the (simulated, like a patched real) server print its verify and draft times;
            # the log metrics turn them into the explanatory model on the comparison page.
            "env_text": "NCCL_PROTO=LL\nEAGLE3_PROFILE=1",
            # --enable-metrics: the server's counters give each cell's pooled accept length beside the requests'.
            "extra_args_text": "--mem-fraction-static 0.85 --enable-metrics",
            "expect": json.dumps({"env_propagated": ["NCCL_PROTO"]}),
            "log_metrics": json.dumps(MODEL_METRICS),
        }

    return {
        "experiment": {"name": "demo: EAGLE-3 2 vs 3 steps", "host": DEMO_HOST},
        "baseline": {"name": "baseline", "model_path": target, "tp_size": 8},
        "candidates": [eagle("eagle3-2step", 2), eagle("eagle3-3step", 3)],
        "profile": {
            "concurrency_text": "1, 4",
            "num_prompts": 8,
            "input_len": 128,
            "output_len": 128,
            "seed": 1,
            "passes": 3,
            "launches": 1,
            "warmup_requests": 1,
            "request_timeout_s": 600,
            "readiness_timeout_s": 600,
            "stall_timeout_s": 120,
        },
    }


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _wait_for_port(port: int, process: subprocess.Popen, what: str) -> None:
    try:
        ports.wait_for_port(port, timeout=30, process=process, what=what)
    except ports.PortNotOpen as exc:
        raise CommandError(str(exc)) from exc


def _start_time(pid: int) -> str | None:
    """When the process started (clock ticks since boot, /proc/<pid>/stat), or None once it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else fields[19]


def _ensure_key(path: Path) -> None:
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    key = asyncssh.generate_private_key("ssh-ed25519")
    key.write_private_key(str(path))
    key.write_public_key(str(path) + ".pub")
    path.chmod(0o600)


class Command(BaseCommand):
    help = "Run the zero-setup demo (web, worker, simulated GPU host) in the foreground until Ctrl-C."

    def handle(self, *args, **options):
        self.children_file = Path(settings.VAR_DIR) / "demo-children.json"
        web_port = int(os.environ.get("SPECDASH_PORT", "8000"))
        try:  # before anything is stopped: a live demo's children are not leftovers
            self.lock = lock.hold(Path(settings.VAR_DIR), web_port)
        except lock.DemoRunning as exc:
            raise CommandError(str(exc)) from None
        self._stop_leftover_children()
        ssh_port = int(os.environ.get("SPECDASH_SIMHOST_SSH_PORT", "2222"))
        server_port = int(os.environ.get("SPECDASH_SIMHOST_SERVER_PORT", "30000"))
        for port, what in ((web_port, "SPECDASH_PORT"), (ssh_port, "SPECDASH_SIMHOST_SSH_PORT")):
            if ports.port_in_use(port):
                raise CommandError(f"Port {port} ({what}) is already in use; stop what holds it or set {what}.")

        call_command("migrate", interactive=False, verbosity=0)
        self._ensure_demo_user()
        key_dir = Path(settings.SPECDASH_SSH_KEY_DIR)
        client_key, host_key = key_dir / "demo_id_ed25519", key_dir / "simhost_host_key"
        _ensure_key(client_key)
        _ensure_key(host_key)

        self.children: list[tuple[str, subprocess.Popen]] = []
        self.recorded: list[dict] = []  # what children_file holds: how to recognise them after a hard kill
        self.commands: dict[str, tuple[list[str], dict[str, str] | None]] = {}  # how each child was started
        self.restarts: dict[str, list[float]] = {}
        self.log_dir = Path(settings.VAR_DIR) / "log"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        signal.signal(signal.SIGTERM, _interrupt)
        signal.signal(signal.SIGINT, _interrupt)  # also when started in the background, where SIGINT is ignored
        try:
            sshd = self._start(
                "simhost-sshd",
                [
                    sys.executable,
                    "-m",
                    "simhost.sshd",
                    "--listen",
                    "127.0.0.1",
                    "--port",
                    str(ssh_port),
                    "--host-key",
                    str(host_key),
                    "--authorized-keys",
                    f"{client_key}.pub",
                ],
            )
            _wait_for_port(ssh_port, sshd, "The simulated host's sshd")
            self._register_host(ssh_port, server_port, client_key.name)
            # Before the worker starts: the seeded history's runs are all written by the time it looks.
            host = Host.objects.get(name=DEMO_HOST)
            payload = demo_experiment_payload(host.models_root)
            demo_user = get_user_model().objects.get(username=DEMO_USER)
            seeded = seed_drift_history(host, payload["baseline"], payload["profile"], demo_user)
            if seeded is not None:
                self.stdout.write(f"Seeded a nightly baseline history whose throughput drops: {seeded.name}")
            self._start(
                "worker",
                [
                    str(REPO / ".venv" / "bin" / "celery"),
                    "-A",
                    "dashboard",
                    "worker",
                    "--loglevel",
                    "INFO",
                    "--concurrency",
                    "2",
                    "--without-gossip",
                    "--without-mingle",
                    # The beat re-attaches runs whose worker died (workers.tasks.reattach_stale_runs).
                    "--beat",
                    "--schedule",
                    str(Path(settings.VAR_DIR) / "celerybeat-schedule"),
                ],
            )
            # The web server serves collected static files (hashed names cached for good, gzip), as production does.
            static_env = {**os.environ, "SPECDASH_STATIC_COLLECTED": "1"}
            subprocess.run(
                [sys.executable, "manage.py", "collectstatic", "--noinput", "--verbosity", "0"],
                cwd=REPO, env=static_env, check=True,
            )  # fmt: skip
            daphne = [str(REPO / ".venv" / "bin" / "daphne"), "-b", "127.0.0.1", "-p", str(web_port)]
            web = self._start("web", env=static_env, argv=[*daphne, "dashboard.asgi:application"])
            _wait_for_port(web_port, web, "The web server")
            experiment = self._seed_experiment()
            url = f"http://127.0.0.1:{web_port}/"
            self.stdout.write(self.style.SUCCESS(f"\nspecdash demo is running: {url}  (login: demo / demo)"))
            if experiment:
                self.stdout.write(f"Demo experiment: {url.rstrip('/')}{experiment.get_absolute_url()}")
            logs = ", ".join(str(self._log_path(name)) for name, _ in self.children)
            self.stdout.write(f"Logs: {logs}")
            self.stdout.write("Press Ctrl-C to stop web, worker and the simulated host.\n")
            progress = DemoProgress(self.stdout, experiment, url.rstrip("/"))
            while True:
                for name, child in list(self.children):
                    if child.poll() is not None:
                        self._restart_or_stop(name, child)
                progress.report()
                time.sleep(0.5)
        except KeyboardInterrupt:
            # A second signal right now (a SIGTERM sent to the whole group, say) must not escape as a traceback
            # once the clean-up below has run; the clean-up handles its own.
            with contextlib.suppress(KeyboardInterrupt):
                self.stdout.write("\nStopping ... (Ctrl-C again to stop at once)")
        finally:
            self._clean_up()

    def _clean_up(self) -> None:
        """Cancel live runs (their servers torn down by the worker), then stop every child. A second Ctrl-C or a
        SIGTERM cuts the first part short, never the second: a child left running would hold its port."""
        hurry = False
        try:
            self._cancel_live_runs()
        except KeyboardInterrupt:
            self.stdout.write("Interrupted again: stopping everything now.")
            hurry = True
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            self._stop_children(grace=2 if hurry else 15)
            if hurry:
                self._kill_leftover_servers()  # the worker had no time to tear them down
            self.children_file.unlink(missing_ok=True)
            self.stdout.write("Stopped.")

    def _stop_leftover_children(self) -> None:
        """An earlier demo of this checkout that was killed hard (SIGKILL, a closed terminal) left its children
        running: stop those, recognised by process group and command line, so their ports are free again."""
        try:
            recorded = json.loads(self.children_file.read_text())
        except (OSError, ValueError):
            return
        stopped = []
        for entry in recorded if isinstance(recorded, list) else []:
            pgid = entry.get("pgid")
            # The same pid and start time: that very process (a title it set or a reused pid cannot fool this).
            if isinstance(pgid, int) and _start_time(pgid) is not None and _start_time(pgid) == entry.get("started"):
                self.stdout.write(f"Stopping {entry.get('name')} left running by an earlier demo (pid {pgid}).")
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGKILL)
                stopped.append(pgid)
        deadline = time.monotonic() + 10
        while any(_start_time(pgid) for pgid in stopped) and time.monotonic() < deadline:
            time.sleep(0.1)  # gone from the process table: their ports are free
        if stopped:
            self._kill_leftover_servers()  # its worker died with it: nobody else tears its servers down
        self.children_file.unlink(missing_ok=True)

    def _kill_leftover_servers(self) -> None:
        """Servers of a demo that was killed hard, or cut short, still run (and hold simulated GPUs): the demo's host
        is this machine, and its servers are known by their state dir (loading ones too) and by the GPU registry."""
        state_dir = Path(settings.VAR_DIR) / "simhost-state"
        env = {**os.environ, "SIMHOST_STATE_DIR": str(state_dir)}
        query = [str(REPO / "simhost" / "bin" / "nvidia-smi"), "--query-compute-apps=pid", "--format=csv,noheader"]
        result = subprocess.run(query, env=env, capture_output=True, text=True, check=False)
        pids = {int(p) for p in result.stdout.split() if p.strip().isdigit()} | set(hostsetup.processes_of(state_dir))
        own_group = os.getpgid(0)
        for pid in pids - {os.getpid()}:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                group = os.getpgid(pid)
                if group != own_group:  # never this demo itself (nor the shell that started it)
                    os.killpg(group, signal.SIGKILL)

    def _cancel_live_runs(self, timeout: float = 30) -> None:
        """Let the worker tear down what runs now, so no simulated server outlives the demo."""
        live = Run.objects.filter(host__name=DEMO_HOST).exclude(state__in=Run.TERMINAL_STATES)
        if not live.exists():
            return
        self.stdout.write("Cancelling live runs (the worker tears their servers down) ...")
        for run in live:
            do_cancel_run(run, Actor.command())
        deadline = time.monotonic() + timeout
        while live.exists() and time.monotonic() < deadline:
            time.sleep(0.5)

    def _log_path(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def _start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        # Each child leads its own process group so that stopping it also stops what it spawned.
        with self._log_path(name).open("ab") as log:
            child = subprocess.Popen(
                argv, cwd=REPO, env=env, start_new_session=True, stdout=log, stderr=subprocess.STDOUT
            )
        self.children.append((name, child))
        self.commands[name] = (argv, env)
        self.recorded.append({"name": name, "pgid": child.pid, "started": _start_time(child.pid)})
        partial = self.children_file.with_suffix(".partial")  # then renamed into place: never read half-written
        partial.write_text(json.dumps(self.recorded))
        os.replace(partial, self.children_file)
        return child

    def _restart_or_stop(self, name: str, child: subprocess.Popen) -> None:
        """A worker that exits is started again: a broker that restarts can take a Celery worker down with it, and
        its runs are not lost (the new worker's beat re-attaches them, queued runs wait their turn). Anything else
        exiting, or a worker exiting again and again, stops the demo with the end of its log."""
        tail = "".join(self._log_path(name).read_text(errors="replace").splitlines(True)[-15:])
        now = time.monotonic()
        recent = [at for at in self.restarts.get(name, []) if now - at < RESTART_WINDOW_S]
        if name in RESTARTABLE and len(recent) < MAX_RESTARTS:
            self.restarts[name] = [*recent, now]
            self.stdout.write(self.style.WARNING(f"The {name} exited with code {child.returncode}; starting it again."))
            self.children.remove((name, child))
            argv, env = self.commands[name]
            self._start(name, argv, env)
            return
        raise CommandError(
            f"The {name} exited with code {child.returncode}; stopping the demo. "
            f"The end of {self._log_path(name)}:\n{tail}"
        )

    def _stop_children(self, grace: float = 15) -> None:
        for _, child in reversed(self.children):
            if child.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for _, child in reversed(self.children):
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.pid, signal.SIGKILL)
                child.wait()

    def _ensure_demo_user(self) -> None:
        """The demo's one user: the team's admin (roles.py), so every page and action can be tried."""
        user, _ = get_user_model().objects.get_or_create(username=DEMO_USER)
        # Past the password validators, which demo/demo fails: a local demo's printed login (docs/team.md).
        user.set_password(DEMO_USER)
        user.save()
        do_set_role(user, roles.ADMIN, Actor.command())

    def _register_host(self, ssh_port: int, server_port: int, key_name: str) -> None:
        var = Path(settings.VAR_DIR)
        call_command(
            "register_host",
            DEMO_HOST,
            address="127.0.0.1",
            port=ssh_port,
            user=getpass.getuser(),
            key_name=key_name,
            work_dir=str(var / "simhost-work"),
            models_root=str(hostsetup.MODELS_ROOT),
            draft_training_dir=[str(hostsetup.MODELS_ROOT / suggestions.TRAINING_DIR)],
            shell_setup=demo_host.shell_setup(var),
            **hostsetup.LAUNCHERS,
            python="python",
            server_port=server_port,
            repin=True,  # our own sshd on loopback; its key is pinned afresh at each registration
            extra_env_prefix=["SIMHOST_"],  # the demo's configs steer the simulator (load time, faults)
        )
        # The new-experiment form suggests the host's models as a worker last listed them: list them now (the
        # worker picks the request up once it has started).
        do_request_model_listing(Host.objects.get(name=DEMO_HOST), Actor.command())

    def _seed_experiment(self) -> Experiment | None:
        host = Host.objects.get(name=DEMO_HOST)
        # A host left dirty or locked by an earlier demo that was killed hard would block the new runs.
        Host.objects.filter(pk=host.pk).update(is_dirty=False, dirty_reason="", active_run=None)
        stale = Run.objects.filter(host=host).exclude(state__in=Run.TERMINAL_STATES)
        for pgid in stale.filter(remote_pgid__isnull=False).values_list("remote_pgid", flat=True):
            assert pgid is not None
            # The simulated host is this machine: a server left by a demo killed hard is ours to stop.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        stale.update(state=Run.State.CANCELLED, failure_message="The demo was restarted.")
        self._kill_leftover_servers()
        payload = demo_experiment_payload(host.models_root)
        submission = ExperimentSubmission(
            payload["experiment"], payload["baseline"], payload["candidates"], payload["profile"]
        )
        if not submission.is_valid():
            raise CommandError(f"The demo experiment is invalid: {submission.errors}")
        demo_user = get_user_model().objects.get(username=DEMO_USER)
        return do_create_experiment(actor=Actor.command(demo_user), **submission.experiment_fields())
