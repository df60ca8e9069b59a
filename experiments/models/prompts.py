"""Prompt sets: what a benchmark sends. Versioned by content: a set's hash is what a profile's series carries, so
results measured on different prompts are never compared."""

from __future__ import annotations

import hashlib
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from experiments.formats import prompt_sampling


class PromptSetQuerySet(models.QuerySet["PromptSet"]):
    def first_version(self, name: str) -> PromptSet | None:
        """The first version published under `name` (compared ignoring case, so a look-alike name is the same
        name): its creator owns the name. A built-in version, if there is one, stands for the name."""
        versions = self.filter(name__iexact=name).select_related("created_by")
        return versions.exclude(kind=PromptSet.Kind.UPLOAD).first() or versions.order_by("created_at", "id").first()


class PromptSet(models.Model):
    class Kind(models.TextChoices):
        # Random token ids drawn by the client with the profile's seed (what every profile sent before sets).
        RANDOM = "random", "random token ids"
        SHAREGPT = "sharegpt", "ShareGPT V3 (bench_serving's default)"
        UPLOAD = "upload", "uploaded"

    name = models.CharField(max_length=128)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.UPLOAD)
    # The conversations of an uploaded set (prompt_sampling.conversations_json); empty for the other kinds, whose
    # prompts are the ShareGPT package's file or the client's random draw.
    conversations = models.JSONField(default=list, blank=True)
    prompt_count = models.PositiveIntegerField(default=0)
    categories = models.JSONField(default=dict, blank=True)  # category -> conversations
    content_hash = models.CharField(max_length=64, db_index=True, editable=False)
    note = models.CharField(max_length=300, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)

    objects = PromptSetQuerySet.as_manager()

    class Meta:
        ordering = ["name", "-created_at", "id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.short_hash})"

    @property
    def short_hash(self) -> str:
        return self.content_hash[:10]

    @property
    def is_builtin(self) -> bool:
        """A set every team has (random ids, ShareGPT), seeded by the migrations, not uploaded."""
        return self.kind != self.Kind.UPLOAD

    def can_add_version(self, user) -> bool:
        """Of a name's first version: may `user` publish new versions under its name? Its creator, maintainers and
        admins; under a built-in set's name only admins."""
        if user.has_perm("experiments.change_host"):  # admins
            return True
        if self.is_builtin:
            return False
        return user.has_perm("experiments.manage_any_experiment") or (
            self.created_by_id is not None and self.created_by_id == user.pk
        )

    def who_may_add_versions(self) -> str:
        if self.is_builtin:
            whose, who = "a built-in prompt set", "only admins"
        elif self.created_by is None:
            whose, who = "a former user’s prompt set", "only maintainers and admins"
        else:
            owner = self.created_by.get_username()
            whose, who = f"{owner}’s prompt set", f"only {owner}, maintainers and admins"
        return f"“{self.name}” is {whose}: {who} may publish versions of it."

    @property
    def is_random(self) -> bool:
        return self.kind == self.Kind.RANDOM

    def load_conversations(self) -> list[prompt_sampling.Conversation]:
        if self.kind == self.Kind.SHAREGPT:
            from .prompt_store import sharegpt_conversations  # reads the package's file, cached

            return sharegpt_conversations().conversations
        return prompt_sampling.conversations_from_json(self.conversations)

    def set_conversations(self, conversations: list[prompt_sampling.Conversation]) -> None:
        self.conversations = prompt_sampling.conversations_json(conversations)
        self.prompt_count = len(conversations)
        counts: dict[str, int] = {}
        for conversation in conversations:
            counts[conversation.category] = counts.get(conversation.category, 0) + 1
        self.categories = dict(sorted(counts.items()))
        self.content_hash = prompt_sampling.content_hash(conversations)


class PromptResults(models.Model):
    """Each prompt's result in the first cell of a run: its category, output length, accept length and, at
    temperature 0, its output token ids (what the equivalence gate compares). A row of its own: the outputs of a
    thousand prompts weigh megabytes that no run list should load."""

    run = models.OneToOneField("Run", on_delete=models.CASCADE, related_name="prompt_results")
    pass_index = models.PositiveIntegerField()
    concurrency = models.PositiveIntegerField()
    # [{index, category, ok, output_len, accept_length, output_ids?}] in sending order
    requests = models.JSONField(default=list)
    # {prompt index: digest of its output ids}: the gate compares these and reads the ids only where they differ.
    digests = models.JSONField(default=dict)

    def __str__(self) -> str:
        return f"prompt results of run {self.run_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.fill_digests()
        super().save(*args, **kwargs)

    def fill_digests(self) -> PromptResults:
        self.digests = {str(index): output_digest(ids) for index, ids in self.outputs().items()}
        return self

    def outputs(self) -> dict[int, list[int]]:
        """The output token ids by prompt index, of the requests that succeeded and kept them."""
        return {
            r["index"]: r["output_ids"]
            for r in self.requests
            if r.get("ok") and r.get("index") is not None and isinstance(r.get("output_ids"), list)
        }


def output_digest(ids: list[int]) -> str:
    return hashlib.blake2b(",".join(map(str, ids)).encode(), digest_size=8).hexdigest()
