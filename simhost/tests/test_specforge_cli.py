"""The simulated host's SpecForge CLI (simhost/specforge.py): an export shaped like the shipped ones, with the
step's quality from the training directory's figures, and SpecForge-like refusals of bad arguments."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from simhost import draft_quality, hostsetup, specforge

RUN = "kimi-k2.5-sim-eagle3-sf"
SHIPPED = hostsetup.MODELS_ROOT / "kimi-k2.5-sim-specforge"
CONFIG = SHIPPED / f"{RUN}.draft_config.json"


def _export(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "simhost.specforge", *args],
        capture_output=True,
        text=True,
        cwd=Path(specforge.__file__).parent.parent,
        check=False,
    )


def test_it_writes_an_export_shaped_like_the_shipped_one(tmp_path):
    out = tmp_path / f"{RUN}-step4000-sglang"

    done = _export(
        "export",
        "--to",
        "sglang",
        "--checkpoint",
        str(SHIPPED / f"{RUN}-step4000"),
        "--draft-config",
        str(CONFIG),
        "--output-dir",
        str(out),
    )

    assert done.returncode == 0, done.stderr
    shipped = hostsetup.MODELS_ROOT / f"{RUN}-step4000-sglang"
    for name in ("config.json", "model.safetensors.index.json"):
        assert json.loads((out / name).read_text()) == json.loads((shipped / name).read_text()), name
    assert not draft_quality.weights_skipped(str(out))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "the following arguments are required: command"),
        (("export", "--to", "onnx"), "argument --to: invalid choice: 'onnx'"),
        (("export", "--to", "sglang"), "the following arguments are required: --checkpoint, --draft-config"),
    ],
)
def test_it_refuses_bad_arguments_as_argparse_does(args, message):
    done = _export(*args)

    assert done.returncode == 2 and "usage: specforge" in done.stderr and message in done.stderr


def test_it_refuses_a_missing_checkpoint_and_an_output_that_exists(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    common = ("export", "--to", "sglang", "--draft-config", str(CONFIG), "--output-dir")

    missing = _export(*common, str(tmp_path / "new"), "--checkpoint", str(SHIPPED / f"{RUN}-step9999"))
    exists = _export(*common, str(out), "--checkpoint", str(SHIPPED / f"{RUN}-step1000"))

    assert missing.returncode == 1 and "no training checkpoint at" in missing.stderr
    assert exists.returncode == 1 and "exists; refusing to overwrite it" in exists.stderr
    assert not (tmp_path / "new").exists() and list(out.iterdir()) == []


def test_the_shipped_exports_match_what_it_would_write(tmp_path):
    copy = tmp_path / "train"
    shutil.copytree(SHIPPED, copy, symlinks=True)
    for step in (2000, 4000):
        out = tmp_path / f"{step}"
        specforge.export("sglang", copy / f"{RUN}-step{step}", copy / CONFIG.name, out)
        shipped = json.loads((hostsetup.MODELS_ROOT / f"{RUN}-step{step}-sglang" / "config.json").read_text())
        assert json.loads((out / "config.json").read_text()) == shipped
