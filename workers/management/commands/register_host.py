from django.core.management.base import BaseCommand, CommandError

from experiments.models import Host
from workers.hosts import test_connection
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
        parser.add_argument("--python", default="python3")
        parser.add_argument("--server-port", type=int, default=30000)
        parser.add_argument("--repin", action="store_true", help="forget the pinned key and pin the current one")

    def handle(self, *args, **o):
        host, created = Host.objects.update_or_create(
            name=o["name"],
            defaults=dict(
                address=o["address"],
                port=o["port"],
                username=o["user"],
                key_name=o["key_name"],
                work_dir=o["work_dir"],
                models_root=o["models_root"],
                shell_setup=o["shell_setup"],
                launcher=o["launcher"],
                python=o["python"],
                server_port=o["server_port"],
            ),
        )
        if o["repin"]:
            host.host_key = ""
        try:
            result = test_connection(host)
        except SSHError as exc:
            raise CommandError(str(exc)) from exc
        verb = "Registered" if created else "Updated"
        self.stdout.write(f"{verb} host {host.name}: {len(result.gpus)} GPUs, host key {result.host_key.split()[0]}")
