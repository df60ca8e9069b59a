from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from experiments.actions.audit import Actor
from experiments.actions.tokens import do_issue_token


class Command(BaseCommand):
    help = "Create an API token for USER and print it alone (it is shown only once)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="cli")

    def handle(self, *args, username: str, name: str, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user named {username!r}.")
        _, raw = do_issue_token(user, Actor.command(), name=name[:100])
        self.stdout.write(raw)
