"""Team review: triage of a regression flag, and re-running an experiment to confirm it."""

from __future__ import annotations

from django import forms
from django.contrib.auth import get_user_model

from ..models import Flag


class FlagTriageForm(forms.Form):
    triage = forms.ChoiceField(choices=Flag.Triage.choices)
    assignee = forms.ModelChoiceField(
        queryset=get_user_model().objects.filter(is_active=True).order_by("username"), required=False
    )
    comment = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False, max_length=10_000)


class RerunForm(forms.Form):
    launches = forms.IntegerField(min_value=1, max_value=20, initial=2, help_text="more launches of every config")
