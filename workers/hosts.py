"""Reaching a registered host over SSH and reading it: the connection test (which pins its key), the GPU
processes, the model directories and their config.json, the flags its SGLang accepts, its work directory, whether
a port is free, and a slice of a run's log file; and the one command a member may have run there besides a run's,
the export of a listed draft checkpoint (rules/draft_export.py), which an admin allows per host."""

from __future__ import annotations

import asyncio
import json
import logging
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh
from django.conf import settings

from experiments import serializers
from experiments.actions.hosts import do_record_key_public_half, do_store_connection_test
from experiments.formats import specforge_runs
from experiments.models import Host, SshKey
from experiments.rules import draft_export, host_allowlist, model_checks, model_paths, server_flags
from workers.hostreads import fingerprint, gpus, training_dirs

from .ssh import HostAccess, HostConnection, SSHError

logger = logging.getLogger(__name__)

MAX_MODELS = model_checks.MAX_LISTED_MODELS
# An EAGLE-3 head's export reads one checkpoint and writes a few hundred MB: well under a minute on a GPU host, and
# the web waits for the answer (dispatch.WORKER_ANSWER_TIMEOUT) — a guess, there is no SpecForge timing to cite.
EXPORT_TIMEOUT = 45.0
# What of the export's output comes back (the audit log and the page keep it): its last lines.
EXPORT_OUTPUT_CHARS = 4000


class HostReadError(Exception):
    """A read of the host's state failed; the message says what and why, for the run's failure."""


def host_access(host: Host, *, record_key: bool = False) -> HostAccess:
    """How to reach `host`, once it is allowed: its address on SPECDASH_HOST_ALLOWLIST (resolved now, as a name
    may point elsewhere since it was registered) and its key file the registered one. Raises SSHError.

    `record_key`: an admin's connection test, which records the public key of a key not verified yet.
    """
    refusal = host_allowlist.refusal(host.address, settings.SPECDASH_HOST_ALLOWLIST)
    if refusal:
        raise SSHError(f"Not connecting to {host.name}: {refusal}")
    key_path = None
    if host.ssh_key is not None:
        key_path = _verified_key_file(host.ssh_key, record=record_key)
    return HostAccess(
        name=host.name,
        address=host.address,
        port=host.port,
        username=host.username,
        key_path=key_path,
        host_key=host.host_key,
        shell_setup=host.shell_setup,
        work_dir=host.work_dir,
    )


def public_key_of(path: Path) -> str:
    """The public half of a private key file, as `type base64` (what SshKey.public_key holds, comment dropped).
    Raises OSError or ValueError (asyncssh.KeyImportError is one) when the file cannot be read as a key."""
    return " ".join(asyncssh.read_private_key(path).export_public_key().decode().split()[:2])


def _verified_key_file(key: SshKey, *, record: bool) -> Path:
    path = Path(settings.SPECDASH_SSH_KEY_DIR) / key.file_name
    try:
        public = public_key_of(path)
    except (OSError, ValueError) as exc:
        raise SSHError(f"The SSH key {key.name} cannot be read from the workers' key directory: {exc}") from exc
    if key.is_verified:
        if key.public_key.split()[:2] != public.split():
            raise SSHError(f"The key file of SSH key {key.name} is not the registered key; refusing to use it.")
    elif record:
        do_record_key_public_half(key, public)
    else:
        raise SSHError(f"The SSH key {key.name} is not verified yet: an admin's connection test records it.")
    return path


# ---- reads over an open connection ---------------------------------------------------------------------


async def compute_apps(conn: HostConnection) -> list[gpus.ComputeApp]:
    """The processes holding GPU memory on the host, by nvidia-smi."""
    result = await conn.run(gpus.COMPUTE_APPS_QUERY)
    if not result.ok:
        raise HostReadError(f"nvidia-smi failed on the host: {result.stderr_tail()}")
    return gpus.parse_compute_apps(result.stdout)


