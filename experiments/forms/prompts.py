"""Uploading a prompt set: the name and the file; the file's content is checked by prompt_sampling.parse_upload."""

from __future__ import annotations

from django import forms

from experiments.formats.prompt_sampling import MAX_UPLOAD_BYTES

from .values import no_control_chars


def _name_check(value: str) -> None:
    no_control_chars(value, "The name")


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
