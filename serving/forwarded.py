"""The client's address and scheme behind a reverse proxy (LEASEHOLD_TRUSTED_PROXIES,
docs/guide/tls.md). A request that comes from a trusted proxy names its client in the one header
the operator says the proxy sets (LEASEHOLD_FORWARDED_HEADER): ``X-Forwarded-For`` /
``X-Forwarded-Proto`` by default, or ``Forwarded`` (RFC 7239: ``for=`` and ``proto=``); the other is
ignored, as a proxy passes on whatever a client wrote in a header it does not set itself. The
addresses are read from the right (the nearest hop first), skipping trusted proxies: the first one
that is not trusted is the client, whatever it claims further left (nginx's
``$proxy_add_x_forwarded_for`` appends to what the client sent). From any other peer the headers are
ignored: anyone can write them. A list that cannot be read (a name, ``unknown``, garbage) changes
nothing."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
HEADERS = ("x-forwarded-for", "forwarded")  # LEASEHOLD_FORWARDED_HEADER's values; the first is the default
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _address(text: str) -> Address | None:
    """An address as ``for=`` or X-Forwarded-For gives it: ``1.2.3.4``,
    ``1.2.3.4:80``, ``"[2001:db8::1]:80"``, ``2001:db8::1``."""
    text = text.strip().strip('"')
    if text.startswith("["):
        text = text[1:text.find("]")] if "]" in text else ""
    elif text.count(":") == 1:
        text = text.split(":")[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _trusted(address: Address, proxies: Sequence[Network]) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in proxies)


def _forwarded(value: str) -> tuple[list[str], list[str]]:
    """``for=`` and ``proto=`` values of a Forwarded header, hop by hop."""
    fors, protos = [], []
    for hop in value.split(","):
        pairs = dict(part.strip().split("=", 1) for part in hop.split(";") if "=" in part)
        pairs = {k.strip().lower(): v.strip().strip('"') for k, v in pairs.items()}
        fors.append(pairs.get("for", ""))
        protos.append(pairs.get("proto", ""))
    return fors, protos


def client(peer: str, headers: dict, proxies: Sequence[Network], header: str = HEADERS[0]) -> tuple[str, str | None]:
    """(the client's address, the scheme the client used or None if not
    said) for a request from ``peer`` with ``headers`` (WSGI environ keys),
    read from ``header`` (one of HEADERS) alone."""
    address = _address(peer)
    if not proxies or address is None or not _trusted(address, proxies):
        return peer, None
    if header == "forwarded":
        fors, protos = _forwarded(headers["HTTP_FORWARDED"]) if "HTTP_FORWARDED" in headers else ([], [])
    else:
        fors = headers["HTTP_X_FORWARDED_FOR"].split(",") if "HTTP_X_FORWARDED_FOR" in headers else []
        # Set (not appended) by the proxy that received the client's connection.
        protos = [headers.get("HTTP_X_FORWARDED_PROTO", "").split(",")[0]] * len(fors)
    hops = [_address(text) for text in fors]
    if not hops or any(hop is None for hop in hops):
        return peer, None
    at = len(hops) - 1
    while at > 0 and _trusted(hops[at], proxies):  # type: ignore[arg-type]  # none is None here
        at -= 1
    hop = hops[at]
    assert hop is not None
    found = hop.ipv4_mapped or hop if isinstance(hop, ipaddress.IPv6Address) else hop
    scheme = protos[at].strip().lower() if at < len(protos) else ""
    return str(found), scheme if scheme in ("http", "https") else None
