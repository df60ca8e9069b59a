"""Which names an uploaded prompt set may not take: those that read like a built-in set's (random token ids,
ShareGPT). A profile names its prompt set by name, so a look-alike would pass an uploaded set off as the prompts
every team compares against. The built-in name itself is the built-in set's (its versions are the admins'); this
refuses the rest that imitate it, in any case, spacing, punctuation, accents or look-alike letters.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

# Cyrillic and Greek letters that look like Latin ones (after casefolding), read as those.
_LOOK_ALIKES = str.maketrans(
    "авекмнорстухіјѕһԁɡαβεηικμνορτυχζ",
    "abekmhopctyxijshdgabehikmnoptuxz",
)


def key(name: str) -> str:
    """What a name reads as: letters and digits only, casefolded, accents and look-alike letters read as Latin."""
    decomposed = unicodedata.normalize("NFKD", name.casefold())
    letters = "".join(ch for ch in decomposed if not unicodedata.combining(ch)).translate(_LOOK_ALIKES)
    return "".join(ch for ch in letters if ch.isascii() and ch.isalnum())


def _words(name: str) -> list[str]:
    return [key(word) for word in unicodedata.normalize("NFKC", name).split() if key(word)]


def imitated(name: str, builtin_names: Iterable[str], other_names: Iterable[str] = ()) -> str | None:
    """The built-in set's name (of `builtin_names`, or what else built-in sets go by, `other_names`: their kinds and
    labels) that `name` imitates, or None. Imitating is reading as it (the same letters and digits), starting with
    its first word ("random ...", "ShareGPT ..."), or holding its first two words ("the ShareGPT V3 set"). A built-in
    set's own name, in any case, is not an imitation: it names that set."""
    builtins = list(builtin_names)
    if any(name.strip().casefold() == builtin.strip().casefold() for builtin in builtins):
        return None
    own = key(name)
    for builtin in [*builtins, *other_names]:
        words = _words(builtin)
        if not words:
            continue
        if own == key(builtin) or own.startswith(words[0]) or (len(words) > 1 and "".join(words[:2]) in own):
            return builtin
    return None
