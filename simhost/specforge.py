"""SpecForge's CLI as the simulated host has it: `python -m simhost.specforge export --to sglang --checkpoint C
--draft-config J --output-dir D` (specdash's reference, speculative-observability.md d5: `specforge export --to
{hf,sglang} --checkpoint C --draft-config J --output-dir D [--vocab-mapping ...] [--embedding-source ...]`).

What it writes is the shape of the shipped exports (tools/make_specforge_run.py): `config.json` (the draft config
given, plus the simulator's quality number, draft_quality.MULTIPLIER_KEY) and `model.safetensors.index.json` naming
the keys SGLang's loader reads (draft_quality.SERVING_KEYS, which SpecForge's sglang exporter checks). No weights:
nothing reads them. The quality comes from the training directory's own figures for the checkpoint's step
(`{run_id}.eval_metrics.jsonl`, else `{run_id}.best_meta.json`): the step's eval/avg_acc over the simulator's default
per-token acceptance (knobs: SIMHOST_ACCEPT_P 0.62), the inverse of how make_specforge_run.py made the figures.

Bad arguments end as argparse ends (usage, "error: ...", exit 2); a checkpoint or config that is not there, or an
output directory that is, ends with a one-line error and exit 1 (SpecForge raises; the guess is its exit status).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from simhost import draft_quality

BASE_ACCEPT_P = 0.62  # knobs.py's SIMHOST_ACCEPT_P default, which the training figures were made with
STEP_DIR = re.compile(r"\A(?P<run>.+)-step(?P<step>[0-9]{1,9})\Z")
# The rest of an EAGLE-3 head's weights beside the serving keys (the shipped drafts' index).
OTHER_KEYS = tuple(
    f"midlayer.{part}.weight"
    for part in (
        "self_attn.q_proj",
        "self_attn.k_proj",
        "self_attn.v_proj",
        "self_attn.o_proj",
        "mlp.gate_proj",
        "mlp.up_proj",
        "mlp.down_proj",
    )
)
INDEX_TOTAL_SIZE = 3_200_000_000


class ExportError(Exception):
    """The export cannot be made; the message is the one line printed."""


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="specforge", description="SpecForge (simulated host).")
    commands = root.add_subparsers(dest="command", required=True)
    export = commands.add_parser("export", help="Export a training checkpoint as a draft model directory.")
    export.add_argument("--to", required=True, choices=["hf", "sglang"])
    export.add_argument("--checkpoint", required=True)
    export.add_argument("--draft-config", required=True)
    export.add_argument("--output-dir", required=True)
    export.add_argument("--vocab-mapping", default=None)
    export.add_argument("--embedding-source", default=None)
    return root


def step_figures(training_dir: Path, run_id: str, step: int) -> dict[str, Any]:
    """The step's eval metrics as the training directory keeps them; {} when it keeps none for that step."""
    metrics_file = training_dir / f"{run_id}.eval_metrics.jsonl"
    if metrics_file.is_file():
        for line in metrics_file.read_text().splitlines():
            row = json.loads(line) if line.strip() else {}
            if row.get("step") == step:
                return row
    meta_file = training_dir / f"{run_id}.best_meta.json"
    if meta_file.is_file():
        meta = json.loads(meta_file.read_text())
        if meta.get("step") == step:
            return dict(meta.get("metrics") or {})
    return {}


def export(to: str, checkpoint: Path, draft_config: Path, output_dir: Path) -> None:
    if to != "sglang":
        raise ExportError("the simulated host exports for sglang only")
    match = STEP_DIR.match(checkpoint.name)
    if not checkpoint.is_dir() or not (checkpoint / "training_state.pt").is_file() or not match:
        raise ExportError(f"no training checkpoint at {checkpoint} (a {{run_id}}-step{{N}} dir with training_state.pt)")
    try:
        config = json.loads(draft_config.read_text())
    except (OSError, ValueError) as exc:
        raise ExportError(f"cannot read the draft config {draft_config}: {exc}") from exc
    if not isinstance(config, dict):
        raise ExportError(f"the draft config {draft_config} is not a JSON object")
    if output_dir.exists():
        raise ExportError(f"{output_dir} exists; refusing to overwrite it")
    figures = step_figures(checkpoint.parent, match["run"], int(match["step"]))
    accuracy = figures.get("eval/avg_acc")
    if isinstance(accuracy, (int, float)) and not isinstance(accuracy, bool):
        config[draft_quality.MULTIPLIER_KEY] = round(accuracy / BASE_ACCEPT_P, 4)
    output_dir.mkdir(parents=False)
    (output_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    weight_map = {name: "model.safetensors" for name in (*OTHER_KEYS, *draft_quality.SERVING_KEYS)}
    index = {"metadata": {"total_size": INDEX_TOTAL_SIZE}, "weight_map": weight_map}
    (output_dir / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        export(args.to, Path(args.checkpoint), Path(args.draft_config), Path(args.output_dir))
    except (ExportError, OSError) as exc:
        print(f"specforge export: error: {exc}", file=sys.stderr)
        return 1
    print(f"exported SGLang draft to {args.output_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
