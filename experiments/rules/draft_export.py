"""What export of a draft checkpoint for serving specdash may run on a host, and the command it runs (pure).

SpecForge's CLI (specdash's reference, speculative-observability.md d5): `specforge export --to {hf,sglang}
--checkpoint C --draft-config J --output-dir D`. An admin allows it per host by setting the words that run that CLI
there (`Host.specforge_launcher`, held like the server launchers: admins only, no control characters); a member only
picks a checkpoint the host's listing just showed (formats/specforge_runs.py through serializers.draft_checkpoints),
never a command or a path. Every path comes from that listing or the host's models root, is held to the model path
rules (under the models root, written plainly) and is shell-quoted; the launcher is the admin's words, as
`Host.launcher` is.

The output directory is `{models_root}/{run_id}-step{N}-sglang`: the name the listing reads back as step N's export
(an export dir named `{run_id}-step{N}` + separator + suffix in the models root), and the shipped exports' own.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from . import model_paths

TARGET = "sglang"
OUTPUT_SUFFIX = "-sglang"
MAX_STEP = 10**9


@dataclass(frozen=True)
class ExportPlan:
    checkpoint: str
    draft_config: str
    output_dir: str
    command: str  # one shell line: the admin's launcher, then the quoted arguments


def output_dir(models_root: str, run_id: str, step: int) -> str:
    return f"{models_root.rstrip('/')}/{run_id}-step{step}{OUTPUT_SUFFIX}"


def export_command(launcher: str, checkpoint: str, draft_config: str, output: str) -> str:
    """The launcher's words as the admin wrote them, then every path quoted for the host's shell."""
    args = [
        "export",
        "--to",
        TARGET,
        "--checkpoint",
        checkpoint,
        "--draft-config",
        draft_config,
        "--output-dir",
        output,
    ]
    return f"{launcher.strip()} {shlex.join(args)}"


def plan_export(
    launcher: str,
    models_root: str,
    directories: Iterable[Mapping[str, Any]],
    directory: str,
    run_id: str,
    step: Any,
) -> ExportPlan | str:
    """The export of step `step` of run `run_id` in training directory `directory`, as the host's listing
    (`directories`, serializers.training_directory_json each) shows it now; or why not, in one sentence."""
    if not launcher.strip():
        return "An admin has not allowed draft exports on this host (it has no SpecForge launcher)."
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
        return "The step is a whole number from the host's listing."
    listed = next((d for d in directories if d.get("path") == directory and not d.get("refusal")), None)
    if listed is None:
        return "That training directory is not one the host's listing shows now."
    run = next((r for r in listed.get("runs") or [] if r.get("run_id") == run_id), None)
    checkpoint = next((c for c in (run or {}).get("checkpoints") or [] if c.get("step") == step), None)
    if run is None or checkpoint is None:
        return f"No checkpoint {run_id}-step{step} in {directory} as the host lists it now."
    if checkpoint.get("exported"):
        return f"{run_id}-step{step} is exported already: {', '.join(checkpoint.get('draft_paths') or [])}."
    config = run.get("draft_config")
    if not config:
        return f"{directory} keeps no {run_id}.draft_config.json (the draft config the run was trained with)."
    plan = ExportPlan(str(checkpoint.get("path") or ""), str(config), output_dir(models_root, run_id, step), "")
    for label, path in (
        ("The checkpoint", plan.checkpoint),
        ("The draft config", plan.draft_config),
        ("The export directory", plan.output_dir),
    ):
        refusal = model_paths.model_path_refusal(label, path, models_root)
        if refusal:
            return f"{refusal}."
    command = export_command(launcher, plan.checkpoint, plan.draft_config, plan.output_dir)
    return ExportPlan(plan.checkpoint, plan.draft_config, plan.output_dir, command)
