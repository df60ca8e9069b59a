"""Importing a result file's per-request details (bench_serving --output-details, vllm bench serve --save-detailed):
each request becomes a request row like the ones specdash's own client stores, so goodput and SLO attainment are
judged on an imported cell; details that are not as the tools write them refuse the file, naming line and field."""

from __future__ import annotations

import json

import pytest

from experiments.formats.imported_results import ResultFileError, parse
from experiments.models import Experiment, Measurement
from experiments.reads.reports import build_report

from .factories import make_host
from .test_imports import BASELINE, VLLM, _files, _post, _with

# Four requests of the first line (c=1): TTFT and the gaps between chunks in seconds, as the tools write them. The
# third failed; the fourth answered a single token (no TPOT, no gap).
DETAILS = {
    "ttfts": [0.030, 0.040, 0.0, 0.050],
    "itls": [[0.010, 0.012, 0.014], [0.060, 0.060], [], []],
    "output_lens": [4, 3, 0, 1],
    "errors": ["", "", "Server disconnected", ""],
    "input_lens": [128, 128, 128, 128],
    "generated_texts": ["a b c d", "e f g", "", "h"],
}


def _detailed(text: str, **changes) -> str:
    return _with(text, 0, **(DETAILS | changes))


def test_each_request_of_the_details_becomes_a_request_row():
    (run,) = parse(_detailed(BASELINE))

    first = run.cells[0]
    assert first.metrics["requests"] == [
        {"ok": True, "output_len": 4, "ttft_ms": pytest.approx(30.0), "tpot_ms": pytest.approx(12.0),
         "itl_ms": pytest.approx(12.0), "e2e_latency_ms": pytest.approx(66.0)},
        {"ok": True, "output_len": 3, "ttft_ms": pytest.approx(40.0), "tpot_ms": pytest.approx(60.0),
         "itl_ms": pytest.approx(60.0), "e2e_latency_ms": pytest.approx(160.0)},
        {"ok": False, "output_len": 0, "ttft_ms": None, "tpot_ms": None, "itl_ms": None, "e2e_latency_ms": None},
        {"ok": True, "output_len": 1, "ttft_ms": pytest.approx(50.0), "tpot_ms": None, "itl_ms": None,
         "e2e_latency_ms": pytest.approx(50.0)},
    ]  # fmt: skip
    assert "requests" not in run.cells[1].metrics  # a line written without details has none
    assert not any(isinstance(v, list) for v in first.raw.values())


def test_a_vllm_file_saved_with_its_details_has_them_too():
    row = json.loads(VLLM) | {k: v for k, v in DETAILS.items() if k != "errors"}

    (run,) = parse(json.dumps(row))

    assert [r["ok"] for r in run.cells[0].metrics["requests"]] == [True, True, True, True]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"itls": None}, "line 1: ttfts: request details need ttfts, itls, output_lens together; missing itls"),
        ({"output_lens": [4, 3, 0]}, "line 1: ttfts: the request details differ in length"),
        ({"ttfts": [0.03, "fast", 0.0, 0.05]}, "line 1: request 1: ttfts: not a number of seconds"),
        ({"ttfts": [0.03, -1, 0.0, 0.05]}, "line 1: request 1: ttfts: not a number of seconds"),
        ({"itls": [[0.01], [float("nan")], [], []]}, "line 1: request 1: itls: not a list of numbers of seconds"),
        ({"output_lens": [4, 3.5, 0, 1]}, "line 1: request 1: output_lens: not a token count"),
        ({"errors": ["", None, "", ""]}, "line 1: request 1: errors: not text"),
        ({"ttfts": {"0": 0.03}}, "line 1: ttfts: not a list of at most 100000 entries"),
    ],
)
def test_details_that_are_not_as_the_tools_write_them_refuse_the_file(changes, message):
    with pytest.raises(ResultFileError) as refused:
        parse(_detailed(BASELINE, **changes))

    assert any(error.startswith(message) for error in refused.value.errors), refused.value.errors


