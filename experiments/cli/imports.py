"""`specdash import`: result files, folders of them and archives posted to `POST /api/imports`.

A folder is packed here into one .tar.gz of its result files (each keeping its mtime, so the server places it in
history when it was measured) and sent as the import's archive; a .zip or .tar.gz is sent as it is. Links are not
followed and hidden files are left out, as the server's archive reader refuses and skips them."""

from __future__ import annotations

import argparse
import base64
import io
import os
import sys
import tarfile
from datetime import UTC, datetime

from . import credentials
from .client import Api, ApiError
from .output import emit_json, table

# As the server reads an archive (formats/result_archives.py): the result files' suffixes and the archive's.
RESULT_SUFFIXES = (".jsonl", ".json")
ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz")
MAX_ARCHIVE_BYTES = 2 * 1024 * 1024
MAX_FOLDER_FILES = 200


def stated_server(args: argparse.Namespace) -> dict:
    """What the files do not say, from the flags (the API's `given`, the same names for every format)."""
    pairs = (
        ("model_path", args.model),
        ("engine", args.engine),
        ("concurrency", args.concurrency),
        ("tp_size", args.tp_size),
        ("speculative_algorithm", args.speculative_algorithm),
        ("speculative_draft_model_path", args.draft_model),
        ("speculative_num_steps", args.num_steps),
        ("speculative_eagle_topk", args.topk),
        ("speculative_num_draft_tokens", args.num_draft_tokens),
    )
    return {key: value for key, value in pairs if value is not None}


def import_files(args: argparse.Namespace) -> int:
    """Post the files (and one folder or archive) to `POST /api/imports`: every file is checked by the server and,
    on one error anywhere, nothing is imported (the error names the file, the line and the field)."""
    given = stated_server(args)
    files: list[dict] = []
    archive: dict | None = None
    for path in args.files:
        if path != "-" and (os.path.isdir(path) or path.lower().endswith(ARCHIVE_SUFFIXES)):
            if archive is not None:
                raise ApiError("one folder or archive at a time (its files are imported together)")
            archive = _archive(path, args.format, given)
            continue
        files.append(_file(path, args.format, given))
    body: dict = {"files": files}
    if archive is not None:
        body["archive"] = archive
    for key in ("experiment", "name", "host"):
        if getattr(args, key) is not None:
            body[key] = getattr(args, key)
    with Api(credentials.load()) as api:
        result = api.post("/imports", body)
        if args.json:
            emit_json(result)
            return 0
        for made in result.get("experiments") or []:
            count = len(made["runs"])
            print(
                f"Imported {count} run(s) into experiment {made['id']} ({made['profile']}): {api.page_url(made['url'])}"
            )
        for skipped in result.get("skipped") or []:
            print(f"Skipped {skipped['file']}: imported before as run(s) {', '.join(map(str, skipped['runs']))} of "
                  f"experiment {skipped['experiment']} (the same bytes); nothing changed")  # fmt: skip
    rows = [(r["id"], r["config"], r["measurements"], r["imported_from"]["file"]) for r in result["runs"]]
    if rows:
        print(table(("run", "config", "cells", "file"), rows))
    return 0


def _file(path: str, fmt: str, given: dict) -> dict:
    try:
        if path == "-":
            name, content, mtime = "stdin", sys.stdin.read(), None
        else:
            with open(path, encoding="utf-8") as file:
                name, content = os.path.basename(path), file.read()
            mtime = os.stat(path).st_mtime
    except (OSError, UnicodeDecodeError) as exc:
        raise ApiError(f"cannot read {path}: {exc}") from None
    entry: dict = {"name": name, "format": fmt, "content": content}
    if mtime is not None:
        # When the file was written: its runs' place in history where its lines state no date.
        entry["measured_at"] = datetime.fromtimestamp(mtime, tz=UTC).isoformat()
    if given:
        entry["given"] = given
    return entry


def _archive(path: str, fmt: str, given: dict) -> dict:
    name = os.path.basename(os.path.normpath(path)) or "folder"
    try:
        if os.path.isdir(path):
            data, name = _pack(path), f"{name}.tar.gz"
        else:
            with open(path, "rb") as file:
                data = file.read(MAX_ARCHIVE_BYTES + 1)
    except OSError as exc:
        raise ApiError(f"cannot read {path}: {exc}") from None
    if len(data) > MAX_ARCHIVE_BYTES:
        raise ApiError(f"{path}: more than {MAX_ARCHIVE_BYTES:,} bytes packed; import it in parts")
    entry: dict = {"name": name, "format": fmt, "content_base64": base64.b64encode(data).decode()}
    if given:
        entry["given"] = given
    return entry


def _pack(folder: str) -> bytes:
    """The folder's result files as a .tar.gz, by their paths under it, each with its mtime; links not followed."""
    found = []
    for root, dirs, names in os.walk(folder, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            path = os.path.join(root, name)
            if name.startswith(".") or not name.lower().endswith(RESULT_SUFFIXES) or os.path.islink(path):
                continue
            found.append(path)
            if len(found) > MAX_FOLDER_FILES:
                raise ApiError(f"{folder}: more than {MAX_FOLDER_FILES} result files; import it in parts")
    if not found:
        raise ApiError(f"{folder}: no result file ({', '.join(RESULT_SUFFIXES)}) in it")
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as archive:
        for path in found:
            info = archive.gettarinfo(path, arcname=os.path.relpath(path, folder).replace(os.sep, "/"))
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with open(path, "rb") as file:
                archive.addfile(info, file)
    return out.getvalue()
