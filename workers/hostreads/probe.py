"""Runs on the GPU host, under the interpreter that launches SGLang: the Python side of a run's fingerprint.

Standard library only, and it imports none of the packages it reports (importing sglang or torch takes seconds):
versions come from their installed metadata and their `version.py`, the SGLang checkout from git. Prints one JSON
object. The worker sends this file's text as `python -c`; `bench/gpu_host_check.py` runs it locally.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import runpy
import subprocess
import sys

PACKAGES = {
    "sglang": ("sglang", ("sglang",)),
    "vllm": ("vllm", ("vllm",)),
    "torch": ("torch", ("torch",)),
    "flashinfer": ("flashinfer", ("flashinfer-python", "flashinfer")),
    "sgl_kernel": ("sgl_kernel", ("sgl-kernel",)),
    "nccl": (None, ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11")),
    "triton": ("triton", ("triton",)),
}
GIT_TIMEOUT = 10


def _location(module):
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec else []
    return locations[0] if locations else None


def _package(module, dists):
    found = {}
    for dist in dists:
        try:
            found["version"] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        found["dist"] = dist
        try:
            direct = importlib.metadata.distribution(dist).read_text("direct_url.json")
        except (OSError, ValueError):
            direct = None
        if direct:
            found["direct_url"] = json.loads(direct)
        break
    location = _location(module) if module else None
    if location:
        found["location"] = location
        version_file = os.path.join(location, "version.py")
        if os.path.isfile(version_file):
            try:
                names = runpy.run_path(version_file)
            except Exception as exc:  # a broken version.py is a fact to report, not a reason to stop
                found["version_error"] = repr(exc)[:200]
            else:
                # What `import <module>; <module>.__version__` reports, which an editable install keeps current.
                if isinstance(names.get("__version__"), str):
                    found["version"] = names["__version__"]
                if isinstance(names.get("cuda"), str):
                    found["cuda"] = names["cuda"]
                if isinstance(names.get("git_version"), str):
                    found["git_version"] = names["git_version"]
    return found


def _git(cwd, *args):
    try:
        done = subprocess.run(["git", "-C", cwd, *args], capture_output=True, timeout=GIT_TIMEOUT, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _checkout(location):
    """The SGLang git checkout the package was imported from (its repo keeps it in python/sglang), or None."""
    top = _git(location, "rev-parse", "--show-toplevel")
    if not top:
        return None
    root = top.decode().strip()
    try:
        if not os.path.samefile(os.path.join(root, "python", "sglang"), location):
            return None
    except OSError:
        return None
    head = (_git(root, "rev-parse", "HEAD") or b"").decode().strip()
    status = (_git(root, "status", "--porcelain", "--untracked-files=no") or b"").decode().splitlines()
    diff = _git(root, "diff", "HEAD", "--binary") or b""
    return {
        "root": root,
        "commit": head or None,
        "files_changed": len(status),
        "local_changes_sha256": hashlib.sha256(diff).hexdigest() if diff else None,
    }


def main():
    packages = {name: _package(module, dists) for name, (module, dists) in PACKAGES.items()}
    sglang = packages["sglang"]
    if sglang.get("location"):
        checkout = _checkout(sglang["location"])
        if checkout:
            sglang["checkout"] = checkout
    vcs = (sglang.get("direct_url") or {}).get("vcs_info") or {}
    if vcs.get("commit_id") and "checkout" not in sglang:
        sglang["checkout"] = {"commit": vcs["commit_id"], "files_changed": 0, "local_changes_sha256": None}
    print(
        json.dumps(
            {
                "python": platform.python_version(),
                "executable": sys.executable,
                "packages": packages,
            }
        )
    )


if __name__ == "__main__":
    main()