@pytest.mark.django_db
def test_an_imported_cell_has_goodput_and_attainment_under_its_experiments_slo(client, owner):
    make_host(name="gpu-8")
    created = _post(client, owner, {"host": "gpu-8", "files": _files(("b.jsonl", BASELINE))}).json()
    experiment = Experiment.objects.get(pk=created["id"])
    profile = experiment.profile
    profile.slo_metric, profile.slo_percentile, profile.slo_limit_ms = "tpot", "p90", 50.0
    profile.save()

    response = _post(client, owner, {"experiment": experiment.pk, "files": _files(("d.jsonl", _detailed(BASELINE)))})

    assert response.status_code == 201, response.content
    stored = Measurement.objects.get(run__experiment=experiment, run__launch_index=1, concurrency=1)
    assert len(stored.requests) == 4
    view = build_report(Experiment.objects.get(pk=experiment.pk)).deployment
    assert view is not None
    (cell, _) = view.cells[experiment.baseline.name]
    # Pooled with the first import's pass, which kept no rows: a part would pass for the whole, so no figure.
    assert cell.goodput is None
    # Alone, the detailed pass is judged on its rows: TPOT 12 and the single token (no TPOT) meet 50 ms, 60 does
    # not, the failed request counts against attainment: 2 of 4 over the line's 25.6 s.
    Measurement.objects.filter(run__experiment=experiment, run__launch_index=0).delete()
    view = build_report(Experiment.objects.get(pk=experiment.pk)).deployment
    assert view is not None
    (cell, _) = view.cells[experiment.baseline.name]
    assert cell.goodput is not None and (cell.goodput.met, cell.goodput.total) == (2, 4)
    assert cell.goodput.requests_per_s == pytest.approx(2 / 25.6)
    assert cell.goodput.output_tok_s == pytest.approx(5 / 25.6)


@pytest.mark.django_db
def test_a_new_imported_experiment_takes_its_slo_and_judges_the_detailed_cells_under_it(client, owner):
    make_host(name="gpu-8")
    body = {"host": "gpu-8", "files": _files(("d.jsonl", _detailed(BASELINE))),
            "slo": {"metric": "tpot", "percentile": "p90", "limit_ms": 50}}  # fmt: skip

    response = _post(client, owner, body)

    assert response.status_code == 201, response.content
    experiment = Experiment.objects.get(pk=response.json()["id"])
    assert experiment.profile.slo is not None and experiment.profile.slo.key == "p90_tpot_ms"
    view = build_report(experiment).deployment
    assert view is not None
    (cell, _) = view.cells[experiment.baseline.name]
    assert cell.goodput is not None and (cell.goodput.met, cell.goodput.total) == (2, 4)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("slo", "status", "field"),
    [
        ({"metric": "tpot", "percentile": "p90"}, 422, "slo.limit_ms"),  # whole or not at all
        ({"metric": "tpot; rm -rf /", "percentile": "p90", "limit_ms": 50}, 422, "slo.metric"),
        ({"metric": "tpot", "percentile": "p90", "limit_ms": -1}, 422, "slo.limit_ms"),
    ],
)
def test_an_import_slo_that_is_not_whole_or_valid_is_refused_naming_it(client, owner, slo, status, field):
    make_host(name="gpu-8")

    response = _post(client, owner, {"host": "gpu-8", "files": _files(("b.jsonl", BASELINE)), "slo": slo})

    assert response.status_code == status, response.content
    assert field in response.json()["errors"], response.json()
    assert not Experiment.objects.exists()


@pytest.mark.django_db
def test_an_import_into_an_existing_experiment_keeps_that_experiments_slo(client, owner):
    make_host(name="gpu-8")
    created = _post(client, owner, {"host": "gpu-8", "files": _files(("b.jsonl", BASELINE))}).json()
    runs = Measurement.objects.count()

    response = _post(client, owner, {"experiment": created["id"], "files": _files(("d.jsonl", BASELINE)),
                                     "slo": {"metric": "ttft", "percentile": "p99", "limit_ms": 500}})  # fmt: skip

    assert response.status_code == 409 and "own SLO" in response.json()["errors"]["slo"][0]
    assert Measurement.objects.count() == runs
