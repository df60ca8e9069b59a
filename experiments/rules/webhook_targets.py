"""Where a team webhook may post: an http(s) URL whose host is, and resolves only to, public unicast addresses,
or addresses inside the networks an admin allowed (SPECDASH_WEBHOOK_ALLOWED_NETWORKS, for a Slack relay on the
team's own network). Everything else is refused, by what an address is, not by a list of bad ones: loopback,
link-local, private (RFC 1918, ULA), shared, multicast, unspecified, documentation and reserved addresses alike,
also when wrapped in an IPv6 address (IPv4-mapped, 6to4, NAT64, Teredo).

Checked when an admin saves the URL and again by the worker right before each delivery (a name may resolve
elsewhere by then), which then connects to an address it checked, never resolving the name a second time.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

SCHEMES = ("http", "https")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def networks(entries: Iterable[str]) -> tuple[Network, ...]:
    """The allowed networks (CIDR, or a single address). Raises ValueError naming a bad entry."""
    found = []
    for entry in entries:
        entry = entry.strip()
        if entry:
            try:
                found.append(ipaddress.ip_network(entry, strict=False))
            except ValueError as exc:
                raise ValueError(f"{entry!r} is not an IP network: {exc}") from None
    return tuple(found)


def url_refusal(url: str) -> str | None:
    """What is wrong with the URL itself (scheme, host, port), or None."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "The URL cannot be read (its host or port)."
    if parts.scheme.lower() not in SCHEMES:
        return "Only http:// and https:// webhook URLs are allowed."
    if not parts.hostname:
        return "The URL names no host."
    if port == 0:
        return "Port 0 is no port to post to."
    return None


def endpoint(url: str) -> tuple[str, int]:
    """The host and port a (refusal-free) URL posts to."""
    parts = urlsplit(url)
    return parts.hostname or "", parts.port or (443 if parts.scheme.lower() == "https" else 80)


def resolve(host: str, port: int) -> list[str]:
    """Every address `host` resolves to for TCP (empty when it does not resolve)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError):
        return []
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def address_refusal(address: str, allowed: Sequence[Network] = ()) -> str | None:
    """Why a webhook may not post to `address`, or None if it may."""
    try:
        ip: Address = ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 zone index names no address
    except ValueError:
        return f"{address} is not an IP address."
    if any(ip in network for network in allowed):
        return None
    kind = _kind(ip)
    for inner in _embedded(ip):
        if not any(inner in network for network in allowed):
            kind = _kind(inner) or kind  # what the wrapped address is says more than what its wrapper is
    if kind is None:
        return None
    article = "an" if kind[0] in "aeiou" else "a"
    return (
        f"{address} is {article} {kind} address: webhooks post only to public addresses "
        "(an admin can allow a network with SPECDASH_WEBHOOK_ALLOWED_NETWORKS)."
    )


def target_refusal(url: str, addresses: Sequence[str], allowed: Sequence[Network] = ()) -> str | None:
    """Why a webhook may not post to `url` whose host resolved to `addresses`, or None: every one must be allowed
    (a name with one public and one loopback address is refused)."""
    problem = url_refusal(url)
    if problem:
        return problem
    if not addresses:
        return f"The webhook's host {endpoint(url)[0]} does not resolve."
    for address in addresses:
        problem = address_refusal(address, allowed)
        if problem:
            return problem
    return None


def _kind(ip: Address) -> str | None:
    """What a non-public address is, or None for a public unicast one."""
    for name, test in (
        ("loopback", ip.is_loopback),
        ("unspecified", ip.is_unspecified),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("private", ip.is_private),
        ("reserved", ip.is_reserved),
        ("site-local", isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local),
    ):
        if test:
            return name
    return None if ip.is_global else "non-public"


def _embedded(ip: Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries (mapped, 6to4, NAT64, Teredo)."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return []
    inner = [ip.ipv4_mapped, ip.sixtofour, *(ip.teredo or ())]
    if ip in _NAT64:
        inner.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return [a for a in inner if a is not None]
