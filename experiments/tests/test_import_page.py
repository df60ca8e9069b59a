"""The import page takes what `POST /api/imports` takes: result files or an archive of them, and the same given
fields; it refuses the same way, names the file, the line and the field, and writes nothing then."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from experiments.models import Experiment, Run

from .factories import make_host
from .test_import_archives import _tar
from .test_import_bench_serving import C4, C128, STATED, _jsonl

URL = "/experiments/import/"


def _upload(name: str, content: str | bytes) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, content.encode() if isinstance(content, str) else content)


@pytest.mark.django_db
def test_a_member_sees_the_form_and_a_viewer_may_not(client, member, viewer):
    client.force_login(viewer)
    assert client.get(URL).status_code == 403
    client.force_login(member)

    page = client.get(URL).content.decode()

    assert 'id="import-form"' in page and 'name="model_path"' in page and "CLI --tp-size" in page


@pytest.mark.django_db
def test_the_two_real_files_through_the_page_are_two_experiments_and_again_nothing(client, member):
    make_host(name="gpu-8")
    client.force_login(member)

    def post():
        files = [_upload("c4.jsonl", _jsonl(C4)), _upload("c128.jsonl", _jsonl(C128))]
        return client.post(URL, {"host": "gpu-8", "format": "auto", "uploads": files, **STATED}, follow=True)

    done = post()
    again = post()

    assert done.status_code == 200
    assert sorted(e.profile.num_prompts for e in Experiment.objects.all()) == [20, 256]
    assert "Imported 1 run(s) into" in done.content.decode()
    assert "c4.jsonl: imported before (the same bytes): nothing changed." in again.content.decode()
    assert Run.objects.count() == 2


@pytest.mark.django_db
def test_a_refused_file_or_archive_is_named_and_nothing_is_written(client, member):
    make_host(name="gpu-8")
    client.force_login(member)

    unstated = client.post(URL, {"host": "gpu-8", "format": "auto", "uploads": [_upload("c4.jsonl", _jsonl(C4))]})
    attack = client.post(URL, {"host": "gpu-8", "format": "auto",
                               "uploads": [_upload("n.tar.gz", _tar([("../x.jsonl", b"{}")]))]})  # fmt: skip

    assert unstated.status_code == 400
    assert ("c4.jsonl: line 1: server_info: null (backend sglang-oai): state the served model&#x27;s path with "
            "`model_path` / --model") in unstated.content.decode()  # fmt: skip
    assert attack.status_code == 400 and "a path that climbs out of the archive" in attack.content.decode()
    assert not Run.objects.exists() and not Experiment.objects.exists()


@pytest.mark.django_db
def test_the_run_page_says_which_fields_the_importer_stated(client, member):
    make_host(name="gpu-8")
    client.force_login(member)
    client.post(URL, {"host": "gpu-8", "format": "auto", "uploads": [_upload("c4.jsonl", _jsonl(C4))], **STATED})

    page = client.get(Run.objects.get().get_absolute_url()).content.decode()

    assert "stated by the importer, not the file: model_path, speculative_algorithm" in page
