"""What an import may hold, shared by the API (`POST /api/imports`), the import page and so the CLI: result files
(or an archive of them) read and checked, the importer's statement of what they do not say (`given`), and the shape
rule of an import into an existing experiment. Every refusal is keyed by where it is (`files[i]`, `archive`) and
names the file, the line and the field."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django import forms
from django.core.files.uploadedfile import UploadedFile
from django.utils import timezone

from experiments.formats import imported_results, result_archives
from experiments.formats.imported_results import ENGINES, Given, ImportedFile, read_given
from experiments.formats.imported_results.common import MAX_TEXT

from ..models import Experiment, Host

MAX_FILES = 20
MAX_FILE_CHARS = 2_000_000  # the request body is bounded by DATA_UPLOAD_MAX_MEMORY_SIZE as well
MAX_FILE_NAME = 255
EXPERIMENT_NAME_MAX = 200  # Experiment.name
FORMATS = (imported_results.AUTO, *imported_results.FORMATS)
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)  # no result file is older: a time before is a wrong clock


@dataclass(frozen=True)
class FileIn:
    """One file as the importer sends it: its text (or bytes, UTF-8), its format, what it does not say and when it
    was measured where its lines do not say (an archive member's or a file's mtime)."""

    name: str
    content: str | bytes
    format: str = imported_results.AUTO
    given: Mapping[str, Any] | None = None
    measured_at: datetime | None = None


def read_given_of(value: Any, where: str, errors: dict[str, list[str]]) -> Given:
    """The importer's statement, checked; its errors under `<where>.given`."""
    problems: list[str] = []
    given = read_given(value, problems)
    if problems:
        errors.setdefault(f"{where}.given", []).extend(problems)
    return given


def read_files(
    items: Sequence[tuple[str, FileIn]], errors: dict[str, list[str]], unreadable: set[str]
) -> list[tuple[str, ImportedFile]]:
    """Each file read by `read_file` (with where it is), except that the AIPerf files of one benchmark given together
    (its summary, per-request export and server-metrics export: imported_results.aiperf.groups) are read as that
    benchmark's one run, filed under the first of them; the others are kept with no run of their own."""
    texts = [_text(item) for _, item in items]
    joined = {
        group[0]: group[1:]
        for group in imported_results.aiperf.groups(texts)
        if all(items[i][1].format in (imported_results.AUTO, imported_results.AIPERF) for i in group)
    }
    companions = {i for rest in joined.values() for i in rest}
    read: list[tuple[str, ImportedFile]] = []
    for i, (where, item) in enumerate(items):
        if i in companions:
            continue
        together = [(items[j][1].name.strip(), texts[j]) for j in joined.get(i, [])]
        if (done := read_file(where, item, errors, unreadable, together=together)) is None:
            continue
        read.append((where, done))
        for j in joined.get(i, []):
            other = items[j][1]
            sha = hashlib.sha256(texts[j].encode("utf-8")).hexdigest()
            kept = ImportedFile(other.name.strip(), imported_results.AIPERF, [], sha, other.measured_at)
            read.append((items[j][0], kept))
    return read


def _text(item: FileIn) -> str:
    """A file's text where it may join others (valid UTF-8 within the size bound), else "" (read alone)."""
    content = item.content
    if isinstance(content, bytes):
        try:
            content = content.decode("utf-8")
        except UnicodeDecodeError:
            return ""
    return content if isinstance(content, str) and len(content) <= MAX_FILE_CHARS else ""


