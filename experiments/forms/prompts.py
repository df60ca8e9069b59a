"""Uploading a prompt set: the name and the file; the file's content is checked by prompt_sampling.parse_upload."""

from __future__ import annotations

from django import forms

from experiments.formats import bounded_json
from experiments.formats.prompt_sampling import MAX_UPLOAD_BYTES
from experiments.rules import prompt_set_names

from ..models import PromptSet
from .values import no_control_chars


def _name_check(value: str) -> None:
    no_control_chars(value, "The name")
    not_text = bounded_json.text_refusal(value)
    if not_text is not None:
        raise forms.ValidationError(f"The name {not_text}.")
    builtin_names = PromptSet.objects.exclude(kind=PromptSet.Kind.UPLOAD).values_list("name", flat=True)
    # What the built-in sets go by besides their names: the kinds and their labels ("random", "ShareGPT V3 ...").
    kinds = [word for kind, label in PromptSet.Kind.choices if kind != PromptSet.Kind.UPLOAD for word in (kind, label)]
    builtin = prompt_set_names.imitated(value, builtin_names, kinds)
    if builtin is not None:
        raise forms.ValidationError(
            f"“{value}” reads like the built-in prompt set “{builtin}”: choose a name of your own (names that start "
            "like a built-in set's, in any case, spacing or punctuation, are kept for the built-in sets)."
        )


class PromptSetUploadForm(forms.Form):
    name = forms.CharField(max_length=128, validators=[_name_check])
    file = forms.FileField(
        help_text='JSONL or JSON: {"prompt": ...} or {"conversations": [...]}, with an optional "category"'
    )

    def clean_file(self) -> bytes:
        upload = self.cleaned_data["file"]
        if upload.size > MAX_UPLOAD_BYTES:
            raise forms.ValidationError(f"The file is {upload.size} bytes; at most {MAX_UPLOAD_BYTES} are accepted.")
        return bytes(upload.read(MAX_UPLOAD_BYTES + 1))
