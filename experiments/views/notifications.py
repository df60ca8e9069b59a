"""Notifications: a user's subscriptions, the team's, and the delivery log."""

from __future__ import annotations

from typing import cast

from django.contrib import messages
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from ..actions.audit import Actor
from ..actions.notifications import do_set_email, do_subscribe, do_unsubscribe
from ..forms.notifications import EmailAddressForm, SubscriptionForm
from ..models import Delivery, Subscription
from .access import requires

DELIVERY_LOG_ROWS = 50


@requires("experiments.add_subscription")
def notification_settings(request: HttpRequest) -> HttpResponse:
    form = SubscriptionForm(request.POST or None, user=request.user)
    if request.method == "POST" and form.is_valid():
        subscription = do_subscribe(form.subscription(), Actor.of(request))
        messages.success(request, f"Subscribed: {subscription}.")
        return redirect("notification_settings")
    subscriptions = list(Subscription.objects.visible_to(request.user).select_related("user"))
    deliveries = Delivery.objects.visible_to(request.user).select_related("user")[:DELIVERY_LOG_ROWS]
    context = {
        "form": form,
        "email_form": EmailAddressForm(initial={"email": cast(User, request.user).email}, auto_id="email-%s"),
        "mine": [s for s in subscriptions if s.user_id == request.user.pk],
        "team": [s for s in subscriptions if s.is_team],
        "may_manage_team": form.may_manage_team,
        "deliveries": deliveries,
    }
    return render(request, "experiments/notifications.html", context, status=400 if form.errors else 200)


@requires("experiments.add_subscription")
@require_POST
def unsubscribe(request: HttpRequest, subscription_id: int) -> HttpResponse:
    subscription = get_object_or_404(Subscription.objects.select_related("user"), pk=subscription_id)
    if not subscription.can_be_managed_by(request.user):
        raise PermissionDenied("Only its owner, or an admin for the team's, may remove a subscription.")
    do_unsubscribe(subscription, Actor.of(request))
    messages.success(request, "Subscription removed.")
    return redirect("notification_settings")


@requires("experiments.add_subscription")
@require_POST
def set_email(request: HttpRequest) -> HttpResponse:
    """A user sets the address their own e-mail subscriptions go to."""
    form = EmailAddressForm(request.POST, auto_id="email-%s")
    if not form.is_valid():
        messages.error(request, " ".join(str(e) for e in form.errors.get("email", [])) or "Enter a valid address.")
        return redirect("notification_settings")
    user = cast(User, request.user)  # (the decorator has checked the login)
    do_set_email(user, form.cleaned_data["email"])
    messages.success(request, f"Your e-mail address is {user.email}." if user.email else
                     "Your e-mail address is removed: your own e-mail subscriptions send nothing.")  # fmt: skip
    return redirect("notification_settings")
