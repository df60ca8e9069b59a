"""A folder of result files packed as one archive (pure): `.zip`, `.tar`, `.tar.gz` / `.tgz`, read into its result
files, bounded.

Allowed by list: regular files whose names end in a result file's suffix (RESULT_SUFFIXES), under plain relative
paths; folders are walked. Refused, naming the member: a link (symbolic or hard), a device or any other kind of
member, an absolute path or one that climbs out (`..`), a name with a backslash or a control character, a member
over MAX_MEMBER_BYTES, more than MAX_MEMBERS result files or MAX_ENTRIES entries, more than MAX_TOTAL_BYTES in all,
text that is not UTF-8. The sizes are checked before a member is read, and its reading stops at its stated size, so
a compression bomb costs at most the bounds. Nothing is written to disk. Other files (a log beside the results, an
editor's or a Mac's hidden files) are skipped and listed."""

from __future__ import annotations

import io
import posixpath
import stat
import tarfile
import zipfile
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime

MAX_ARCHIVE_BYTES = 2 * 1024 * 1024  # as sent: the API's body holds no more
MAX_MEMBERS = 200  # result files
MAX_ENTRIES = 1000  # every entry, folders and skipped files too
MAX_MEMBER_BYTES = 2_000_000  # a result file's most (the API's for one file)
MAX_TOTAL_BYTES = 64 * 1024 * 1024
MAX_NAME = 255
RESULT_SUFFIXES = (".jsonl", ".json")
SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz")


