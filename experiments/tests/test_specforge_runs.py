"""The SpecForge training directory reader (formats/specforge_runs.py), on listings `find` prints of real
directories: the simulated host's, and small ones with missing or odd files, each refused or skipped with its
reason, never guessed."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from experiments.formats import specforge_runs as sf

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "simhost" / "models"
SHIPPED = MODELS / "kimi-k2.5-sim-specforge"
RUN = "kimi-k2.5-sim-eagle3-sf"


def _find(directory: Path, *args: str) -> bytes:
    return subprocess.run(["find", ".", *args], cwd=directory, capture_output=True, check=True).stdout


def read(directory: Path, models_root: Path | None = None) -> sf.TrainingDirectory:
    """As the worker reads a host: the listing, the small files it names, the models root's drafts."""
    entries, skipped, problems = sf.parse_listing(_find(directory, "-mindepth", "1", "-maxdepth", "2", "-printf",
                                                        "%y\\0%s\\0%P\\0%l\\0"))  # fmt: skip
    files = {name: (directory / name).read_bytes()[:cap].decode() for name, cap in sf.files_to_read(entries)}
    drafts = []
    if models_root is not None:
        drafts = sf.parse_config_listing(_find(models_root, "-mindepth", "2", "-maxdepth", "2", "-name", "config.json",
                                               "-printf", "%P\\0"))  # fmt: skip
    return sf.read_training_directory(
        str(directory),
        entries,
        files,
        models_root=str(models_root or ""),
        models_root_drafts=drafts,
        skipped=skipped,
        problems=problems,
    )


def make_run(root: Path, steps=(100, 200, 300), best=200, meta=True) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for step in steps:
        ckpt = root / f"r-step{step}"
        ckpt.mkdir()
        (ckpt / "training_state.pt").write_bytes(b"x")
        (ckpt / "training_state_rank0.pt").write_bytes(b"y")
    (root / "r-latest").symlink_to(f"r-step{max(steps)}")
    (root / "r-best").symlink_to(f"r-step{best}")
    if meta:
        body = {"run_id": "r", "step": best, "score": 1.5, "metric": "eval/simulated_acc_len",
                "metrics": {"eval/simulated_acc_len": 1.5, "eval/per_position_acc": [0.7, 0.6, 0.5]}}  # fmt: skip
        (root / "r.best_meta.json").write_text(json.dumps(body))
    return root


def test_it_reads_the_simulated_hosts_training_directory():
    found = read(SHIPPED, MODELS)

    assert found.skipped == () and found.problems == ()
    (run,) = found.runs
    assert run.run_id == RUN and run.problems == ()
    assert [c.step for c in run.checkpoints] == [1000, 2000, 3000, 4000, 5000]
    assert (run.latest_step, run.best_step) == (5000, 4000)
    assert (run.best_metric, run.best_score) == ("eval/simulated_acc_len", 1.3287)
    by_step = {c.step: c for c in run.checkpoints}
    assert by_step[4000].is_best and not by_step[4000].is_latest and by_step[5000].is_latest
    assert by_step[4000].path == f"{SHIPPED}/{RUN}-step4000"
    assert by_step[1000].rank_files == 2 and by_step[1000].size_bytes > 0
    assert {s: c.exports for s, c in by_step.items()} == {
        1000: (),
        2000: (f"{MODELS}/{RUN}-step2000-sglang",),
        3000: (),
        4000: (f"{MODELS}/{RUN}-step4000-sglang",),
        5000: (f"{MODELS}/{RUN}-step5000-sglang",),
    }
    figures = [c.simulated_acc_len for c in run.checkpoints]
    assert figures == [0.7041, 1.0057, 1.1806, 1.3287, 1.3068]
    assert by_step[4000].served_definition == pytest.approx(2.3287)
    assert by_step[4000].metrics["eval/per_position_acc"] == [0.6448] * 3


def test_it_takes_the_best_from_the_link_when_best_meta_is_missing(tmp_path):
    run = read(make_run(tmp_path / "t", meta=False)).runs[0]

    assert run.best_step == 200 and run.best_score is None
    assert run.problems == ("no r.best_meta.json: the best is the -best link's, without its score",)
    assert [c.metrics for c in run.checkpoints] == [{}, {}, {}]


def test_it_reads_best_metas_metrics_for_the_best_step(tmp_path):
    run = read(make_run(tmp_path / "t")).runs[0]

    assert run.best_step == 200 and run.best_score == 1.5 and run.problems == ()
    best = [c for c in run.checkpoints if c.is_best]
    assert [c.step for c in best] == [200] and best[0].served_definition == 2.5
    assert best[0].metrics["eval/per_position_acc"] == [0.7, 0.6, 0.5]


def test_it_refuses_a_broken_link(tmp_path):
    root = make_run(tmp_path / "t", meta=False)
    (root / "r-best").unlink()
    (root / "r-best").symlink_to("r-step999")

    run = read(root).runs[0]

    assert run.best_step is None
    assert run.problems == ("r-best is broken: it points at r-step999, no checkpoint of this run",)


@pytest.mark.parametrize("target", ["../../../etc", "/etc", "r-step300/../../x", "sub/r-step300"])
def test_it_never_follows_a_link_pointing_outside_the_directory(tmp_path, target):
    root = make_run(tmp_path / "t")
    (root / "r-latest").unlink()
    (root / "r-latest").symlink_to(target)

    run = read(root).runs[0]

    assert run.latest_step is None
    assert any("r-latest points outside the directory" in p for p in run.problems)
    assert not any(c.is_latest for c in run.checkpoints)


