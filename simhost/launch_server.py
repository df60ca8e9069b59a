"""`python -m simhost.launch_server <sglang flags>`: a simulated `sglang.launch_server` (see README.md).

Kept tiny: spawned scheduler processes re-import this module as `__mp_main__`, so the heavy imports live in
simhost.main behind the __main__ guard.
"""

if __name__ == "__main__":
    import sys

    from simhost.main import main

    sys.exit(main(sys.argv[1:]))
