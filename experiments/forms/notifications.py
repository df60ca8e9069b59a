"""A notification subscription: a user's own (e-mail to their account's address, browser), or with the team
permission the team's (an e-mail address, a webhook). Webhooks are team-only: the worker posts to their URL."""

from __future__ import annotations

from typing import Any, cast
from urllib.parse import urlsplit

from django import forms
from django.conf import settings
from django.core.validators import EmailValidator, URLValidator

from ..models import Event, Subscription
from ..rules import webhook_targets

MAX_TARGET = 500


class SubscriptionForm(forms.ModelForm):
    events = forms.MultipleChoiceField(choices=Event.choices, widget=forms.CheckboxSelectMultiple)
    team = forms.BooleanField(required=False, label="For the team (not only me)")
    target = forms.CharField(
        required=False,
        max_length=MAX_TARGET,
        label="Address or URL",
        help_text="Team e-mail: the address. Webhook: the https:// URL (Slack incoming webhooks work as they are).",
    )

    class Meta:
        model = Subscription
        fields = ["channel", "events", "only_mine", "target"]

    def __init__(self, *args, user, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.user = user
        self.may_manage_team = user.has_perm("experiments.manage_team_subscriptions")
        if not self.may_manage_team:
            del self.fields["team"]
            channel_field = cast(forms.ChoiceField, self.fields["channel"])
            channel_field.choices = [
                (value, label) for value, label in Subscription.Channel.choices if value != Subscription.Channel.WEBHOOK
            ]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        channel = data.get("channel")
        team = bool(data.get("team"))
        target = (data.get("target") or "").strip()
        if team and data.get("only_mine"):
            self.add_error("only_mine", "“Only my experiments” is for a personal subscription.")
        if channel == Subscription.Channel.WEBHOOK and not team:
            self.add_error("team", "Webhooks are team subscriptions: tick “For the team”.")
        if channel == Subscription.Channel.BROWSER and team:
            self.add_error("channel", "Browser notifications are personal: they show on your own open pages.")
        if channel == Subscription.Channel.EMAIL and not team:
            if not self.user.email:
                self.add_error("channel", "Your account has no e-mail address: set it above first.")
            target = ""  # a personal e-mail goes to the account's address, never to one typed here
        elif channel == Subscription.Channel.EMAIL:
            self._check(target, EmailValidator(message="Enter a valid e-mail address."))
        elif channel == Subscription.Channel.WEBHOOK:
            self._check_webhook(target)
        else:
            target = ""
        data["target"] = target
        return data

    def _check(self, target: str, validator) -> None:
        if not target:
            self.add_error("target", "Give the address this subscription sends to.")
            return
        try:
            validator(target)
        except forms.ValidationError as exc:
            self.add_error("target", exc)

    def _check_webhook(self, url: str) -> None:
        # https only, as the help says: a webhook's message names hosts, configs and results.
        self._check(url, URLValidator(schemes=["https"], message="Enter an https:// URL."))
        if not url or "target" in self.errors:
            return
        allowed = settings.SPECDASH_WEBHOOK_HOSTS
        host = (urlsplit(url).hostname or "").lower()
        if allowed and host not in allowed:
            self.add_error("target", f"Webhooks may only point at {', '.join(allowed)} (SPECDASH_WEBHOOK_HOSTS).")
            return
        # Where it resolves now; the worker checks again right before each delivery.
        problem = webhook_targets.url_refusal(url) or webhook_targets.target_refusal(
            url,
            webhook_targets.resolve(*webhook_targets.endpoint(url)),
            webhook_targets.networks(settings.SPECDASH_WEBHOOK_ALLOWED_NETWORKS),
        )
        if problem:
            self.add_error("target", problem)

    def subscription(self) -> Subscription:
        """The valid subscription, unsaved (the view saves it through `do_subscribe`)."""
        subscription = self.instance
        subscription.user = None if self.cleaned_data.get("team") else self.user
        return subscription


class EmailAddressForm(forms.Form):
    """The address a user's own e-mail subscriptions go to (their account's)."""

    email = forms.EmailField(max_length=254, required=False, label="Your e-mail address",
                             help_text="where your own e-mail notifications go; leave it empty for none")  # fmt: skip