def test_it_refuses_a_best_meta_that_disagrees_with_the_best_link(tmp_path):
    root = make_run(tmp_path / "t")
    (root / "r-best").unlink()
    (root / "r-best").symlink_to("r-step300")

    run = read(root).runs[0]

    assert run.best_step is None and not any(c.is_best for c in run.checkpoints)
    assert "names step 200 but r-best points at step 300: no best is shown" in run.problems[0]


def test_it_skips_a_non_numeric_step_and_an_incomplete_checkpoint(tmp_path):
    root = make_run(tmp_path / "t")
    (root / "r-stepfinal").mkdir()
    (root / "r-stepfinal" / "training_state.pt").write_bytes(b"x")
    (root / "r-step007").mkdir()
    (root / "r-step400").mkdir()  # rank files only: no shared payload

    found = read(root)

    assert [c.step for c in found.runs[0].checkpoints] == [100, 200, 300]
    reasons = {s.name: s.reason for s in found.skipped}
    assert reasons["r-stepfinal"] == "the step is not a number"
    assert reasons["r-step007"].startswith("the step is not written as SpecForge writes one")
    assert reasons["r-step400"] == "incomplete: no training_state.pt (SpecForge skips it too)"


def test_it_does_not_read_a_huge_file(tmp_path):
    root = make_run(tmp_path / "t")
    (root / "r.best_meta.json").write_text(json.dumps({"run_id": "r", "pad": "x" * (sf.MAX_META_BYTES + 1)}))
    (root / "r.eval_metrics.jsonl").write_bytes(b"{}\n" * (sf.MAX_METRICS_BYTES // 3 + 1))
    entries, _, _ = sf.parse_listing(_find(root, "-mindepth", "1", "-maxdepth", "2", "-printf", "%y\\0%s\\0%P\\0%l\\0"))

    assert sf.files_to_read(entries) == []
    run = read(root).runs[0]
    assert run.best_score is None and run.best_step == 200  # the link's
    assert any("r.best_meta.json holds" in p and "not read" in p for p in run.problems)
    assert any("r.eval_metrics.jsonl holds" in p and "not read" in p for p in run.problems)


@pytest.mark.parametrize("name", ["r-step500$(touch pwned)", "r-step500\nr-step600", "r-step5 00", "`id`", "-rf", "é"])
def test_it_skips_a_name_with_shell_metacharacters_or_a_newline(tmp_path, name):
    root = make_run(tmp_path / "t")
    (root / name).mkdir()
    (root / name / "training_state.pt").write_bytes(b"x")

    found = read(root)

    assert [c.step for c in found.runs[0].checkpoints] == [100, 200, 300]
    assert sf.Skipped(sf.shown(name), "name outside the allowed characters (letters, digits, . _ + -)") in (
        found.skipped
    )
    assert all("\n" not in s.name for s in found.skipped)
    assert not (tmp_path / "pwned").exists()


def test_it_reads_metrics_per_step_and_skips_bad_lines(tmp_path):
    root = make_run(tmp_path / "t", meta=False)
    lines = [
        json.dumps({"step": 100, "eval/simulated_acc_len": 0.9, "eval/per_position_acc/0": 0.6,
                    "eval/per_position_acc/1": 0.5, "train/loss": 3.0, "eval/avg_acc": "high"}),
        "not json",
        json.dumps({"step": "300", "eval/simulated_acc_len": 1.0}),
        json.dumps({"step": 300, "eval/simulated_acc_len": 1.2}),
        json.dumps({"step": 300, "eval/simulated_acc_len": 1.25}),  # re-evaluated after a resume: the last wins
    ]  # fmt: skip
    (root / "r.eval_metrics.jsonl").write_text("\n".join(lines) + "\n")

    run = read(root).runs[0]

    by_step = {c.step: c.metrics for c in run.checkpoints}
    assert by_step[100] == {"eval/simulated_acc_len": 0.9, "eval/per_position_acc": [0.6, 0.5]}
    assert by_step[200] == {} and by_step[300] == {"eval/simulated_acc_len": 1.25}
    assert "r.eval_metrics.jsonl line 2: not a JSON object with an integer step: skipped" in run.problems
    assert "r.eval_metrics.jsonl: 2 lines skipped in all" in run.problems


def test_it_finds_exports_by_name_in_the_directory_and_never_a_longer_step(tmp_path):
    root = make_run(tmp_path / "t")
    for name in ("r-step100-sglang", "r-step1000-sglang", "r-step100sglang"):
        (root / name).mkdir()
        (root / name / "config.json").write_text("{}")
    (root / "r-step300-noconfig").mkdir()

    found = read(root)

    assert {c.step: c.exports for c in found.runs[0].checkpoints}[100] == (f"{root}/r-step100-sglang",)
    assert {c.step: c.exports for c in found.runs[0].checkpoints}[300] == ()
    assert {s.name for s in found.skipped} == {"r-step300-noconfig"}


def test_it_says_when_the_listing_was_cut():
    raw = b"d\x004096\x00r-step1\x00\x00f\x001\x00r-st"
    entries, _, problems = sf.parse_listing(raw)

    assert [e.path for e in entries] == ["r-step1"]
    assert problems == ["the listing was cut at its size cap: entries past it are not shown"]


def test_it_reads_nothing_from_a_directory_without_a_run(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "notes.txt").write_text("hi")
    os.mkfifo(tmp_path / "t" / "pipe")

    found = read(tmp_path / "t")

    assert found.runs == ()
    assert {s.name: s.reason for s in found.skipped} == {
        "notes.txt": "not part of SpecForge's layout",
        "pipe": "not part of SpecForge's layout",
    }
