"""Team review: triage of a regression flag, re-running an experiment to confirm it, and scheduling it."""

from __future__ import annotations

from django import forms
from django.contrib.auth import get_user_model

from ..models import Experiment, Flag


class FlagTriageForm(forms.Form):
    triage = forms.ChoiceField(choices=Flag.Triage.choices)
    assignee = forms.ModelChoiceField(
        queryset=get_user_model().objects.filter(is_active=True).order_by("username"), required=False
    )
    comment = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False, max_length=10_000)


class RerunForm(forms.Form):
    launches = forms.IntegerField(min_value=1, max_value=20, initial=2, help_text="more launches of every config")


class ScheduleForm(forms.Form):
    every = forms.ChoiceField(choices=Experiment.Schedule.choices, required=False)
    hour_utc = forms.IntegerField(min_value=0, max_value=23, initial=2, label="at (UTC hour)")