async def model_config(conn: HostConnection, host: Host, path: str, role: str) -> dict[str, Any]:
    """The config.json of a model directory on the host (`role`: "target", "draft" or "listed", for the message).

    The directory is read only where it really lies inside the host's models root, symlinks resolved on the host:
    a link from inside the root to elsewhere is refused like a path elsewhere. Whatever went wrong, the message says
    only "not found under the models root" (every member reads a run's failure; what exists elsewhere on the host,
    or why it could not be read, is for the worker's log, which admins read)."""
    root = host.models_root or "/nonexistent-models-root"
    script = (
        f"root=$(realpath -e -- {shlex.quote(root)}) && model=$(realpath -e -- {shlex.quote(path)}) && "
        'case "$model/" in "$root"/?*) cat -- "$model/config.json" ;; '
        '*) echo "resolves to $model, outside $root" >&2; exit 3 ;; esac'
    )
    result = await conn.run(script)
    if not result.ok:
        logger.info("model %s on %s unreadable: %s", path, host.name, result.stderr_tail())
        raise HostReadError(f"The {role} model path {path} is not found under the models root on {host.name}.")
    try:
        data = json.loads(result.stdout)
    except json.JSONDecodeError as exc:
        raise HostReadError(f"The {role} model's config.json is not JSON: {exc}") from exc
    return data if isinstance(data, dict) else {}


async def work_dir(conn: HostConnection, host: Host) -> str:
    """The absolute path of the host's work directory (relative ones are under the SSH user's home), created
    with its `runs/` subdirectory if missing."""
    quoted = shlex.quote(host.work_dir)
    result = await conn.run(f"cd ~ && mkdir -p -- {quoted}/runs && cd -- {quoted} && pwd")
    if not result.ok:
        raise HostReadError(f"Cannot create the work directory: {result.stderr.strip()}")
    # Lines end at "\n" only: str.splitlines() and strip() would also cut at U+0085 or U+2028 in a directory name.
    return result.stdout.rstrip("\n").split("\n")[-1]


async def port_in_use(conn: HostConnection, port: int) -> bool:
    """Whether something listens on the host's loopback `port` (bash's /dev/tcp: no extra tool needed)."""
    probe = await conn.run(f"(exec 3<>/dev/tcp/127.0.0.1/{int(port)}) 2>/dev/null && echo taken || echo free")
    return probe.stdout.strip().endswith("taken")


# ---- what the web tier asks a worker (experiments.actions.dispatch) ----------------------------------------


@dataclass(frozen=True)
class ProbeResult:
    host_key: str
    gpus: list[dict[str, Any]]


async def probe(host: Host, access: HostAccess, *, pin: bool) -> ProbeResult:
    conn = await HostConnection.open(access, pin=pin)
    try:
        result = await conn.run(gpus.GPU_INVENTORY_QUERY)
        if not result.ok:
            raise SSHError(f"nvidia-smi failed on {host.name}: {result.stderr.strip()[-300:]}")
        return ProbeResult(host_key=conn.server_host_key, gpus=gpus.parse_gpu_inventory(result.stdout))
    finally:
        await conn.close()


def test_connection(host: Host) -> ProbeResult:
    """Pin the key if none is pinned yet (trust on first use, by an admin's explicit action); verify it after."""
    result = asyncio.run(probe(host, host_access(host, record_key=True), pin=not host.is_pinned))
    do_store_connection_test(host, result.host_key, result.gpus)
    return result


def read_file_range(host: Host, path: str, offset: int, length: int) -> tuple[bytes, int]:
    """Up to `length` bytes of the host's file `path` from `offset`, and the file's size. Raises SSHError."""
    return asyncio.run(_read_file_range(host_access(host), path, offset, length))


async def _read_file_range(access: HostAccess, path: str, offset: int, length: int) -> tuple[bytes, int]:
    conn = await HostConnection.open(access, timeout=settings.SPECDASH_CONNECT_TIMEOUT)
    try:
        return await conn.get_range(path, offset, length)
    finally:
        await conn.close()


def read_draft_checkpoints(host: Host) -> list[dict[str, Any]]:
    """Each of the host's draft training directories, read now (serializers.training_directory_json), or why not
    (refused_directory_json), in the admin's order, in one SSH session. Raises SSHError when the host is not
    reached."""
    return asyncio.run(_read_draft_checkpoints(host, host_access(host)))


