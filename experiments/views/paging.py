"""Page links of a paginated list: what `templates/experiments/_pager.html` calls `url(page=n)` on."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode


@dataclass(frozen=True)
class PageLinks:
    """A list's other parameters, kept on every page link (the experiments table's ListingQuery answers the same
    `url(page=n)` from its own filters)."""

    kept: dict[str, str]

    def url(self, page: int) -> str:
        return "?" + urlencode({**self.kept, "page": page})
