"""What changed between two runs' environments, in words: "SGLang 0.5.9 -> 0.5.10.dev (commit abc1234..def5678,
3 files changed), NCCL_PROTO unset -> LL; driver, PyTorch, GPUs same". Pure: fingerprints (as
`workers.hostreads.fingerprint.parse` gives them) and environments in, changes out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

UNSET = "unset"
# The facts a reader checks first; those that did not change are still named ("driver same").
KEY_FACTS = ("SGLang", "PyTorch", "CUDA (PyTorch)", "NCCL", "driver", "GPUs")


@dataclass(frozen=True)
class Snapshot:
    """What a run ran on: its host fingerprint (empty when it was not read) and the server's environment."""

    fingerprint: Mapping[str, Any]
    env: Mapping[str, str]
    label: str = ""  # "run 12", for "run 12 has no fingerprint"


@dataclass(frozen=True)
class Change:
    what: str  # "SGLang", "driver", "NCCL_PROTO"
    kind: str  # "software", "hardware", "env"
    before: str | None
    after: str | None
    detail: str = ""  # "commit abc1234..def5678, 3 files changed"

    def describe(self) -> str:
        detail = f" ({self.detail})" if self.detail else ""
        if self.before == self.after:
            return f"{self.what} {self.after or UNSET}{detail}"
        return f"{self.what} {self.before or UNSET} -> {self.after or UNSET}{detail}"

    def as_json(self) -> dict[str, Any]:
        return {
            "what": self.what,
            "kind": self.kind,
            "before": self.before,
            "after": self.after,
            "detail": self.detail,
            "text": self.describe(),
        }


def _version(fingerprint: Mapping[str, Any], package: str, key: str = "version") -> str | None:
    value = ((fingerprint.get("packages") or {}).get(package) or {}).get(key)
    return str(value) if value else None


def facts(fingerprint: Mapping[str, Any]) -> dict[str, tuple[str, str | None]]:
    """The comparable facts of a fingerprint, in reading order: name -> (kind, value)."""
    return {
        "SGLang": ("software", _version(fingerprint, "sglang")),
        "PyTorch": ("software", _version(fingerprint, "torch")),
        "CUDA (PyTorch)": ("software", _version(fingerprint, "torch", "cuda")),
        "NCCL": ("software", _version(fingerprint, "nccl")),
        "flashinfer": ("software", _version(fingerprint, "flashinfer")),
        "sgl-kernel": ("software", _version(fingerprint, "sgl_kernel")),
        "Triton": ("software", _version(fingerprint, "triton")),
        "Python": ("software", fingerprint.get("python")),
        "driver": ("hardware", fingerprint.get("driver")),
        "CUDA (driver)": ("hardware", fingerprint.get("cuda_driver")),
        "GPUs": ("hardware", fingerprint.get("gpu_summary") or None),
        "kernel": ("hardware", fingerprint.get("kernel")),
    }


def _checkout(fingerprint: Mapping[str, Any]) -> Mapping[str, Any]:
    return ((fingerprint.get("packages") or {}).get("sglang") or {}).get("checkout") or {}


def _short(commit: Any) -> str:
    return str(commit)[:7] if commit else "?"


def checkout_detail(before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    """How the SGLang checkouts differ: "commit abc1234..def5678, 3 files changed" ("" when they do not)."""
    a, b = _checkout(before), _checkout(after)
    if not a and not b:
        return ""
    parts = []
    if a.get("commit") != b.get("commit"):
        if a and b:
            parts.append(f"commit {_short(a.get('commit'))}..{_short(b.get('commit'))}")
        else:
            parts.append(f"commit {_short(b.get('commit'))}" if b else "no longer a git checkout")
    if a.get("local_changes_sha256") != b.get("local_changes_sha256"):
        changed = int(b.get("files_changed") or 0)
        parts.append(f"{changed} file{'s' if changed != 1 else ''} changed" if changed else "local changes dropped")
    return ", ".join(parts)


def changes(before: Snapshot, after: Snapshot) -> list[Change]:
    """Every difference from `before` to `after`: software and hardware facts, then environment variables."""
    found: list[Change] = []
    if before.fingerprint and after.fingerprint:
        old, new = facts(before.fingerprint), facts(after.fingerprint)
        detail = checkout_detail(before.fingerprint, after.fingerprint)
        for name, (kind, value) in new.items():
            was = old[name][1]
            if name == "SGLang" and detail:
                found.append(Change(name, kind, was, value, detail))
            elif was != value:
                found.append(Change(name, kind, was, value))
    for name in sorted(set(before.env) | set(after.env)):
        was, now = before.env.get(name), after.env.get(name)
        if was != now:
            found.append(Change(name, "env", was, now))
    return found


def same_key_facts(before: Snapshot, after: Snapshot, found: list[Change]) -> list[str]:
    """The key facts both fingerprints report alike (named in the summary so that "same" is said, not implied)."""
    if not before.fingerprint or not after.fingerprint:
        return []
    changed = {c.what for c in found}
    old, new = facts(before.fingerprint), facts(after.fingerprint)
    return [name for name in KEY_FACTS if name not in changed and new[name][1] and old[name][1] == new[name][1]]


def summary(before: Snapshot, after: Snapshot) -> str:
    """One line: the changes, then the key facts that stayed the same, and what could not be compared."""
    found = changes(before, after)
    words = [c.describe() for c in found]
    same = same_key_facts(before, after, found)
    missing = [s.label or "one run" for s in (before, after) if not s.fingerprint]
    parts = [", ".join(words)] if words else []
    if same:
        parts.append(f"{', '.join(same)} same")
    if missing:
        verb = "has" if len(missing) == 1 else "have"
        parts.append(f"{' and '.join(missing)} {verb} no environment fingerprint")
    if not words:
        parts.insert(0, "No difference" if not missing else "No difference in environment variables")
    return "; ".join(parts)
