"""Django's `createsuperuser`, with the password validators run in non-interactive mode too.

Django checks a typed password against AUTH_PASSWORD_VALIDATORS, but takes DJANGO_SUPERUSER_PASSWORD (`--noinput`,
the way a deployment script makes its first admin) unchecked; here that password is refused as a typed one would
be. (This app comes before django.contrib.auth in INSTALLED_APPS, so its command is the one `manage.py` runs.)"""

from __future__ import annotations

import os
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.management.commands import createsuperuser
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import CommandError


class Command(createsuperuser.Command):
    def handle(self, *args: Any, **options: Any) -> None:
        password = os.environ.get("DJANGO_SUPERUSER_PASSWORD")
        if not options["interactive"] and password is not None:
            model = get_user_model()
            field = model.USERNAME_FIELD
            username = options[field] or os.environ.get(f"DJANGO_SUPERUSER_{field.upper()}", "")
            # The user as it would be made, so that the similarity check compares the password with its name.
            user = model(**{field: username, "email": options.get("email") or ""})
            try:
                validate_password(password, user)
            except ValidationError as exc:
                raise CommandError("DJANGO_SUPERUSER_PASSWORD: " + " ".join(exc.messages)) from None
        super().handle(*args, **options)
