"""How a config's new name is made, in one place. Pure. Three ways, each saying something different:

- a saved edit of a config is its next version: `<base> v<N>` (`next_version_name`), N one past the highest stored
  version of that base, the base's own name counting as version 1;
- a remedy's re-run says what it changed: `<name> · <label>` (`remedy_name`, "eagle · mem 0.78"); a second remedy
  of the same sort replaces the first's label rather than stacking;
- two configs of one experiment never share a name (the comparison tells them apart by name): a clash gets
  `(2)`, `(3)`, ... (`free_name`).

Every name stays within `max_length` (the config name column's), cutting the base, never the suffix.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

VERSION = re.compile(r"(?P<base>.*\S) v(?P<n>\d{1,6})")
REMEDY_SEPARATOR = " · "
MAX_REMEDY_LABEL = 40  # a dropped argument can be long; the name stays mostly the config's own


def version_base(name: str) -> str:
    """The name without its version suffix ("eagle v3" -> "eagle")."""
    match = VERSION.fullmatch(name)
    return match["base"] if match else name


def next_version_name(name: str, taken: Iterable[str], max_length: int) -> str:
    base = version_base(name)
    numbers = {1}
    for other in taken:
        found = VERSION.fullmatch(other)
        if found and found["base"] == base:
            numbers.add(int(found["n"]))
    suffix = f" v{max(numbers) + 1}"
    return base[: max_length - len(suffix)] + suffix


def remedy_name(name: str, label: str, max_length: int) -> str:
    base, separator, last = name.rpartition(REMEDY_SEPARATOR)
    if separator and last.split(" ")[0] == label.split(" ")[0]:
        name = base
    suffix = f"{REMEDY_SEPARATOR}{label[:MAX_REMEDY_LABEL]}"
    return name[: max_length - len(suffix)] + suffix


def free_name(name: str, taken: set[str], max_length: int) -> str:
    candidate, n = name, 2
    while candidate in taken:
        suffix = f" ({n})"
        candidate, n = name[: max_length - len(suffix)] + suffix, n + 1
    return candidate