async def _read_draft_checkpoints(host: Host, access: HostAccess) -> list[dict[str, Any]]:
    dirs = [d for d in host.draft_training_dirs or [] if isinstance(d, str)]
    # The world re-checked: the setting was valid when saved, under the models root the host had then.
    refusals = {d: model_paths.model_path_refusal("The training directory", d, host.models_root) for d in dirs}
    if all(refusals.values()):
        return [serializers.refused_directory_json(d, refusals[d] or "") for d in dirs]
    conn = await HostConnection.open(access, timeout=settings.SPECDASH_CONNECT_TIMEOUT)
    try:
        found = await conn.run(training_dirs.drafts_command(host.models_root))
        drafts_raw = training_dirs.decode_lines(found.stdout, 1) if found.ok else None
        drafts = specforge_runs.parse_config_listing(drafts_raw[0]) if drafts_raw else []
        answers = []
        for directory in dirs:
            refusal = refusals[directory]
            if refusal is None:
                answers.append(await _read_training_dir(conn, host, directory, drafts))
            else:
                answers.append(serializers.refused_directory_json(directory, refusal))
        return answers
    finally:
        await conn.close()


async def _read_training_dir(conn: HostConnection, host: Host, directory: str, drafts: list[str]) -> dict[str, Any]:
    root = host.models_root
    listed = await conn.run(training_dirs.listing_command(root, directory))
    lines = training_dirs.decode_lines(listed.stdout, 2) if listed.ok else None
    if lines is None:
        # Outside the root, missing, or unreadable: the reason is for the worker's log (admins read it), as for models.
        logger.info("training dir %s on %s unreadable: %s", directory, host.name, listed.stderr_tail())
        return serializers.refused_directory_json(
            directory, f"{directory} is not a readable directory under the models root on {host.name}"
        )
    resolved, raw = lines[0].decode("utf-8", "replace"), lines[1]
    entries, skipped, problems = specforge_runs.parse_listing(raw, cut=len(raw) >= training_dirs.MAX_LISTING_BYTES)
    wanted = specforge_runs.files_to_read(entries)
    files: dict[str, str] = {}
    if wanted:
        read = await conn.run(training_dirs.files_command(root, directory, wanted))
        contents = training_dirs.decode_lines(read.stdout, len(wanted)) if read.ok else None
        for (name, _), data in zip(wanted, contents or [], strict=False):
            if data:
                files[name] = data.decode("utf-8", "replace")
    # Paths as the host's setting writes them (what a config's draft path must be), not as resolved on the host.
    found = specforge_runs.read_training_directory(
        directory.rstrip("/"),
        entries,
        files,
        models_root=root.rstrip("/"),
        models_root_drafts=drafts,
        skipped=skipped,
        problems=problems,
    )
    answer = serializers.training_directory_json(directory, found)
    answer["resolved_path"] = resolved
    return answer


def export_draft_checkpoint(host: Host, directory: str, run_id: str, step: int) -> dict[str, Any]:
    """Export step `step` of run `run_id` in the host's training directory `directory` for SGLang, as the host's
    listing read now shows it (the world re-checked: the page the member clicked may be old), with the host's
    SpecForge launcher. {"ok", "output_dir", "command", "exit_status", "output"}, or {"ok": False, "refused": True,
    "error"} when refused before anything ran. Raises SSHError when the host is not reached or the export outlives
    EXPORT_TIMEOUT."""
    if directory not in (host.draft_training_dirs or []):
        return {"ok": False, "refused": True, "error": "That training directory is not one an admin set on this host."}
    access = host_access(host)
    directories = asyncio.run(_read_draft_checkpoints(host, access))
    plan = draft_export.plan_export(host.specforge_launcher, host.models_root, directories, directory, run_id, step)
    if isinstance(plan, str):
        return {"ok": False, "refused": True, "error": plan}
    return asyncio.run(_export(access, plan))


async def _export(access: HostAccess, plan: draft_export.ExportPlan) -> dict[str, Any]:
    conn = await HostConnection.open(access, timeout=settings.SPECDASH_CONNECT_TIMEOUT)
    try:
        out = shlex.quote(plan.output_dir)
        present = await conn.run(f"test -e {out} || test -L {out}")
        if present.exit_status == 0:
            exists = f"{plan.output_dir} exists on the host: nothing is overwritten."
            return {"ok": False, "refused": True, "error": exists}
        result = await conn.run(plan.command, timeout=EXPORT_TIMEOUT)
    finally:
        await conn.close()
    output = (result.stdout + result.stderr)[-EXPORT_OUTPUT_CHARS:]
    return {
        "ok": result.ok,
        "output_dir": plan.output_dir,
        "command": plan.command,
        "exit_status": result.exit_status,
        "output": output,
    }


def read_gpus(host_list: list[Host]) -> dict[int, list[dict[str, Any]] | str]:
    """Each host's GPUs and memory in use now (a list), or why they could not be read (a message); all at once,
    so one unreachable host costs the connect timeout once, not once per host."""
    return asyncio.run(_read_gpus_of(host_list))


