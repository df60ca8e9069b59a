"""The commands that read a draft training directory on a host, and their answers (pure): a listing of the directory
two levels deep, the names of the models root's directories holding a config.json, and a few small text files.
What the answers mean is experiments/formats/specforge_runs.py's.

Read-only and executing nothing from the directory: `realpath`, `find -printf`, `head -c` and `base64`, every path
shell-quoted. Every command first resolves the models root and the directory on the host and stops unless the
directory really lies inside the root (a link from inside the root to elsewhere is refused like a path elsewhere, as
`workers.hosts.model_config` does for models); every answer is cut at a byte cap on the host and sent as base64 (a
file name may hold any byte but NUL and "/", which base64 carries exactly).
"""

from __future__ import annotations

import base64
import binascii
import shlex
from collections.abc import Sequence

# The most of a listing read (tens of thousands of entries of ordinary names).
MAX_LISTING_BYTES = 2 * 1024 * 1024
MAX_DRAFTS_BYTES = 256 * 1024
OUTSIDE_EXIT = 3


def _confined(models_root: str, directory: str) -> str:
    """Shell text that sets $root and $dir (resolved on the host) and enters $dir, or exits OUTSIDE_EXIT."""
    return (
        f"root=$(realpath -e -- {shlex.quote(models_root)}) && dir=$(realpath -e -- {shlex.quote(directory)}) && "
        'case "$dir/" in "$root"/?*) ;; '
        f'*) echo "resolves outside the models root" >&2; exit {OUTSIDE_EXIT} ;; esac && cd -- "$dir"'
    )


def listing_command(models_root: str, directory: str) -> str:
    """Two lines: the directory's resolved path, then its entries two levels deep as four NUL-ended fields each
    (type, size, path, link target; specforge_runs.parse_listing), each base64."""
    return (
        f"{_confined(models_root, directory)} && printf '%s' \"$dir\" | base64 -w0 && echo && "
        "find . -mindepth 1 -maxdepth 2 -printf '%y\\0%s\\0%P\\0%l\\0' 2>/dev/null "
        f"| head -c {MAX_LISTING_BYTES} | base64 -w0 && echo"
    )


def drafts_command(models_root: str) -> str:
    """One line: `NAME/config.json` for each directory of the models root holding one, NUL-ended, base64 (links
    are not followed, as the model listing would not follow them either)."""
    return (
        f'root=$(realpath -e -- {shlex.quote(models_root)}) && cd -- "$root" && '
        "find . -mindepth 2 -maxdepth 2 -name config.json -printf '%P\\0' 2>/dev/null "
        f"| head -c {MAX_DRAFTS_BYTES} | base64 -w0 && echo"
    )


def files_command(models_root: str, directory: str, files: Sequence[tuple[str, int]]) -> str:
    """One line per file, in order: its first `cap` bytes as base64, or an empty line when it is not a plain file
    (a link, gone since the listing). `files` come from specforge_runs.files_to_read: names of allowed characters
    only, quoted all the same."""
    reads = []
    for name, cap in files:
        quoted = shlex.quote(name)
        plain_file = f"[ -f {quoted} ] && [ ! -L {quoted} ]"
        reads.append(f"{{ {plain_file} && head -c {int(cap)} -- {quoted} | base64 -w0; echo; }}")
    return f"{_confined(models_root, directory)} && " + " && ".join(reads or [":"])


def decode_lines(stdout: str, count: int) -> list[bytes] | None:
    """The first `count` base64 lines of an answer, decoded; None when the answer is not that."""
    lines = stdout.split("\n")
    if len(lines) < count:
        return None
    try:
        return [base64.b64decode(line, validate=True) for line in lines[:count]]
    except (binascii.Error, ValueError):
        return None