def read_file(
    where: str,
    item: FileIn,
    errors: dict[str, list[str]],
    unreadable: set[str],
    *,
    together: Sequence[tuple[str, str]] = (),
) -> ImportedFile | None:
    """One file read by its format's reader (with the files of its benchmark `together`, (name, text) each: one
    run); each refusal under `where` names the file (and the line and field); `where` joins `unreadable` when the
    file's text (not a field the schema states) is what is refused."""
    problems = []
    name = item.name.strip() if isinstance(item.name, str) else ""
    if not name or len(name) > MAX_FILE_NAME:
        problems.append(f"name: a file name of at most {MAX_FILE_NAME} characters")
    if item.format not in FORMATS:
        problems.append(f"format: one of {', '.join(FORMATS)}")
    content = item.content
    if isinstance(content, bytes):
        try:
            content = content.decode("utf-8")
        except UnicodeDecodeError as exc:
            problems.append(f"content: not UTF-8 text (byte {exc.start})")
    if not isinstance(content, str):
        problems.append("content: the file's text is required")
    elif len(content) > MAX_FILE_CHARS:
        problems.append(f"content: at most {MAX_FILE_CHARS} characters are accepted")
    if item.measured_at is not None and not EARLIEST <= item.measured_at <= timezone.now():
        problems.append("measured_at: a time from 2000 to now")
    stated: list[str] = []
    given = read_given(item.given, stated)
    problems += stated
    if problems:
        errors.setdefault(where, []).extend(f"{name[:80] or 'file'}: {p}" for p in problems)
        return None
    assert isinstance(content, str)
    detected = imported_results.detect(content) if item.format == imported_results.AUTO else item.format
    try:
        if together:
            runs = [imported_results.aiperf.read_run([(name, content), *together], given)]
        else:
            runs = imported_results.parse(content, detected, given)
    except imported_results.ResultFileError as exc:
        errors[where] = [f"{name[:80]}: {message}" for message in exc.errors]
        unreadable.add(where)
        return None
    sha = hashlib.sha256(content.encode("utf-8")).hexdigest()
    return ImportedFile(name=name, format=detected, runs=runs, sha256=sha, measured_at=item.measured_at)


def read_archive(
    where: str,
    name: str,
    data: bytes,
    errors: dict[str, list[str]],
    unreadable: set[str],
    *,
    fmt: str = imported_results.AUTO,
    given: Mapping[str, Any] | None = None,
) -> tuple[list[ImportedFile], list[str]]:
    """An archive's result files, each read as a file named `<archive>/<path>` with the archive's format and given,
    placed at its mtime where its lines state no date. Returns the files and the names of the entries skipped (not
    result files). A refused archive's errors are under `where`; each member's under `where[path]`."""
    try:
        contents = result_archives.read_archive(name, data)
    except result_archives.ArchiveRefused as exc:
        errors[where] = [f"{name[:80]}: {message}" for message in exc.errors]
        unreadable.add(where)
        return [], []
    if not contents.members:
        errors[where] = [f"{name[:80]}: holds no result file ({', '.join(result_archives.RESULT_SUFFIXES)})"]
        unreadable.add(where)
        return [], contents.skipped
    items = []
    now = timezone.now()
    for member in contents.members:
        mtime = member.mtime if member.mtime is not None and EARLIEST <= member.mtime <= now else None
        item = FileIn(f"{name}/{member.name}"[:MAX_FILE_NAME], member.content, fmt, given, mtime)
        items.append((f"{where}[{member.name[:80]}]", item))
    return [file for _, file in read_files(items, errors, unreadable)], contents.skipped


def shape_refusals(experiment: Experiment, files: list[tuple[str, ImportedFile]]) -> dict[str, list[str]]:
    """An import into an existing experiment: every run must have the request shape of its profile, or it would be
    filed under a profile that did not measure it. Each other one is refused, naming the file and its lines."""
    profile = experiment.profile
    want = (profile.dataset, profile.input_len, profile.output_len, profile.num_prompts)
    errors: dict[str, list[str]] = {}
    for where, file in files:
        for run in file.runs:
            if run.shape != want:
                lines = ", ".join(str(cell.line) for cell in run.cells[:10])
                errors.setdefault(where, []).append(
                    f"{file.name[:80]}: line {lines}: measured {_shape_text(run.shape)}, but experiment "
                    f"{experiment.pk}'s profile is {_shape_text(want)}; import it into a new experiment (give a "
                    f"host instead of the experiment)"
                )
    return errors


def _shape_text(shape: tuple[str, int, int, int]) -> str:
    dataset, input_len, output_len, prompts = shape
    return f"{dataset} {input_len} in / {output_len} out, {prompts} prompts"


