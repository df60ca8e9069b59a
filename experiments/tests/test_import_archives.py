"""Importing a folder of result files at once: an archive (.zip, .tar.gz) through the API, a directory through
`specdash import`. The archive's attacks are refused by name (a path that climbs out, an absolute path, a link, a
device, a bomb, too many or too large members); each file is placed in history when it was measured (its member's
mtime), the history checks run over the imported nights, and importing the same file again changes nothing."""

from __future__ import annotations

import base64
import io
import json
import os
import tarfile
import time
import zipfile
from datetime import UTC, datetime

import pytest

from experiments.cli import credentials
from experiments.formats import result_archives
from experiments.formats.result_archives import ArchiveRefused, read_archive
from experiments.models import ApiToken, Experiment, Measurement, Run, Suspicion

from .cli_support import IN_PROCESS_URL
from .factories import make_host
from .test_imports import BASELINE, _post, _with

NIGHT = datetime(2026, 11, 1, 2, 0, tzinfo=UTC)


def _tar(members: list[tuple[str, bytes]], *, gz: bool = True, mtime: float = NIGHT.timestamp(), **kinds) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz" if gz else "w") as archive:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), mtime
            archive.addfile(info, io.BytesIO(data))
        for name, (kind, target) in kinds.items():
            info = tarfile.TarInfo(name.replace("__", "/"))
            info.type, info.linkname = kind, target
            archive.addfile(info)
    return out.getvalue()


def _zip(members: list[tuple[str, bytes]], *, symlink: str = "") -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members:
            info = zipfile.ZipInfo(name, date_time=(2026, 11, 1, 2, 0, 0))
            archive.writestr(info, data)
        if symlink:
            info = zipfile.ZipInfo(symlink)
            info.external_attr = (0o120777 << 16) | 0  # S_IFLNK, as `zip --symlinks` stores one
            archive.writestr(info, "/etc/passwd")
    return out.getvalue()


def _nights(count: int, *, drop_at: int | None = None) -> list[tuple[str, bytes]]:
    """One bench_serving file a night, each another measurement of the same server (its own bytes)."""
    files = []
    for night in range(count):
        scale = 0.7 if drop_at is not None and night >= drop_at else 1.0
        noise = 1 + 0.002 * (night % 3)
        content = _with(_with(BASELINE, 0, output_throughput=80.0 * scale * noise, duration=20 + night / 100), 1,
                        output_throughput=256.0 * scale * noise)  # fmt: skip
        files.append((f"2026-11-{night + 1:02d}/baseline.jsonl", content.encode()))
    return files


# The reader (pure) --------------------------------------------------------------------------------------------------


def test_it_reads_the_result_files_of_a_tar_gz_and_a_zip_and_skips_the_rest():
    tar = _tar([("night/a.jsonl", b"{}"), ("night/server.log", b"..."), ("night/._a.jsonl", b"x")])
    zipped = _zip([("night/a.jsonl", b"{}"), ("night/server.log", b"..."), ("__MACOSX/night/a.jsonl", b"x")])
    for data in (tar, zipped):
        contents = read_archive("n.tar.gz", data)

        assert [(m.name, m.content, m.mtime) for m in contents.members] == [("night/a.jsonl", b"{}", NIGHT)]
        assert "night/server.log" in contents.skipped


ATTACKS = [
    (_tar([("../../etc/cron.d/x.jsonl", b"{}")]), "'../../etc/cron.d/x.jsonl': a path that climbs out"),
    (_tar([("/etc/x.jsonl", b"{}")]), "'/etc/x.jsonl': an absolute path"),
    (_tar([("a\\..\\x.jsonl", b"{}")]), "a name with a backslash or a control character"),
    (_tar([], link__a_jsonl=(tarfile.SYMTYPE, "/etc/passwd")), "'link/a_jsonl': a symbolic link"),
    (_tar([], hard__a_jsonl=(tarfile.LNKTYPE, "/etc/passwd")), "'hard/a_jsonl': a hard link"),
    (_tar([], dev__null=(tarfile.CHRTYPE, "")), "'dev/null': not a regular file"),
    (_tar([], fifo=(tarfile.FIFOTYPE, "")), "'fifo': not a regular file"),
    (_zip([("../x.jsonl", b"{}")]), "'../x.jsonl': a path that climbs out"),
    (_zip([], symlink="a.jsonl"), "'a.jsonl': a symbolic link"),
    (b"not an archive at all", "n.tar.gz: not a zip, tar or tar.gz archive"),
]


# Named by the refusal: an id made from the archive's bytes would hold gzip's timestamp, and each test process
# would collect a differently named test.
@pytest.mark.parametrize(("data", "message"), ATTACKS, ids=[message for _, message in ATTACKS])
def test_an_archive_attack_is_refused_naming_the_member(data, message):
    with pytest.raises(ArchiveRefused) as refused:
        read_archive("n.tar.gz", data)

    assert any(message in error for error in refused.value.errors), refused.value.errors


def test_a_compression_bomb_is_refused_before_it_is_read(monkeypatch):
    # 64 MiB + 1 of zeros compress to a few dozen KiB: refused by the stated sizes, never decompressed whole.
    bomb = _tar([("a.jsonl", b"{}"), ("big.log", b"\0" * (result_archives.MAX_TOTAL_BYTES + 1))])
    assert len(bomb) < result_archives.MAX_ARCHIVE_BYTES

    started = time.perf_counter()
    with pytest.raises(ArchiveRefused, match=r"'big.log': more than 67,108,864 bytes in all"):
        read_archive("bomb.tar.gz", bomb)
    assert time.perf_counter() - started < 1.0
    with pytest.raises(ArchiveRefused, match=r"'big.jsonl': 2,000,001 bytes; a result file may have at most"):
        read_archive("n.zip", _zip([("big.jsonl", b" " * 2_000_001)]))
    monkeypatch.setattr(result_archives, "MAX_MEMBERS", 2)
    with pytest.raises(ArchiveRefused, match="at most 2 result files are accepted"):
        read_archive("n.zip", _zip([(f"{i}.jsonl", b"{}") for i in range(3)]))
    with pytest.raises(ArchiveRefused, match="at most 2,097,152 bytes are accepted"):
        read_archive("n.zip", b"\0" * (result_archives.MAX_ARCHIVE_BYTES + 1))


