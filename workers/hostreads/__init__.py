"""What a run reads from its GPU host besides the server itself: the environment fingerprint before the launch, the
environment each server process received, and the GPUs' telemetry. Pure (no Django, no I/O): the commands as text
and their answers as values, shared by the worker and `bench/gpu_host_check.py`. `probe.py` runs on the host.
"""