async def _read_gpus_of(host_list: list[Host]) -> dict[int, list[dict[str, Any]] | str]:
    async def read(host: Host) -> list[dict[str, Any]] | str:
        try:
            conn = await HostConnection.open(host_access(host), timeout=settings.SPECDASH_CONNECT_TIMEOUT)
        except SSHError as exc:
            return str(exc)
        try:
            result = await conn.run(gpus.GPU_INVENTORY_QUERY)
            return gpus.parse_gpu_inventory(result.stdout) if result.ok else f"nvidia-smi: {result.stderr_tail()}"
        finally:
            await conn.close()

    readings = await asyncio.gather(*(read(host) for host in host_list))
    return {host.pk: reading for host, reading in zip(host_list, readings, strict=True)}


# Real SGLang's --help imports torch first (tens of seconds on a cold host); the probe reads files only.
HELP_TIMEOUT = 75.0


@dataclass(frozen=True)
class HostListing:
    models: list[dict[str, Any]]
    server_flags: dict[str, Any] | None  # rules/server_flags.listing, None when not read
    flags_problem: str = ""  # why not, for the worker's log


def list_host(host: Host) -> HostListing:
    """Model directories under the host's models root (those holding a config.json, with what it says) and the flags
    the host's SGLang accepts, in one SSH session."""
    return asyncio.run(_list_host(host, host_access(host)))


async def _list_host(host: Host, access: HostAccess) -> HostListing:
    conn = await HostConnection.open(access)
    try:
        models = await _list_models(conn, host) if host.models_root else []
        try:
            flags, problem = await read_server_flags(conn, host), ""
        except HostReadError as exc:
            flags, problem = None, str(exc)
        return HostListing(models, flags, problem)
    finally:
        await conn.close()


async def read_server_flags(conn: HostConnection, host: Host) -> dict[str, Any]:
    """The launcher's --help, with the environment every server of the host gets, and the SGLang version the
    fingerprint's probe reads: `server_flags.listing`. Raises HostReadError."""
    env = " ".join(shlex.quote(f"{name}={value}") for name, value in (host.default_env or {}).items())
    launcher = " ".join(shlex.quote(word) for word in shlex.split(host.launcher))
    cap = server_flags.MAX_HELP_CHARS
    try:
        found = await conn.run(f"env {env} {launcher} --help 2>&1 | head -c {cap}", timeout=HELP_TIMEOUT)
    except SSHError as exc:
        raise HostReadError(f"{host.launcher} --help: {exc}") from exc
    try:
        flags = server_flags.parse_help(found.stdout)
    except server_flags.NotSGLangHelp as exc:
        raise HostReadError(str(exc)) from exc
    python = fingerprint.launcher_python(host.launcher, host.python)
    probe = " ".join(shlex.quote(word) for word in [*python, "-c", fingerprint.PROBE_SOURCE])
    version = None
    try:
        answer = await conn.run(f"env {env} {probe} 2>/dev/null")
        version = (json.loads(answer.stdout).get("packages", {}).get("sglang") or {}).get("version")
    except (SSHError, ValueError, AttributeError):
        pass  # the flags hold without it; the page says the version is unknown
    return server_flags.listing(host.launcher, str(version) if version else None, flags)


async def _list_models(conn: HostConnection, host: Host) -> list[dict[str, Any]]:
    # find reads a first argument that starts with "-" as its expression (`-delete`!), never as a path.
    root = shlex.quote(f"./{host.models_root}" if host.models_root.startswith("-") else host.models_root)
    find = f"find {root} -mindepth 2 -maxdepth 2 -name config.json -printf '%h\\n' 2>/dev/null"
    found = await conn.run(f"{find} | sort | head -n {MAX_MODELS}")
    models = []
    # One path per line (a path may hold spaces, or characters that str.splitlines() would split at).
    for path in filter(None, found.stdout.split("\n")):
        try:
            config = await model_config(conn, host, path, "listed")
        except HostReadError:
            config = {}  # listed all the same: the path is what the form needs
        models.append(
            {
                "path": path,
                "name": path.rstrip("/").rsplit("/", 1)[-1],
                "architectures": config.get("architectures", []),
                "max_position_embeddings": config.get("max_position_embeddings"),
                "vocab_size": config.get("vocab_size"),
                "text_config": model_checks.listed_text_config(config),
            }
        )
    return models
