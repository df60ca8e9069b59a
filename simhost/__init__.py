"""simhost: a simulated multi-GPU host serving an SGLang-compatible server (see README.md)."""
