"""The launched SGLang server's HTTP API, reached through a port forward of the run's SSH connection.

Every call answers None (or raises for the smoke generation) instead of hanging: the orchestrator decides what a
silent port means from the phase it is in (loading, or a server that died).
"""

from __future__ import annotations

from typing import Any

import aiohttp

from .ssh import HostConnection

HEALTH_TIMEOUT = aiohttp.ClientTimeout(total=5)


class ServerApi:
    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None
        self.base_url = ""

    async def open(self, conn: HostConnection, remote_port: int) -> None:
        """Forward a local port to the server's loopback port (again after a reconnect: the old forward died
        with its connection); the HTTP session is kept."""
        local_port = await conn.forward_port(remote_port)
        self.base_url = f"http://127.0.0.1:{local_port}"
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("ServerApi.open() was not called")
        return self._session

    async def status(self, path: str) -> int | None:
        """The HTTP status, or None while nothing answers on the port (loading)."""
        try:
            async with self.session.get(self.base_url + path, timeout=HEALTH_TIMEOUT) as response:
                await response.read()
                return response.status
        except (aiohttp.ClientError, TimeoutError, ConnectionError):
            return None

    async def get_json(self, path: str) -> dict[str, Any] | None:
        try:
            async with self.session.get(self.base_url + path) as response:
                if response.status != 200:
                    return None
                data = await response.json(content_type=None)
                return data if isinstance(data, dict) else None
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None

    async def server_info(self) -> dict[str, Any] | None:
        """`/get_server_info`, or `/server_info` where the old name is gone (SGLang renamed it in 0.5.6)."""
        return await self.get_json("/get_server_info") or await self.get_json("/server_info")

    async def post(self, path: str) -> int | None:
        try:
            async with self.session.post(self.base_url + path) as response:
                await response.read()
                return response.status
        except (aiohttp.ClientError, TimeoutError):
            return None

    async def generate(self, body: dict[str, Any]) -> tuple[int, str]:
        """One non-streaming /generate: (status, body text). Raises aiohttp.ClientError or TimeoutError."""
        async with self.session.post(self.base_url + "/generate", json=body) as response:
            return response.status, await response.text()
