"""The life of one run on its GPU host, one module per concern:

- `lifecycle`: the order of the phases, reconnects, cancel and take-over (the only module that sequences);
- `session`: what the phases share: the run row, the SSH connection, the server's log and HTTP API;
- `preflight`, `startup` (launch or re-attach, then follow to ready), `verify`, `benchmark`, `teardown`: the phases;
- `server`: the server's process group on the host and its HTTP API;
- `server_log`: the server's log, tailed by byte offset, stored, broadcast and read for facts;
- `errors`: how a phase stops early (a failure of a known kind, or a cancel);
- `stopping`: cancelling a task for certain (Python 3.11's `wait_for` can lose a cancellation).
"""