class _MultipleFiles(forms.ClearableFileInput):
    allow_multiple_selected = True


class _MultipleFileField(forms.FileField):
    """Several files in one field (Django's FileField cleans one)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(widget=_MultipleFiles(), **kwargs)

    def clean(self, data: Any, initial: Any = None) -> list[Any]:
        items = data if isinstance(data, list | tuple) else [data]
        return [super(_MultipleFileField, self).clean(item, initial) for item in items]


class ImportForm(forms.Form):
    """The import page: result files or one archive of them, into a new experiment on a host or an existing one,
    with what the files do not say (the API's `given`, the same names)."""

    host = forms.ModelChoiceField(Host.objects.order_by("name"), to_field_name="name", required=False)
    experiment = forms.IntegerField(required=False, min_value=1, label="Or into experiment (id)")
    name = forms.CharField(max_length=EXPERIMENT_NAME_MAX, required=False, label="New experiment's name")
    format = forms.ChoiceField(choices=[(f, f) for f in FORMATS], initial=imported_results.AUTO)
    uploads = _MultipleFileField(
        label="Result files",
        help_text=f"bench_serving JSONL, vllm bench serve JSON, ...; or one .zip/.tar.gz of a folder of them (at most "
        f"{MAX_FILES} files)",
    )
    model_path = forms.CharField(max_length=MAX_TEXT, required=False, label="Model path")
    engine = forms.ChoiceField(choices=[("", "—"), *((e, e) for e in ENGINES)], required=False)
    tp_size = forms.IntegerField(min_value=1, required=False, label="TP size")
    speculative_algorithm = forms.CharField(max_length=MAX_TEXT, required=False, label="Speculative algorithm")
    speculative_draft_model_path = forms.CharField(max_length=MAX_TEXT, required=False, label="Draft model path")
    speculative_num_steps = forms.IntegerField(min_value=1, required=False, label="Speculative steps")
    speculative_eagle_topk = forms.IntegerField(min_value=1, required=False, label="Topk")
    speculative_num_draft_tokens = forms.IntegerField(min_value=1, required=False, label="Draft tokens")
    concurrency = forms.IntegerField(min_value=1, required=False, label="Concurrency")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in imported_results.GIVEN:
            self.fields[name].help_text = f"Where the files do not say it (CLI {imported_results.GIVEN_FLAGS[name]})"

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not data.get("host") and not data.get("experiment"):
            self.add_error("host", "A new experiment needs a host (or give an experiment's id).")
        return data

    def given(self) -> dict[str, Any]:
        return {name: v for name in imported_results.GIVEN if (v := self.cleaned_data.get(name)) not in (None, "")}

    def read(
        self, uploads: list[UploadedFile], errors: dict[str, list[str]]
    ) -> tuple[list[tuple[str, ImportedFile]], list[str]]:
        """The uploaded files read as the API reads them: each archive (.zip, .tar.gz) expanded, bounded."""
        if len(uploads) > MAX_FILES:
            errors["uploads"] = [f"At most {MAX_FILES} files at once (or one archive of them)."]
            return [], []
        fmt, given = self.cleaned_data["format"], self.given()
        read: list[tuple[str, ImportedFile]] = []
        skipped: list[str] = []
        unreadable: set[str] = set()
        for i, upload in enumerate(uploads):
            name = (upload.name or f"file {i + 1}")[:MAX_FILE_NAME]
            limit = result_archives.MAX_ARCHIVE_BYTES if result_archives.is_archive(name) else MAX_FILE_CHARS * 4
            if upload.size is None or upload.size > limit:
                errors.setdefault("uploads", []).append(f"{name}: at most {limit:,} bytes are accepted")
                continue
            data = upload.read()
            if result_archives.is_archive(name):
                members, left = read_archive(name, name, data, errors, unreadable, fmt=fmt, given=given)
                read += [(f"{name}[{f.name[len(name) + 1 :]}]", f) for f in members]
                skipped += left
            elif (file := read_file(name, FileIn(name, data, fmt, given), errors, unreadable)) is not None:
                read.append((name, file))
        return read, skipped