class ArchiveRefused(ValueError):
    """An archive that is not read: `errors`, each naming the member where there is one."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


@dataclass(frozen=True)
class Member:
    name: str  # the path inside the archive, plain and relative
    content: bytes
    mtime: datetime | None  # as the archive states it (UTC); None where it states none


@dataclass
class Contents:
    members: list[Member] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # entries that are not result files, by name


def is_archive(name: str) -> bool:
    return name.lower().endswith(SUFFIXES)


def read_archive(name: str, data: bytes) -> Contents:
    """The result files of an archive (zip or tar, gzip'd or not, told by its bytes, not its name)."""
    if len(data) > MAX_ARCHIVE_BYTES:
        raise ArchiveRefused([f"{name}: at most {MAX_ARCHIVE_BYTES:,} bytes are accepted (it has {len(data):,})"])
    if zipfile.is_zipfile(io.BytesIO(data)):
        return _read_zip(data)
    try:
        archive = tarfile.open(fileobj=io.BytesIO(data), mode="r:*")
    except (tarfile.TarError, EOFError, OSError):
        raise ArchiveRefused([f"{name}: not a zip, tar or tar.gz archive"]) from None
    with archive:
        return _read_tar(archive)


def _read_zip(data: bytes) -> Contents:
    contents, errors = Contents(), list[str]()
    total = 0
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise ArchiveRefused([f"not a readable zip archive ({exc})"]) from None
    with archive:
        entries = archive.infolist()
        if len(entries) > MAX_ENTRIES:
            raise ArchiveRefused([f"at most {MAX_ENTRIES} entries are accepted (it has {len(entries)})"])
        for info in entries:
            mode = info.external_attr >> 16
            kind = stat.S_IFMT(mode) if mode else 0
            if info.is_dir():
                if (problem := _plain_name(info.filename.rstrip("/"))) is not None:
                    errors.append(f"{info.filename[:MAX_NAME]!r}: {problem}")
                continue
            if kind and kind != stat.S_IFREG:
                errors.append(f"{info.filename[:MAX_NAME]!r}: {_kind(kind)}: only regular files are read")
                continue
            try:
                total = _take(contents, errors, info.filename, info.file_size, total,
                              lambda i=info: _zip_bytes(archive, i), _zip_time(info))  # fmt: skip
            except (zipfile.BadZipFile, EOFError, OSError, zlib.error) as exc:
                errors.append(f"{info.filename[:MAX_NAME]!r}: damaged ({str(exc)[:120]})")
            if len(errors) >= 20:
                break
    if errors:
        raise ArchiveRefused(errors[:20])
    return contents


def _zip_bytes(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    # At most the stated size and one byte more: a member whose data runs past its header is refused, not read.
    with archive.open(info) as member:
        return member.read(info.file_size + 1)


def _zip_time(info: zipfile.ZipInfo) -> datetime | None:
    try:
        return datetime(*info.date_time, tzinfo=UTC)
    except ValueError:
        return None


def _read_tar(archive: tarfile.TarFile) -> Contents:
    contents, errors = Contents(), list[str]()
    total = 0
    entries = 0
    try:
        while (info := archive.next()) is not None:
            entries += 1
            if entries > MAX_ENTRIES:
                raise ArchiveRefused([*errors, f"at most {MAX_ENTRIES} entries are accepted"])
            if info.isdir():
                if (problem := _plain_name(info.name.rstrip("/"))) is not None:
                    errors.append(f"{info.name[:MAX_NAME]!r}: {problem}")
                continue
            if not info.isreg():
                what = "a symbolic link" if info.issym() else "a hard link" if info.islnk() else "not a regular file"
                errors.append(f"{info.name[:MAX_NAME]!r}: {what}: only regular files are read")
                continue
            mtime = datetime.fromtimestamp(info.mtime, tz=UTC) if 0 < info.mtime < 2**33 else None
            total = _take(contents, errors, info.name, info.size, total, lambda i=info: _tar_bytes(archive, i), mtime)
            if len(errors) >= 20:
                break
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        errors.append(f"the archive is damaged ({str(exc)[:120]})")
    if errors:
        raise ArchiveRefused(errors[:20])
    return contents


def _tar_bytes(archive: tarfile.TarFile, info: tarfile.TarInfo) -> bytes:
    member = archive.extractfile(info)
    if member is None:
        return b""
    with member:
        return member.read(info.size + 1)


def _take(contents: Contents, errors: list[str], name: str, size: int, total: int, read, mtime) -> int:
    """One regular file: a result file read within the bounds, another one listed as skipped. Returns the total."""
    shown = repr(name[:MAX_NAME])
    if (problem := _plain_name(name)) is not None:
        errors.append(f"{shown}: {problem}")
        return total
    # Every file's stated size counts, a skipped one's too: passing over a member of a compressed tar decompresses
    # it, so the next header is reached only within the bounds. Past one, reading stops at once.
    if total + size > MAX_TOTAL_BYTES:
        raise ArchiveRefused([*errors, f"{shown}: more than {MAX_TOTAL_BYTES:,} bytes in all"])
    base = posixpath.basename(name)
    hidden = base.startswith(".") or any(part.startswith(".") or part == "__MACOSX" for part in name.split("/"))
    if hidden or not base.lower().endswith(RESULT_SUFFIXES):
        contents.skipped.append(name)
        return total + size
    if len(contents.members) >= MAX_MEMBERS:
        raise ArchiveRefused([*errors, f"at most {MAX_MEMBERS} result files are accepted"])
    if size > MAX_MEMBER_BYTES:
        raise ArchiveRefused([*errors, f"{shown}: {size:,} bytes; a result file may have at most {MAX_MEMBER_BYTES:,}"])
    data = read()
    if len(data) != size:
        errors.append(f"{shown}: its data does not match its stated size")
        return total
    contents.members.append(Member(name=name, content=data, mtime=mtime))
    return total + size


def _plain_name(name: str) -> str | None:
    """Why a member's path is not a plain relative one, or None."""
    if not name or len(name) > MAX_NAME:
        return f"a name of 1 to {MAX_NAME} characters"
    if "\\" in name or any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        return "a name with a backslash or a control character"
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        return "an absolute path"
    if ".." in name.split("/"):
        return "a path that climbs out of the archive (..)"
    return None


def _kind(kind: int) -> str:
    return "a symbolic link" if kind == stat.S_IFLNK else "not a regular file"
