"""Where a worker may connect: SPECDASH_HOST_ALLOWLIST, a list of IP networks (CIDR) and exact host names.

Checked when an admin registers a host and again by the worker right before it connects (a name may resolve
elsewhere by then). A name passes when it is listed itself, or when every address it resolves to lies in a
listed network, so a DNS name cannot smuggle an unlisted address past the check.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _entries(allowlist: Iterable[str]) -> tuple[list[Network], set[str]]:
    networks: list[Network] = []
    names: set[str] = set()
    for entry in allowlist:
        entry = entry.strip()
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            names.add(entry.lower().rstrip("."))
    return networks, names


def _resolve(address: str) -> list[str]:
    try:
        infos = socket.getaddrinfo(address, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return []
    return sorted({str(info[4][0]) for info in infos})


def refusal(address: str, allowlist: Iterable[str]) -> str | None:
    """Why a worker may not connect to `address` under `allowlist` (SPECDASH_HOST_ALLOWLIST), or None if it may."""
    networks, names = _entries(allowlist)
    if address.lower().rstrip(".") in names:
        return None
    addresses = _resolve(address)
    if not addresses:
        return f"{address} does not resolve to an address."
    for resolved in addresses:
        ip = ipaddress.ip_address(resolved.split("%", 1)[0])
        if not any(ip in network for network in networks if network.version == ip.version):
            return f"{address} ({resolved}) is not in SPECDASH_HOST_ALLOWLIST; an operator can add it there."
    return None
