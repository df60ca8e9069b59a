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


class FlagBulkTriageForm(forms.Form):
    """The review queue's triage of several flags at once (or one, from its row)."""

    MAX_FLAGS = 500  # a bound on one request (the queue shows its flags a page at a time)

    flags = forms.ModelMultipleChoiceField(queryset=Flag.objects.all(), error_messages={"required": "Tick a flag."})
    triage = forms.ChoiceField(choices=Flag.Triage.choices)
    assign_to_me = forms.BooleanField(required=False, label="assign to me")
    comment = forms.CharField(required=False, max_length=10_000)

    def clean_flags(self):
        flags = self.cleaned_data["flags"]
        if len(flags) > self.MAX_FLAGS:
            raise forms.ValidationError(f"At most {self.MAX_FLAGS} flags at a time.")
        return flags


class RerunForm(forms.Form):
    launches = forms.IntegerField(
        min_value=1,
        max_value=20,
        initial=2,
        help_text="more launches of every config",
        error_messages={"max_value": "At most %(limit_value)s more launches of every config at once."},
    )


class CadenceForm(forms.Form):
    """How often an experiment is launched again (the model's `schedule` field and the API's `schedule` key keep
    their names; "schedule" in the code means an adaptive schedule, "run order" the interleaving of launches)."""

    every = forms.ChoiceField(choices=Experiment.Schedule.choices, required=False)
    hour_utc = forms.IntegerField(min_value=0, max_value=23, initial=2, label="at (UTC hour)")
