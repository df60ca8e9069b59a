"""The login form: Django's, with the username bounded before anything authenticates it."""

from __future__ import annotations

from typing import cast

from django import forms
from django.contrib.auth.forms import AuthenticationForm
from django.core.validators import MaxLengthValidator


class LoginForm(AuthenticationForm):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Django sets the field's max_length after building it, so no validator enforces it; an overlong username
        # then reached the login throttle's table (255 characters) and failed with a 500.
        username = cast(forms.CharField, self.fields["username"])
        username.validators.append(MaxLengthValidator(username.max_length or 150))
