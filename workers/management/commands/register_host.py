"""`manage.py register_host`: what an operator runs on a worker machine (where the SSH keys are) to register or
update a host: the key file becomes a registered key (its public key read here), the host is validated like the
admin form validates it, then the connection is tested, pinning the host key and reading the GPUs."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from experiments.actions.audit import Actor
from experiments.actions.hosts import do_edit_host, do_register_host, do_register_key
from experiments.forms import HostForm, plain_errors
from experiments.models import Host, SshKey
from workers.hosts import public_key_of, test_connection
from workers.ssh import SSHError


class Command(BaseCommand):
    help = "Register (or update) a GPU host, test the connection, pin its host key and read its GPUs."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--address", required=True)
        parser.add_argument("--port", type=int, default=22)
        parser.add_argument("--user", required=True)
        parser.add_argument("--key-name", default="", help="private key file name under SPECDASH_SSH_KEY_DIR")
        parser.add_argument("--work-dir", default="specdash-work")
        parser.add_argument("--models-root", default="")
        parser.add_argument("--shell-setup", default="")
        parser.add_argument("--launcher", default="python3 -m sglang.launch_server")
        parser.add_argument(
            "--specforge-launcher", default="", help="e.g. 'specforge' (blank: specdash exports no draft here)"
        )
        parser.add_argument("--vllm-launcher", default="", help="e.g. 'vllm serve' (blank: no vLLM on the host)")
        parser.add_argument("--python", default="python3")
        parser.add_argument("--server-port", type=int, default=30000)
        parser.add_argument("--extra-env-prefix", action="append", default=[], help="e.g. MYLAB_ (repeatable)")
        parser.add_argument(
            "--extra-flag", action="append", default=[], help="an SGLang flag the host allows, e.g. --enable-mscclpp"
        )
        parser.add_argument(
            "--draft-training-dir", action="append", default=[], help="a draft training directory (repeatable)"
        )
        parser.add_argument("--repin", action="store_true", help="forget the pinned key and pin the current one")

    def handle(self, *args, **o):
        actor = Actor.command()
        with transaction.atomic():
            key = self._registered_key(o["key_name"], actor) if o["key_name"] else None
            existing = Host.objects.filter(name=o["name"]).first()
            data = {
                "name": o["name"],
                "address": o["address"],
                "port": o["port"],
                "username": o["user"],
                "key_name": key.name if key else "",
                "work_dir": o["work_dir"],
                "models_root": o["models_root"],
                "shell_setup": o["shell_setup"],
                "launcher": o["launcher"],
                "vllm_launcher": o["vllm_launcher"],
                "specforge_launcher": o["specforge_launcher"],
                "python": o["python"],
                "server_port": o["server_port"],
                "extra_env_prefixes": ",".join(o["extra_env_prefix"]),
                "extra_flags": o["extra_flag"],
                "draft_training_dirs": o["draft_training_dir"],
            }
            form = HostForm(data, instance=existing)
            if not form.is_valid():
                errors = "; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in plain_errors(form).items())
                raise CommandError(f"Invalid host: {errors}")
            host = form.save_unsaved()
            host = do_edit_host(host, actor) if existing else do_register_host(host, actor)
            if o["repin"]:
                Host.objects.filter(pk=host.pk).update(host_key="")
                host.host_key = ""
        host = Host.objects.select_related("ssh_key").get(pk=host.pk)
        try:
            result = test_connection(host)
        except SSHError as exc:
            raise CommandError(str(exc)) from exc
        verb = "Updated" if existing else "Registered"
        self.stdout.write(f"{verb} host {host.name}: {len(result.gpus)} GPUs, host key {result.host_key.split()[0]}")

    def _registered_key(self, file_name: str, actor: Actor) -> SshKey:
        """The registered key of this file, registered now (with the file's public key) if it is not yet."""
        path = Path(settings.SPECDASH_SSH_KEY_DIR) / file_name
        if path.name != file_name:
            raise CommandError("--key-name is a file name inside SPECDASH_SSH_KEY_DIR, not a path.")
        try:
            public = public_key_of(path)
        except (OSError, ValueError) as exc:
            raise CommandError(f"Cannot read the key {path}: {exc}") from exc
        key = SshKey.objects.filter(file_name=file_name).first()
        if key is None:
            name = "".join(c if c.isalnum() or c in "-_" else "-" for c in file_name)[:64]
            return do_register_key(SshKey(name=name, file_name=file_name, public_key=public), actor)
        if key.public_key.split()[:2] != public.split():
            raise CommandError(f"The file {file_name} no longer holds the registered key {key.name}; re-register it.")
        return key
