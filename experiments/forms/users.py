"""Teammates as an admin adds them and sets their role on the Team page."""

from __future__ import annotations

from django import forms
from django.contrib.auth import get_user_model
from django.contrib.auth.validators import ASCIIUsernameValidator

from .. import roles

ROLE_CHOICES = [(role, role) for role in roles.ORDER]


class TeammateForm(forms.Form):
    # ASCII only: a name spelled with look-alike letters from another script could pass for a teammate's.
    username = forms.CharField(
        max_length=150,
        validators=[ASCIIUsernameValidator()],
        help_text="Letters, digits and @ . + - _ only.",
    )
    email = forms.EmailField(
        label="E-mail (optional)",
        required=False,
        max_length=254,
        help_text="The set-password link is e-mailed here where this server sends e-mail.",
    )
    role = forms.ChoiceField(choices=ROLE_CHOICES, initial=roles.MEMBER)

    def clean_username(self) -> str:
        name = self.cleaned_data["username"]
        # Told apart regardless of case, as people read them ("Alice" would pass for "alice").
        taken = get_user_model().objects.filter(username__iexact=name).values_list("username", flat=True).first()
        if taken is not None:
            raise forms.ValidationError(f"The team has a {taken} already; choose another username.")
        return name


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=[("", "no role"), *ROLE_CHOICES], required=False)

    def clean_role(self) -> str | None:
        return self.cleaned_data["role"] or None
