"""Who the caller is: what `specdash login` checks a token against."""

from __future__ import annotations

from django.http import HttpRequest

from ..roles import role_of
from .base import api, api_user


@api.get("/me")
def get_me(request: HttpRequest):
    """The token's (or session's) user and role; any authenticated user may ask, a user in no role included (its
    `role` is null, and every other endpoint answers it 403)."""
    user = api_user(request)
    token = getattr(request, "api_token", None)
    return {
        "username": user.get_username(),
        "role": role_of(user),
        "token": {"name": token.name, "created_at": token.created_at.isoformat()} if token else None,
    }
