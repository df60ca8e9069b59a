"""`python -m simhost.vllm_serve MODEL [flags]`: a simulated `vllm serve MODEL [flags]` (see README.md, "vLLM").

Kept tiny: spawned EngineCore and worker processes re-import this module as `__mp_main__`, so the heavy imports
live in simhost.vllm.api_server behind the __main__ guard.
"""

if __name__ == "__main__":
    import sys

    from simhost.vllm.api_server import main

    sys.exit(main(sys.argv[1:]))
