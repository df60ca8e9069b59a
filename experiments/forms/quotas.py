"""A member's own quotas, set by an admin on the Team page: each blank for the deployment's default."""

from __future__ import annotations

from django import forms

from ..models import MemberQuota


class MemberQuotaForm(forms.ModelForm):
    class Meta:
        model = MemberQuota
        fields = list(MemberQuota.FIELDS)
        labels = {"launches_queued": "Launches at once", "gpu_hours_per_day": "GPU-hours a day"}
