"""specdash's benchmark client, shipped to the GPU host and run there as `python3 -m benchclient`.

Standard library only, and relative imports only: the directory is copied on its own (a GPU host needs no package
installed for it).
"""
