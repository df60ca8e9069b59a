"""simhost's vLLM personality: `python -m simhost.vllm_serve MODEL [flags]` behaves like `vllm serve MODEL [flags]`
on the same simulated GPUs, speed model and acceptance model as the SGLang personality (README.md, "vLLM")."""
