"""The servers a client is given, as the CLI's --server takes them (C++'s
client/endpoint_set.h, the same rules and messages): "a:7431,b:7431" and
"dns:///name:7431", mixed freely, each entry once, spaces around entries
ignored. One plain "host:port" (or any other single gRPC target) is not a
list. An empty address or an entry without a port is INVALID_ARGUMENT
before anything is dialed."""

from __future__ import annotations

import socket
from typing import Any, Callable, List, Tuple

from ._client import Error

_DNS_SCHEME = "dns:///"

# getaddrinfo's signature and answers; tests give one of their own.
Resolver = Callable[..., List[Tuple[Any, Any, Any, Any, Tuple[Any, ...]]]]


def is_endpoint_list(targets: str) -> bool:
    """Whether `targets` names more than one plain target: a comma-separated
    list, or a dns:/// name (which may resolve to several addresses); or is
    one with spaces around it, which the list's parsing trims."""
    return ("," in targets or targets.strip().startswith(_DNS_SCHEME)
            or targets.strip() != targets)


def has_dns_name(targets: str) -> bool:
    """Whether an entry of `targets` is a dns:/// name, whose addresses gRPC
    resolves (and resolves again as they come and go)."""
    return any(e.strip().startswith(_DNS_SCHEME) for e in targets.split(","))


def check_server_list(targets: str) -> None:
    """The syntax of a server address or list, checked before anything is
    dialed (C++'s CheckServerList): raises tm.Error INVALID_ARGUMENT for an
    empty one, an entry without a port ("entry 1 '127.0.0.1' has no port":
    gRPC would dial a default one), or a malformed list. Any other single
    gRPC target ("unix:/path") passes."""
    if not targets.strip():
        raise Error("INVALID_ARGUMENT", "empty server address (want host:port, or several "
                    "separated by commas, each host:port or dns:///name:port)")
    if not is_endpoint_list(targets):
        if ":" not in targets:
            raise Error("INVALID_ARGUMENT", f"server list entry 1 '{targets}' has no port "
                        "(want host:port or dns:///name:port)")
        return
    _parse_endpoints(targets, resolve=False)


def server_list_entries(targets: str) -> List[str]:
    """The entries of a comma-separated list as written (spaces around them
    trimmed), each once, in the order given: what connect() dials, one
    channel each. Raises as check_server_list()."""
    return _parse_endpoints(targets, resolve=False)


def resolve_endpoints(targets: str, resolver: Resolver = socket.getaddrinfo) -> List[str]:
    """The addresses of a comma-separated list of targets, each "host:port"
    (as written) or "dns:///host:port" (every address the name resolves to
    now: IPv4 as "a.b.c.d:port", IPv6 as "[addr]:port"), in the order given,
    each address once: the servers one by one, as `tensormorph health` asks
    them. Raises tm.Error INVALID_ARGUMENT as check_server_list(), and
    UNAVAILABLE naming a dns:/// name that does not resolve (and why)."""
    return _parse_endpoints(targets, resolve=True, resolver=resolver)


def _split_host_port(entry: str, what: str) -> Tuple[str, str]:
    colon = entry.rfind(":")
    if colon < 0 or colon < entry.rfind("]"):
        # gRPC would dial a default port; a server list names its ports.
        raise Error("INVALID_ARGUMENT", f"server list entry {what} '{entry}' has no port "
                    "(want host:port or dns:///name:port)")
    port = entry[colon + 1:] if colon > 0 else ""
    if colon <= 0 or not port.isdigit() or not port.isascii() or int(port) > 65535:
        raise Error("INVALID_ARGUMENT", f"server list entry {what} '{entry}' is not host:port "
                    "(a port from 0 to 65535)")
    return entry[:colon], port


def _resolve(entry: str, what: str, resolver: Resolver) -> List[str]:
    host, port = _split_host_port(entry[len(_DNS_SCHEME):], what)
    if len(host) >= 2 and host[0] == "[" and host[-1] == "]":
        host = host[1:-1]
    try:
        found = resolver(host, port, type=socket.SOCK_STREAM)
    except OSError as e:  # socket.gaierror among them
        raise Error("UNAVAILABLE", f"server list entry {what} '{entry}' does not resolve: "
                    f"{e.strerror or e}") from None
    out: List[str] = []
    for family, _, _, _, sockaddr in found:
        if family == socket.AF_INET:
            out.append(f"{sockaddr[0]}:{sockaddr[1]}")
        elif family == socket.AF_INET6:
            out.append(f"[{sockaddr[0]}]:{sockaddr[1]}")
    return out


def _parse_endpoints(targets: str, resolve: bool,
                     resolver: Resolver = socket.getaddrinfo) -> List[str]:
    out: List[str] = []
    for position, entry in enumerate(targets.split(","), start=1):
        entry = entry.strip()
        what = str(position)
        if not entry:
            raise Error("INVALID_ARGUMENT",
                        f"server list '{targets}': entry {what} is empty (want host:port or "
                        "dns:///name:port, separated by commas)")
        if entry.startswith(_DNS_SCHEME):
            if resolve:
                out.extend(_resolve(entry, what, resolver))
            else:
                _split_host_port(entry[len(_DNS_SCHEME):], what)
                out.append(entry)
            continue
        if entry.startswith("dns:"):
            raise Error("INVALID_ARGUMENT",
                        f"server list entry {what} '{entry}': only dns:///name:port "
                        "(no DNS server authority) is supported")
        _split_host_port(entry, what)
        out.append(entry)
    # The same server named twice would get twice the calls.
    return list(dict.fromkeys(out))
