"""The flags the host's own SGLang accepts, read from its `launch_server --help`, and the config flags it would
refuse. Pure.

The launch policy (`launch_policy`) says what a member may send to a host; this says what the host's version
understands: SGLang renames and drops flags between versions (`--cuda-graph-max-bs` became
`--cuda-graph-max-bs-decode` in 0.5.14), and a flag it does not know fails the launch only after the baseline ran,
with argparse's "unrecognized arguments". The listing is kept with the SGLang version and the launcher it was
read with; it speaks only for that launcher, and a run whose fingerprint shows another version reads it again.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

# An option as argparse prints it in the usage and the option lines: after a space, "[" or ", ".
OPTION = re.compile(r"(?:^|[\s\[,(])(--[a-z0-9][a-z0-9_-]*)", re.MULTILINE)
MAX_FLAGS = 3000
MAX_HELP_CHARS = 1_000_000
# A help text that does not name the model flag is not SGLang's (a wrapper's, a traceback): no listing from it.
REQUIRED = ("--model-path",)


class NotSGLangHelp(ValueError):
    pass


def parse_help(text: str) -> list[str]:
    """The sorted options of an argparse help text; NotSGLangHelp when it is not a launch_server's."""
    flags = sorted(set(OPTION.findall(text[:MAX_HELP_CHARS])))
    missing = [flag for flag in REQUIRED if flag not in flags]
    if missing or len(flags) > MAX_FLAGS:
        tail = text.strip()[-300:] or "no output"
        raise NotSGLangHelp(
            f"the launcher's --help did not list {', '.join(missing) or 'a bounded set of flags'}: {tail}"
        )
    return flags


def listing(launcher: str, version: str | None, flags: list[str]) -> dict[str, Any]:
    """What `Host.server_flags` stores."""
    return {"launcher": launcher, "sglang_version": version, "flags": flags}


def known_flags(stored: Mapping[str, Any] | None, launcher: str) -> frozenset[str] | None:
    """The flags of a stored listing if it was read with this launcher, else None (nothing known)."""
    if not stored or stored.get("launcher") != launcher or not stored.get("flags"):
        return None
    return frozenset(str(flag) for flag in stored["flags"])


def unknown_flags(args: Iterable[str], known: frozenset[str]) -> list[str]:
    """The options of `args` (`--flag` or `--flag=value`) the host's SGLang does not list, in order, once each."""
    out: list[str] = []
    for arg in args:
        if not arg.startswith("--"):
            continue
        flag = arg.split("=", 1)[0]
        if flag not in known and flag not in out:
            out.append(flag)
    return out


def refusal(flags: list[str], host_name: str, version: str | None, when: str) -> str:
    what = f"SGLang {version}" if version else "The SGLang"
    word = "the flag" if len(flags) == 1 else "the flags"
    return (
        f"{what} on {host_name} does not know {word} {', '.join(flags)} (its launch_server --help as read {when}; a "
        f"member can read the host again on its page)."
    )
