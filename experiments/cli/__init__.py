"""The `specdash` command: the JSON API from a terminal or a CI job.

It imports the standard library, httpx and PyYAML only (never Django, never the rest of `experiments`), so that
`pip install` of the project gives a laptop or a CI runner the client alone; `dashboard/tests/test_layout.py`
holds it to that. This file stays empty of imports: `experiments/__init__.py` is empty too, so importing
`experiments.cli` loads nothing of the server.
"""
