"""plotly.js for the pages, from the installed plotly package, so that the page and the Python figures always agree
on its version and no CDN is needed. Only that one file: the package's data directory also holds a 5 MB widget
bundle, datasets and templates that no page loads, which `collectstatic` would otherwise copy, hash and gzip on
every deploy (and `make demo` on every start)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import plotly
from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

PACKAGE_DATA = Path(plotly.__file__).resolve().parent / "package_data"
FILE_NAME = "plotly.min.js"
PREFIX = "vendor/plotly"  # the pages ask for {% static 'vendor/plotly/plotly.min.js' %}


class _PackageData(FileSystemStorage):
    prefix = PREFIX  # where collectstatic and WhiteNoise put what this storage lists


class PlotlyFinder(BaseFinder):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.storage = _PackageData(location=PACKAGE_DATA)

    def find(self, path: str, find_all: bool = False, **kwargs: Any) -> Any:
        if path != f"{PREFIX}/{FILE_NAME}":
            return []
        found = str(PACKAGE_DATA / FILE_NAME)
        return [found] if find_all else found

    def list(self, ignore_patterns: Any) -> Any:
        yield FILE_NAME, self.storage