def test_a_zip_member_whose_data_runs_past_its_stated_size_is_refused():
    data = bytearray(_zip([("a.jsonl", b'{"a": 1}')]))
    # Shrink the stated size in the local and the central header: the reader stops at it and finds more.
    for offset in (22, data.rfind(b"PK\x01\x02") + 24):
        data[offset : offset + 4] = (3).to_bytes(4, "little")

    with pytest.raises(ArchiveRefused):
        read_archive("n.zip", bytes(data))


# Through the API ----------------------------------------------------------------------------------------------------


def _archive_body(data: bytes, name: str = "nightly.tar.gz", **extra) -> dict:
    return {"name": name, "content_base64": base64.b64encode(data).decode(), **extra}


@pytest.mark.django_db
def test_an_archive_is_imported_each_night_at_its_own_time_and_again_changes_nothing(client, owner):
    make_host(name="gpu-8")
    nights = _nights(3)
    data = _zip(nights)

    first = _post(client, owner, {"host": "gpu-8", "archive": _archive_body(data, "nightly.zip")})
    again = _post(client, owner, {"host": "gpu-8", "archive": _archive_body(data, "nightly.zip")})

    assert first.status_code == 201, first.json()
    runs = Run.objects.order_by("finished_at")
    assert runs.count() == 3 and Experiment.objects.count() == 1
    assert [(r.imported_from or {})["file"] for r in runs] == [f"nightly.zip/{name}" for name, _ in nights]
    assert all(r.finished_at == NIGHT for r in runs)  # each member's own mtime, not the import's
    assert again.status_code == 200 and again.json()["runs"] == []
    assert [s["reason"] for s in again.json()["skipped"]] == ["imported before (the same bytes): nothing changed"] * 3
    assert Run.objects.count() == 3 and Measurement.objects.count() == 6


@pytest.mark.django_db
def test_an_archive_member_that_is_refused_is_named_and_nothing_is_written(client, owner):
    make_host(name="gpu-8")
    data = _tar([("ok.jsonl", BASELINE.encode()), ("bad/e.jsonl", _with(BASELINE, 1, duration="x").encode())])
    traversal = _tar([("../x.jsonl", BASELINE.encode())])

    bad = _post(client, owner, {"host": "gpu-8", "archive": _archive_body(data)})
    attack = _post(client, owner, {"host": "gpu-8", "archive": _archive_body(traversal)})
    garbled = _post(client, owner, {"host": "gpu-8", "archive": {"name": "n.zip", "content_base64": "!!"}})

    assert bad.status_code == 400
    assert bad.json()["errors"] == {
        "archive[bad/e.jsonl]": ["nightly.tar.gz/bad/e.jsonl: line 2: duration: not a number"]
    }
    assert attack.status_code == 400
    assert attack.json()["errors"]["archive"] == [
        "nightly.tar.gz: '../x.jsonl': a path that climbs out of the archive (..)"
    ]
    assert garbled.status_code == 422 and "archive.content_base64" in garbled.json()["errors"]
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_the_history_checks_run_over_imported_nights(client, owner):
    """Eleven nights measured at one level, then four 30% lower: the check of the imported nights suspects the
    change, as it would over measured runs."""
    make_host(name="gpu-8")
    nights = _nights(15, drop_at=11)
    files = [{"name": name, "content": data.decode(), "measured_at": f"2026-11-{i + 1:02d}T02:00:00Z"}
             for i, (name, data) in enumerate(nights)]  # fmt: skip

    response = _post(client, owner, {"host": "gpu-8", "files": files})

    assert response.status_code == 201, response.json()
    runs = list(Run.objects.filter(imported_from__isnull=False).order_by("finished_at"))
    assert [r.finished_at.day for r in runs if r.finished_at] == list(range(1, 16))
    suspicion = Suspicion.objects.get()
    assert suspicion.run_id in [r.pk for r in runs[11:]]
    # As after a measured run: a confirming launch of the experiment's configs is queued on its host.
    assert Run.objects.filter(confirms=suspicion, state=Run.State.QUEUED).exists()


# The command: a directory ------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_specdash_import_takes_a_directory_each_file_at_its_mtime(cli, owner, tmp_path):
    _, token = ApiToken.issue(owner)
    credentials.save(IN_PROCESS_URL, token)
    make_host(name="gpu-8")
    folder = tmp_path / "nightly"
    for name, data in _nights(2):
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.utime(path, (NIGHT.timestamp(), NIGHT.timestamp()))
    (folder / "server.log").write_text("not a result")

    done = cli("import", str(folder), "--host", "gpu-8", "--json")
    again = cli("import", str(folder), "--host", "gpu-8")

    assert done.code == 0, done.err
    result = json.loads(done.out)
    assert sorted(r["imported_from"]["file"] for r in result["runs"]) == [
        "nightly.tar.gz/2026-11-01/baseline.jsonl", "nightly.tar.gz/2026-11-02/baseline.jsonl"]  # fmt: skip
    assert {r["measured_at"] for r in result["runs"]} == {NIGHT.isoformat()}
    assert again.code == 0 and again.out.count("imported before") == 2 and Run.objects.count() == 2
