"""Notes and tags: what the owner of an experiment (or a maintainer) writes on it and its runs."""

from __future__ import annotations

from django import forms
from django.core.exceptions import ValidationError

from ..models.experiments import MAX_TAGS, NOTES_MAX_LENGTH, TAG_PATTERN


class RunNotesForm(forms.Form):
    notes = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 5}),
        required=False,
        max_length=NOTES_MAX_LENGTH,
        strip=False,
        help_text="Markdown: links, lists, code, tables. Raw HTML is removed.",
    )


class ExperimentNotesForm(RunNotesForm):
    tags = forms.CharField(
        required=False,
        max_length=300,
        help_text=f"Up to {MAX_TAGS} tags, separated by spaces or commas: a-z, 0-9, '.', '_' and '-'.",
    )

    def clean_tags(self) -> str:
        words = self.cleaned_data["tags"].replace(",", " ").lower().split()
        tags = list(dict.fromkeys(words))  # in order, once each
        bad = [tag for tag in tags if not TAG_PATTERN.fullmatch(tag)]
        if bad:
            raise ValidationError(
                "A tag is 1 to 32 of a-z, 0-9, '.', '_' and '-', starting with a letter or digit: not %(bad)s.",
                params={"bad": ", ".join(repr(tag[:40]) for tag in bad[:3])},
            )
        if len(tags) > MAX_TAGS:
            raise ValidationError(f"At most {MAX_TAGS} tags.")
        return " ".join(tags)
