import os

# The version the simulated server imitates (SIMHOST_SGLANG_VERSION), as `sglang/version.py` states a real one.
__version__ = os.environ.get("SIMHOST_SGLANG_VERSION") or "0.5.9"
