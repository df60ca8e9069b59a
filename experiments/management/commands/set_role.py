from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from experiments import roles
from experiments.actions.audit import Actor
from experiments.actions.users import TeamRefused, do_set_role


class Command(BaseCommand):
    help = "Give USER one role (viewer, member, maintainer, admin), or none with --none; e.g. the first admin."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("role", nargs="?", choices=roles.ORDER)
        parser.add_argument("--none", action="store_true", help="take every role away")

    def handle(self, *args, username: str, role: str | None, none: bool, **options):
        if (role is None) == (not none):
            raise CommandError("Give a role, or --none.")
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user named {username!r}.")
        try:
            do_set_role(user, role, Actor.command())
        except TeamRefused as refusal:
            raise CommandError(str(refusal)) from refusal
        self.stdout.write(f"{username}: {role or 'no role'}")
