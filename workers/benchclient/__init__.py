"""specdash's benchmark client, shipped to the GPU host and run there as `python3 -m benchclient`.

Standard library and aiohttp only, and relative imports only: the directory is copied on its own.
"""
