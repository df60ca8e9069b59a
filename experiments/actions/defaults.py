"""The rows every deployment has from its migrations: the four role groups with their permissions, and the built-in
prompt sets. Made again after every `migrate` and every flush (Django's post_migrate), so a database emptied by
`manage.py flush`, or by a transactional test, still has them: without the groups nobody can be given a role."""

from __future__ import annotations

from typing import Any


def ensure_builtin_prompt_sets(prompt_set_model: Any) -> None:
    """Random ids (what profiles sent before prompt sets) and ShareGPT from its package (when installed). A migration
    calls this with its historical model."""
    from ..models.prompt_store import SHAREGPT_NAME, sharegpt_file_hash

    if not prompt_set_model.objects.filter(kind="random").exists():
        prompt_set_model.objects.create(name="random token ids", kind="random", content_hash="random")
    digest = sharegpt_file_hash()
    if digest and not prompt_set_model.objects.filter(kind="sharegpt", content_hash=digest).exists():
        prompt_set_model.objects.create(name=SHAREGPT_NAME, kind="sharegpt", content_hash=digest)


def ensure_default_rows(**kwargs: Any) -> None:
    """post_migrate receiver (the experiments app's): runs after auth's, so every permission exists by then."""
    from django.contrib.auth.models import Group, Permission

    from .. import roles
    from ..models import PromptSet

    roles.sync_role_groups(Group, Permission)
    ensure_builtin_prompt_sets(PromptSet)
