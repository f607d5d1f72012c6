"""Several tensormorphd behind one client, routed as the C++ Router does
(client/router.h is the contract: this module follows its placement,
routing, merging, re-resolution and errors; one difference: diff() runs on
one endpoint holding both checkpoints whole, where the C++ router also
splits a diff of checkpoints spread over servers into per-server sub-diffs).

Targets: "a:7431,b:7431" (each host:port one endpoint, as written) and
"dns:///name:7431" (every address the name resolves to now, one endpoint
each, as a headless Service's name resolves to every pod), mixed freely,
each address once, spaces around entries ignored. One plain "host:port" is
not a list: connect() then dials it as it always has, as it does a list of
plain addresses that comes to one; a dns:/// name is always routed, even
while it resolves to one address. An empty address or an entry without a
port is INVALID_ARGUMENT before anything is dialed.

Endpoints: the dns:/// names are resolved again (by `resolver`, default
socket.getaddrinfo) when a placement is made after the last resolution is
`ttl` old (PLACEMENT_TTL unless given), or at once after an endpoint
failed, so that a long-lived client follows a rollout. The new set keeps
the channel of every address it still holds; each placement, and the calls
routed by it, keep the set it was made with (two placements of different
sets, as a diff's, are matched by address). A resolution that fails keeps
the previous set; its error is named only when no endpoint answers
("...; resolving the server list again failed: ...").

Placement: on a checkpoint's first use (then every `ttl` seconds,
and at once after an endpoint of it failed) every endpoint is asked
GetCheckpoint in parallel, with a deadline of PROBE_TIMEOUT. Each holds it
whole (no absent_files), holds some files (absent_files: a server run with
--partial-shards, whose ListTensors then says which tensors it serves), does
not hold it (NOT_FOUND), refuses it (another error) or fails (UNAVAILABLE,
DEADLINE_EXCEEDED: unreachable).

Routing: a call naming a tensor (read, scalars, stats, heatmap) goes to an
endpoint holding the checkpoint whole, round-robin per call among them so
replicas share the load (from a random start per placement: each process
would otherwise start at the first); with none, to the first partial holder
listing the tensor. A logical tensor no endpoint builds is
FAILED_PRECONDITION, never its stored part of that name (part=True reads
that). A call naming a reference tensor too (stats, heatmap) goes where
both are. When the endpoint chosen is unreachable, or refuses with
RESOURCE_EXHAUSTED, before any reply reached the caller, the next candidate
is tried (RESOURCE_EXHAUSTED only when every reachable one refused so). server_info() asks the first
endpoint that answers. diff() runs on an endpoint holding both checkpoints
whole.

Merging (no endpoint holds the checkpoint whole): checkpoint() and tensors()
are what one server holding every file gives: files in name order, counts
and total_bytes of the union, metadata in file order, conventions and notes
of the holders in endpoint order; tensors sorted by name. A tensor whose
stored tensors are in shards on different endpoints is built by none: the
merge then raises FAILED_PRECONDITION naming them rather than drop them,
while calls naming other tensors go on. checkpoints() is the union by path
of every endpoint's listing, in scan order, each path once (the entry with
the most files; a path split across partial holders counts the union of
their files).

Errors (tm.Error): UNAVAILABLE naming the unreachable endpoints and their
errors (and the files no reachable endpoint holds) when a call needs data
only they may hold, e.g. "tensor 'T' of 'C': not served by any reachable
endpoint; unreachable: 127.0.0.1:7433 (...)"; UNAVAILABLE too when every
endpoint answered and files of the index are on none ("...; is a server
missing from --server, or not ready?"); a merged listing never drops
tensors silently. FAILED_PRECONDITION for diff() of a checkpoint no
endpoint holds whole, naming who holds what, and for a merge some tensors
of which no endpoint builds. Otherwise an endpoint's own error.

Thread safety: every method may be called from many threads at once.
"""

from __future__ import annotations

import copy
import itertools
import random
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import (Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple,
                    TypeVar, Union)

import numpy as np

from ._client import Client, Error, TensorInfo, channel, to_dict
from .v1 import tensormorph_pb2 as pb

# How long a checkpoint's placement is trusted before it is asked again: a
# long-lived client sees pods come and go.
PLACEMENT_TTL = 30.0
# The deadline of each endpoint's GetCheckpoint when placing a checkpoint: a
# dead endpoint must not stall a call that other endpoints can serve.
PROBE_TIMEOUT = 5.0

_DNS_SCHEME = "dns:///"

T = TypeVar("T")


# -- targets -----------------------------------------------------------------

def is_endpoint_list(targets: str) -> bool:
    """Whether `targets` names more than one plain target: a comma-separated
    list, or a dns:/// name (which may resolve to several addresses); or is
    one with spaces around it, which the list's parsing trims."""
    return ("," in targets or targets.strip().startswith(_DNS_SCHEME)
            or targets.strip() != targets)


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


# getaddrinfo's signature and answers; tests give one whose answer changes.
Resolver = Callable[..., List[Tuple[Any, Any, Any, Any, Tuple[Any, ...]]]]


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
    # The port of each answer: getaddrinfo's is the one asked; a resolver
    # standing in for it (tests) may name others.
    for family, _, _, _, sockaddr in found:
        if family == socket.AF_INET:
            out.append(f"{sockaddr[0]}:{sockaddr[1]}")
        elif family == socket.AF_INET6:
            out.append(f"[{sockaddr[0]}]:{sockaddr[1]}")
    return out


def resolve_endpoints(targets: str, resolver: Resolver = socket.getaddrinfo) -> List[str]:
    """The endpoints of a comma-separated list of targets, each "host:port"
    (one endpoint, as written) or "dns:///host:port" (every address the name
    resolves to now: IPv4 as "a.b.c.d:port", IPv6 as "[addr]:port"), in the
    order given, each address once.

    Spaces around an entry are ignored (" a:1, b:2").
    Raises tm.Error INVALID_ARGUMENT naming an entry that is empty
    ("a:1,,b:2"), has no port, or is a dns: name with an authority;
    UNAVAILABLE naming a dns:/// name that does not resolve (and why).
    `resolver` (getaddrinfo's signature and answers) resolves each name."""
    return _parse_endpoints(targets, resolve=True, resolver=resolver)


def has_dns_name(targets: str) -> bool:
    """Whether an entry of `targets` is a dns:/// name: its addresses may
    change, so a RoutedClient resolves it again from time to time."""
    return any(e.strip().startswith(_DNS_SCHEME) for e in targets.split(","))


def _parse_endpoints(targets: str, resolve: bool,
                     resolver: Resolver = socket.getaddrinfo) -> List[str]:
    """resolve_endpoints(), or with no `resolve` the syntax only (dns:///
    names checked, not resolved)."""
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
            continue
        if entry.startswith("dns:"):
            raise Error("INVALID_ARGUMENT",
                        f"server list entry {what} '{entry}': only dns:///name:port "
                        "(no DNS server authority) is supported")
        _split_host_port(entry, what)
        out.append(entry)
    # The same server named twice would get twice the calls.
    return list(dict.fromkeys(out))


# -- placement ---------------------------------------------------------------

_WHOLE, _PARTIAL, _ABSENT, _REFUSED, _FAILED = "whole", "partial", "absent", "refused", "failed"


def _unreachable(e: Optional[Error]) -> bool:
    return e is not None and e.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED")


@dataclass
class _Answer:
    """What one endpoint said about a checkpoint."""

    kind: str = _ABSENT
    error: Optional[Error] = None  # _ABSENT, _REFUSED, _FAILED
    info: Dict[str, Any] = field(default_factory=dict)  # checkpoint()'s dict

    def holds(self, file: str) -> bool:
        return any(f["path"] == file for f in self.info.get("files", ()))


@dataclass
class _Placement:
    """What the endpoints said about one checkpoint."""

    created: float
    eps: "_EndpointSet"  # the endpoints it was made with; indices below are of it
    answers: List[_Answer]  # by endpoint
    whole: List[int] = field(default_factory=list)
    partial: List[int] = field(default_factory=list)
    # With no whole holder: each tensor (logical; stored parts) the partial
    # holders list, to the holders listing it, in endpoint order.
    logical: Dict[str, List[int]] = field(default_factory=dict)
    parts: Dict[str, List[int]] = field(default_factory=dict)
    # Every file a holder names, held or absent, in name order.
    all_files: List[str] = field(default_factory=list)
    # Stored tensors the partial holders list as parts but build into no
    # logical tensor: their tensor straddles shards on different endpoints.
    unbuilt: List[str] = field(default_factory=list)
    # Each stored tensor to the partial holders building it into a logical
    # tensor (the others withhold its module): where its name, read as a
    # tensor, resolves to that part.
    claimed: Dict[str, List[int]] = field(default_factory=dict)
    # Round-robin among `whole` (next() on a count is atomic in CPython),
    # from a random start: each process would otherwise start at the first.
    turn: "itertools.count[int]" = field(
        default_factory=lambda: itertools.count(random.randrange(1 << 30)))

    def rotated_whole(self) -> List[int]:
        k = next(self.turn) % len(self.whole)
        return self.whole[k:] + self.whole[:k]


class _Endpoint:
    def __init__(self, address: str, token: Optional[str], tls_ca: Optional[str]) -> None:
        self.address = address
        ch = channel(address, tls_ca)
        self.client = Client(ch, token=token)
        self.probe = Client(ch, token=token, timeout=PROBE_TIMEOUT)


class _EndpointSet:
    """One resolution of the targets; never changed once made. A set that
    follows shares the _Endpoint (its channel) of every address it keeps."""

    def __init__(self, endpoints: List[_Endpoint]) -> None:
        self.list = endpoints
        self.addresses = [e.address for e in endpoints]


def _in_both(mine: Sequence[int], eps: _EndpointSet, theirs: Sequence[int],
             other: _EndpointSet) -> List[int]:
    """The indices of `mine` (in `eps`) whose addresses are among `theirs`
    (in `other`): placements made with different sets match by address."""
    addresses = {other.addresses[j] for j in theirs}
    return [i for i in mine if eps.addresses[i] in addresses]


def _scan_key(path: str) -> List[str]:
    # Scan order, as a server's ListCheckpoints sends entries: path
    # components compared bytewise (code points order UTF-8 alike).
    return path.split("/")


class RoutedClient:
    """Several tensormorphd as one: the calls of `Client`, each routed to an
    endpoint holding its data and replies merged as one server would give
    them (the module's docstring states the contract). Use connect()."""

    def __init__(self, endpoints: Sequence[str], token: Optional[str] = None,
                 tls_ca: Optional[str] = None, targets: Optional[str] = None,
                 ttl: float = PLACEMENT_TTL,
                 resolver: Resolver = socket.getaddrinfo) -> None:
        """`endpoints` is `targets` resolved now (resolve_endpoints with
        `resolver`); without `targets`, the endpoints are the targets.
        `ttl`: the placement TTL (seconds), and the least time between two
        resolutions of the dns:/// names of `targets` when no endpoint
        failed. REQUIRES: `endpoints` not empty."""
        if not endpoints:
            raise Error("INVALID_ARGUMENT", "no endpoints")
        self._token, self._tls_ca = token, tls_ca
        self._targets = targets if targets is not None else ",".join(endpoints)
        self._dynamic = has_dns_name(self._targets)
        self._ttl = ttl
        self._resolver = resolver
        self._set = _EndpointSet([_Endpoint(a, token, tls_ca) for a in endpoints])
        self._resolved_at = time.monotonic()
        self._endpoint_failed = False
        self._resolve_error: Optional[Error] = None
        self._resolve_lock = threading.Lock()  # one resolution at a time
        # Sized for the first set; a larger one later waits its turn.
        self._pool = ThreadPoolExecutor(max_workers=max(8, 2 * len(endpoints)),
                                        thread_name_prefix="tm-router")
        self._lock = threading.Lock()
        self._placements: Dict[str, _Placement] = {}

    @property
    def endpoints(self) -> List[str]:
        """The addresses of the current endpoint set, in the order given
        (resolved)."""
        with self._lock:
            return list(self._set.addresses)

    def close(self) -> None:
        """Closes the current endpoints' channels (those of addresses gone
        from the set close when no placement holds them)."""
        self._pool.shutdown(wait=True)
        with self._lock:
            eps = self._set
        for e in eps.list:
            e.client.close()

    def __enter__(self) -> "RoutedClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- plumbing -----------------------------------------------------------

    def _each(self, indices: Iterable[int], task: Callable[[int], T]) -> Dict[int, T]:
        """`task` on each endpoint index at once; results by index."""
        futures = {i: self._pool.submit(task, i) for i in indices}
        return {i: f.result() for i, f in futures.items()}

    def _refresh(self) -> _EndpointSet:
        """The endpoint set to place with: the dns:/// names resolved again
        first when the last resolution is the TTL old, or an endpoint failed
        since. A set that changes keeps the _Endpoint of every address it
        still holds; a resolution that fails keeps the previous set (and is
        named by _resolve_note when no endpoint answers)."""
        if not self._dynamic:
            return self._set
        with self._resolve_lock:  # the calls waiting here then find it done
            with self._lock:
                if (not self._endpoint_failed
                        and time.monotonic() - self._resolved_at < self._ttl):
                    return self._set
                old = self._set
                # At most once per TTL, and once per failure seen.
                self._resolved_at = time.monotonic()
                self._endpoint_failed = False
            try:
                addresses = resolve_endpoints(self._targets, self._resolver)
                if not addresses:
                    raise Error("UNAVAILABLE", f"server list '{self._targets}' resolves to "
                                "no address")
            except Error as e:
                # The endpoints known so far may well still answer.
                with self._lock:
                    self._resolve_error = e
                    return self._set
            if addresses == old.addresses:
                with self._lock:
                    self._resolve_error = None
                    return self._set
            kept = dict(zip(old.addresses, old.list))
            eps = _EndpointSet([kept.get(a) or _Endpoint(a, self._token, self._tls_ca)
                                for a in addresses])
            with self._lock:
                self._resolve_error = None
                # Placements of the old set route by it until they expire or fail.
                self._set = eps
                return eps

    def _resolve_note(self) -> str:
        """"; resolving the server list again failed: ..." when the last
        resolution did (the endpoints of the last one that worked were asked)."""
        with self._lock:
            e = self._resolve_error
        return f"; resolving the server list again failed: {e.message}" if e else ""

    def _failed(self) -> None:
        """An endpoint failed: the next placement resolves the names again."""
        with self._lock:
            self._endpoint_failed = True

    def _probe(self, ckpt: str) -> _Placement:
        eps = self._refresh()
        n = len(eps.list)

        def ask(i: int) -> _Answer:
            try:
                info = eps.list[i].probe.checkpoint(ckpt)
            except Error as e:
                kind = _ABSENT if e.code == "NOT_FOUND" else _FAILED if _unreachable(e) else _REFUSED
                if e.code == "DEADLINE_EXCEEDED":
                    # The probe's own deadline, not the client's.
                    e = Error("DEADLINE_EXCEEDED",
                              "no reply to the placement probe (GetCheckpoint) within "
                              f"{PROBE_TIMEOUT:g}s: probes have a fixed deadline (PROBE_TIMEOUT), "
                              "so that a hung endpoint does not stall the others")
                return _Answer(kind, e)
            return _Answer(_PARTIAL if info["absent_files"] else _WHOLE, None, info)

        answers = self._each(range(n), ask)
        p = _Placement(created=time.monotonic(), eps=eps, answers=[answers[i] for i in range(n)])
        # Which partial holder serves which tensor matters only when no
        # endpoint holds it whole.
        if not any(a.kind == _WHOLE for a in p.answers):
            def listing(i: int) -> Optional[Tuple[List[TensorInfo], List[TensorInfo]]]:
                a = p.answers[i]
                try:
                    return (eps.list[i].client.tensors(ckpt),
                            eps.list[i].client.tensors(ckpt, parts=True))
                except Error as e:
                    a.kind, a.error = (_FAILED if _unreachable(e) else _REFUSED), e
                    return None

            lists = self._each([i for i in range(n) if p.answers[i].kind == _PARTIAL], listing)
            # One server builds every stored tensor into a logical one. A
            # stored tensor no holder builds belongs to a tensor whose parts
            # are on different endpoints.
            built = set()
            for i in sorted(lists):
                got = lists[i]
                if got is None or p.answers[i].kind != _PARTIAL:
                    continue
                for t in got[0]:
                    p.logical.setdefault(t.name, []).append(i)
                    for part in t.parts:
                        built.add(part.name)
                        at = p.claimed.setdefault(part.name, [])
                        if not at or at[-1] != i:
                            at.append(i)
                for t in got[1]:
                    p.parts.setdefault(t.name, []).append(i)
            p.unbuilt = sorted(name for name in p.parts if name not in built)
        files = set()
        for i, a in enumerate(p.answers):
            if a.kind == _WHOLE:
                p.whole.append(i)
            elif a.kind == _PARTIAL:
                p.partial.append(i)
            if a.kind in (_WHOLE, _PARTIAL):
                files.update(f["path"] for f in a.info["files"])
                files.update(a.info["absent_files"])
        p.all_files = sorted(files)
        return p

    def _place(self, ckpt: str) -> _Placement:
        """The placement of `ckpt`, cached for the TTL. Raises what one
        server would when no endpoint holds it (NOT_FOUND, or the refusal of
        the first that refused), UNAVAILABLE when only unreachable endpoints
        might."""
        with self._lock:
            p = self._placements.get(ckpt)
        if p is None or time.monotonic() - p.created >= self._ttl:
            # Probed off the lock: two first calls may both probe; the last wins.
            p = self._probe(ckpt)
            if p.whole or p.partial:
                with self._lock:
                    # Expired ones go here: a long-lived client otherwise
                    # keeps every checkpoint it ever named.
                    now = time.monotonic()
                    for k in [k for k, v in self._placements.items()
                              if now - v.created >= self._ttl]:
                        del self._placements[k]
                    self._placements[ckpt] = p
        if p.whole or p.partial:
            return p
        unreachable = self._unreachable(p)
        if unreachable:
            raise Error("UNAVAILABLE", f"checkpoint '{ckpt}': held by no reachable endpoint; "
                        f"unreachable: {unreachable}{self._resolve_note()}")
        for a in p.answers:
            if a.kind == _REFUSED and a.error is not None:
                raise a.error
        assert p.answers[0].error is not None
        raise p.answers[0].error  # NOT_FOUND, as one server says it

    def _forget(self, ckpt: str) -> None:
        with self._lock:
            self._placements.pop(ckpt, None)
            self._endpoint_failed = True

    def _unreachable(self, p: _Placement) -> str:
        """"127.0.0.1:7433 (connection refused), ..." for the endpoints of
        `p` that failed."""
        return ", ".join(f"{p.eps.addresses[i]} ({a.error.message})"
                         for i, a in enumerate(p.answers)
                         if a.kind == _FAILED and a.error is not None)

    def _check_served(self, what: str, p: _Placement, live: Sequence[int],
                      now: Optional[Dict[int, Error]] = None) -> None:
        """Raises UNAVAILABLE naming the files of `p` no endpoint in `live`
        holds and the endpoints that failed (at placement, or now: `now`)."""
        unserved = [f for f in p.all_files if not any(p.answers[i].holds(f) for i in live)]
        if not unserved:
            return
        failed = []
        for i, a in enumerate(p.answers):
            if a.kind == _FAILED or (i not in live and a.kind in (_PARTIAL, _WHOLE)):
                why = (now or {}).get(i) or a.error
                failed.append(f"{p.eps.addresses[i]} "
                              f"({why.message if why is not None else 'failed'})")
        if not failed:
            # Every endpoint answered and none holds them: most often a
            # server left out of the list, or not ready yet (a headless
            # Service's DNS drops unready pods). UNAVAILABLE, which retry
            # logic retries, not DATA_LOSS.
            raise Error("UNAVAILABLE", f"{what}: files no endpoint in the list "
                        f"({', '.join(p.eps.addresses)}) holds: {', '.join(unserved)}; "
                        "is a server missing from --server, or not ready?")
        raise Error("UNAVAILABLE", f"{what}: not served by any reachable endpoint; unreachable: "
                    f"{', '.join(failed)}; files no reachable endpoint holds: "
                    f"{', '.join(unserved)}")

    def _check_built(self, what: str, p: _Placement) -> None:
        """Raises FAILED_PRECONDITION naming the stored tensors no partial
        holder builds into a logical tensor."""
        if not p.unbuilt:
            return
        named = []
        for n in p.unbuilt:
            if len(named) == 5:
                named.append(f"and {len(p.unbuilt) - 5} more")
                break
            at = ", ".join(p.eps.addresses[i] for i in p.parts[n])
            named.append(f"{n} (on {at})")
        raise Error("FAILED_PRECONDITION",
                    f"{what}: no endpoint builds the tensors these stored tensors belong to, "
                    f"whose companions are in shard files on other endpoints: {', '.join(named)}"
                    "; a merged listing would drop them. Serve each module's shards on one "
                    "endpoint, or the checkpoint whole on one; the other tensors read as usual")

    def _unbuilt_error(self, what: str, p: _Placement, tensor: str) -> None:
        """Raises FAILED_PRECONDITION for `tensor` (unbuilt, read as a
        logical tensor), naming the stored tensors of its module no endpoint
        builds and where they are."""
        module = tensor[:tensor.rfind(".") + 1] if "." in tensor else ""
        named = []
        for n in p.unbuilt:
            if n != tensor and (not module or not n.startswith(module)):
                continue
            at = ", ".join(p.eps.addresses[i] for i in p.parts[n])
            named.append(f"{n} (on {at})")
        raise Error("FAILED_PRECONDITION",
                    f"{what}: no endpoint builds it, its stored tensors being in shard files on "
                    f"different endpoints: {', '.join(named)}; its stored part of that name "
                    "alone is read with part=true (--part). Serve each module's shards on one "
                    "endpoint, or the checkpoint whole on one")

    def _candidates(self, ckpt: str, tensor: str, part: bool) -> Tuple[List[int], _Placement]:
        """The endpoints to try for `tensor` of `ckpt`, in order, as indices
        in the endpoint set of the placement returned with them."""
        p = self._place(ckpt)
        return self._candidates_in(p, ckpt, tensor, part), p

    def _candidates_in(self, p: _Placement, ckpt: str, tensor: str, part: bool) -> List[int]:
        if p.whole:
            return p.rotated_whole()
        if not part and tensor in p.logical:
            return list(p.logical[tensor])
        if not part and tensor in p.claimed:
            # A stored tensor's name read as a tensor: only where its module
            # is built (a holder withholding it answers NOT_FOUND).
            return list(p.claimed[tensor])
        if not part and tensor in p.parts:
            # Never the half of a tensor straddling endpoints, whose values
            # alone are wrong (FP8 codes without their scale).
            self._unbuilt_error(f"tensor '{tensor}' of '{ckpt}'", p, tensor)
        if tensor in p.parts:
            return list(p.parts[tensor])
        what = f"tensor '{tensor}' of '{ckpt}'"
        self._check_served(what, p, p.partial)
        failed = self._unreachable(p)
        if failed:
            raise Error("UNAVAILABLE", f"{what}: not served by any reachable endpoint; "
                        f"unreachable: {failed}{self._resolve_note()}")
        # No endpoint lists it and none is missing: the first partial holder
        # says why (a near name, or the shard it would be in).
        return [p.partial[0]]

    def _route(self, ckpt: str, tensor: str, part: bool, reference: str,
               reference_tensor: str, call: Callable[[Client], T]) -> T:
        """`call` on an endpoint holding {ckpt, tensor} and, with
        `reference`, {reference, reference_tensor} too; the next when one is
        unreachable."""
        order, p = self._candidates(ckpt, tensor, part)
        if reference:
            ref_tensor = reference_tensor or tensor
            ref, rp = self._candidates(reference, ref_tensor, False)
            both = _in_both(order, p.eps, ref, rp.eps)
            if not both:
                def names(v: List[int], eps: _EndpointSet) -> str:
                    return ", ".join(eps.addresses[i] for i in v)
                raise Error("FAILED_PRECONDITION",
                            f"tensor '{tensor}' of '{ckpt}' is served by {names(order, p.eps)} "
                            f"and its reference '{ref_tensor}' of '{reference}' by "
                            f"{names(ref, rp.eps)}: no endpoint holds both, and the comparison "
                            "runs on one")
            order = both
        return self._try_in_order(p.eps, order, f"tensor '{tensor}' of '{ckpt}'", [ckpt, reference],
                                  call)

    def _try_in_order(self, eps: _EndpointSet, order: Sequence[int], what: str,
                      placed: Sequence[str], call: Callable[[Client], T]) -> T:
        """`call` on the endpoints of `order` until one answers or fails
        otherwise than unreachable or RESOURCE_EXHAUSTED (a server at its
        limit, e.g. max_concurrent_diffs: another may have room); forgets
        the placements of `placed` when one is unreachable.
        RESOURCE_EXHAUSTED when none answered and some refused so."""
        failed: List[str] = []
        busy: List[str] = []
        first_busy: Optional[Error] = None
        for i in order:
            try:
                return call(eps.list[i].client)
            except Error as e:
                if e.code == "RESOURCE_EXHAUSTED":
                    first_busy = first_busy or e
                    busy.append(f"{eps.addresses[i]} ({e.message})")
                    continue
                if not _unreachable(e):
                    raise
                failed.append(f"{eps.addresses[i]} ({e.message})")
                # Placed again on the next call, without it.
                for c in placed:
                    if c:
                        self._forget(c)
        if busy and first_busy is not None:
            # Its own words (as one server says them: a per-request limit
            # reads the same), then who else refused.
            if len(busy) == 1 and not failed:
                raise first_busy
            raise Error("RESOURCE_EXHAUSTED",
                        f"{first_busy.message} ({what}: every reachable endpoint holding it "
                        f"refused so: {', '.join(busy)}"
                        + (f"; unreachable: {', '.join(failed)}" if failed else "") + ")")
        raise Error("UNAVAILABLE", f"{what}: not served by any reachable endpoint; "
                    f"unreachable: {', '.join(failed)}{self._resolve_note()}")

    def _describe(self, p: _Placement) -> str:
        """"127.0.0.1:7431 whole; 127.0.0.1:7432 (a.safetensors)" ..."""
        out = [f"{p.eps.addresses[i]} whole" for i in p.whole]
        for i in p.partial:
            files = ", ".join(f["path"] for f in p.answers[i].info["files"])
            out.append(f"{p.eps.addresses[i]} ({files})")
        return "; ".join(out) if out else "no endpoint"

    # -- calls --------------------------------------------------------------

    def server_info(self) -> Dict[str, Any]:
        """GetServerInfo of the first endpoint that answers."""
        failed = []
        for e in self._refresh().list:
            try:
                return e.client.server_info()
            except Error as err:
                if not _unreachable(err):
                    raise
                failed.append(f"{e.address} ({err.message})")
        self._failed()
        raise Error("UNAVAILABLE", f"GetServerInfo: no endpoint reachable: {', '.join(failed)}"
                    f"{self._resolve_note()}")

    def checkpoint(self, ckpt: str) -> Dict[str, Any]:
        """GetCheckpoint: a whole holder's, or the partial holders' merged."""
        p = self._place(ckpt)
        if not p.whole:
            return self._merge_checkpoint(ckpt, p)
        return self._try_in_order(p.eps, p.rotated_whole(), f"checkpoint '{ckpt}'", [ckpt],
                                  lambda c: c.checkpoint(ckpt))

    def _merge_checkpoint(self, ckpt: str, p: _Placement) -> Dict[str, Any]:
        what = f"checkpoint '{ckpt}'"
        self._check_served(what, p, p.partial)
        self._check_built(what, p)
        out = to_dict(pb.GetCheckpointResponse())
        out["checkpoint"] = ckpt
        out["format"] = p.answers[p.partial[0]].info["format"]
        total = 0
        for f in p.all_files:
            for i in p.partial:
                info = p.answers[i].info
                if not p.answers[i].holds(f):
                    continue
                for fi in info["files"]:
                    if fi["path"] == f:
                        out["files"].append(dict(fi))
                        total += fi["size_bytes"]
                # Its metadata entries, named by file as a server of several
                # files names them (one holding a single file leaves it out).
                for m in info["metadata"]:
                    file = (info["files"][0]["path"] if not m["file"] and len(info["files"]) == 1
                            else m["file"])
                    if file != f:
                        continue
                    e = copy.deepcopy(m)
                    e["file"] = f if len(p.all_files) > 1 else ""
                    out["metadata"].append(e)
                break
        out["total_bytes"] = total
        out["tensor_count"] = len(p.logical)
        out["stored_tensor_count"] = len(p.parts)
        for i in p.partial:
            info = p.answers[i].info
            for key in ("conventions", "notes"):
                for v in info[key]:
                    if v not in out[key]:
                        out[key].append(v)
        # The configs sit beside the shards: every server read the same files.
        first = p.answers[p.partial[0]].info
        for key in ("quant_config", "config_files"):
            out[key] = copy.deepcopy(first.get(key, []))
        return out

    def tensors(self, ckpt: str, filter: str = "", parts: bool = False) -> List[TensorInfo]:
        """ListTensors: a whole holder's, or the partial holders' merged."""
        p = self._place(ckpt)
        if p.whole:
            return self._try_in_order(p.eps, p.rotated_whole(), f"ListTensors of '{ckpt}'", [ckpt],
                                      lambda c: c.tensors(ckpt, filter=filter, parts=parts))

        def listing(i: int) -> Union[List[TensorInfo], Error]:
            try:
                return p.eps.list[i].client.tensors(ckpt, filter=filter, parts=parts)
            except Error as e:
                return e

        lists = self._each(p.partial, listing)
        live: List[int] = []
        now: Dict[int, Error] = {}
        for i in p.partial:
            got = lists[i]
            if not isinstance(got, Error):
                live.append(i)
            elif _unreachable(got):
                now[i] = got
                self._forget(ckpt)  # named by _check_served below
            else:
                raise got
        what = f"ListTensors of '{ckpt}'"
        self._check_served(what, p, live, now)
        self._check_built(what, p)
        # One server lists logical tensors and stored parts alike sorted by
        # name; a name several holders list is taken from the first.
        by_name: Dict[str, TensorInfo] = {}
        for i in live:
            got = lists[i]
            assert not isinstance(got, Error)
            for t in got:
                by_name.setdefault(t.name, t)
        return [by_name[n] for n in sorted(by_name)]

    def checkpoints(self, root: str = "", max_depth: Optional[int] = None) -> List[Dict[str, Any]]:
        """ListCheckpoints of every endpoint, the union by path in scan
        order (the entry with the most files; for a path several endpoints
        list and only partial holders hold, file_count and total_bytes of
        the union of their files, and stored_tensor_count when set and every
        file is held, as one server holding it all lists it). UNAVAILABLE
        when an endpoint is unreachable: a listing never drops what it may
        hold."""
        def listing(i: int) -> Union[List[Dict[str, Any]], Error]:
            try:
                return eps.list[i].client.checkpoints(root, max_depth=max_depth)
            except Error as e:
                return e

        eps = self._refresh()
        lists = self._each(range(len(eps.list)), listing)
        failed = []
        first_error: Optional[Error] = None
        any_ok = False
        for i in range(len(eps.list)):
            got = lists[i]
            if not isinstance(got, Error):
                any_ok = True
            elif _unreachable(got):
                failed.append(f"{eps.addresses[i]} ({got.message})")
            elif first_error is None:
                first_error = got
        if failed:
            self._failed()
            raise Error("UNAVAILABLE", f"ListCheckpoints of '{root}': endpoints unreachable: "
                        f"{', '.join(failed)}{self._resolve_note()}")
        if not any_ok and first_error is not None:
            raise first_error
        by_path: Dict[str, Dict[str, Any]] = {}
        listed: Dict[str, int] = {}
        for i in range(len(eps.list)):
            got = lists[i]
            if isinstance(got, Error):
                continue  # refused; another endpoint answered
            for e in got:
                listed[e["path"]] = listed.get(e["path"], 0) + 1
                have = by_path.get(e["path"])
                if have is None or e["file_count"] > have["file_count"]:
                    by_path[e["path"]] = e
        # A path several endpoints list may be split across partial
        # holders, each listing its own files: count the union.
        for path, e in by_path.items():
            if listed[path] < 2:
                continue
            try:
                p = self._place(path)
            except Error:
                continue
            if p.whole:
                continue
            files, total = 0, 0
            for f in p.all_files:
                for i in p.partial:
                    sizes = [fi["size_bytes"] for fi in p.answers[i].info["files"]
                             if fi["path"] == f]
                    if sizes:
                        files += 1
                        total += sizes[0]
                        break
            e["file_count"] = files
            e["total_bytes"] = total
            if e.get("stored_tensor_count") is not None and files == len(p.all_files):
                e["stored_tensor_count"] = len(p.parts)
        return [by_path[k] for k in sorted(by_path, key=_scan_key)]

    def read(self, ckpt: str, tensor: str, slice: Optional[str] = None,
             raw: bool = False, part: bool = False, max_chunk_bytes: int = 0) -> np.ndarray:
        """ReadSlice on an endpoint holding the tensor (see Client.read)."""
        return self._route(ckpt, tensor, part, "", "",
                           lambda c: c.read(ckpt, tensor, slice=slice, raw=raw, part=part,
                                            max_chunk_bytes=max_chunk_bytes))

    def scalars(self, ckpt: str, tensor: str,
                indices: Iterable[Union[Sequence[int], int]],
                part: bool = False, reference: str = "",
                reference_tensor: str = "") -> List[Dict[str, Any]]:
        """InspectScalars on an endpoint holding the tensor (and the reference
        tensor, when given); see Client.scalars."""
        idx = list(indices)
        return self._route(ckpt, tensor, part, reference, reference_tensor,
                           lambda c: c.scalars(ckpt, tensor, idx, part=part, reference=reference,
                                               reference_tensor=reference_tensor))

    def stats(self, ckpt: str, tensor: str, bins: int = 0,
              range: Optional[Tuple[float, float]] = None, reference: str = "",
              reference_tensor: str = "", group: Optional[int] = None) -> Dict[str, Any]:
        """ComputeStats on an endpoint holding the tensor (and the reference
        tensor, when given); see Client.stats."""
        return self._route(ckpt, tensor, False, reference, reference_tensor,
                           lambda c: c.stats(ckpt, tensor, bins=bins, range=range,
                                             reference=reference,
                                             reference_tensor=reference_tensor, group=group))

    def heatmap(self, ckpt: str, tensor: str, mode: str = "group", width: int = 256,
                height: int = 256, leading: Sequence[int] = (), reference: str = "",
                reference_tensor: str = "",
                region: Optional[Tuple[int, int, int, int]] = None) -> Dict[str, Any]:
        """GetHeatmap on an endpoint holding the tensor (and the reference
        tensor, when given); see Client.heatmap."""
        return self._route(ckpt, tensor, False, reference, reference_tensor,
                           lambda c: c.heatmap(ckpt, tensor, mode=mode, width=width,
                                               height=height, leading=leading,
                                               reference=reference,
                                               reference_tensor=reference_tensor,
                                               region=region))

    def diff(self, quant: str, source: str, filter: Optional[str] = None,
             fail_on: Optional[Sequence[str]] = None, top_k: Optional[int] = None,
             worst_groups: Optional[int] = None) -> Iterator[Dict[str, Any]]:
        """QuantDiff on an endpoint holding both checkpoints whole (see
        Client.diff); FAILED_PRECONDITION naming who holds what when none
        does. An endpoint unreachable, or refusing RESOURCE_EXHAUSTED,
        before its first event is skipped."""
        q = self._place(quant)
        ref = self._place(source)
        both = _in_both(q.whole, q.eps, ref.whole, ref.eps)
        if not both:
            raise Error("FAILED_PRECONDITION",
                        f"QuantDiff of '{quant}' against '{source}' runs on one endpoint "
                        f"holding both whole, and none does: '{quant}' is on "
                        f"{self._describe(q)}; '{source}' is on {self._describe(ref)}")
        k = next(q.turn) % len(both)
        order = both[k:] + both[:k]
        failed: List[str] = []
        busy: List[str] = []
        for i in order:
            delivered = False
            try:
                for event in q.eps.list[i].client.diff(
                        quant, source, filter=filter, fail_on=fail_on, top_k=top_k,
                        worst_groups=worst_groups):
                    delivered = True
                    yield event
                return
            except Error as e:
                # A replica at max_concurrent_diffs refused before starting:
                # another may have room.
                if not delivered and e.code == "RESOURCE_EXHAUSTED":
                    busy.append(f"{q.eps.addresses[i]} ({e.message})")
                    continue
                if delivered or not _unreachable(e):
                    raise
                failed.append(f"{q.eps.addresses[i]} ({e.message})")
                self._forget(quant)
                self._forget(source)
        if busy:
            raise Error("RESOURCE_EXHAUSTED",
                        f"QuantDiff of '{quant}' against '{source}': every reachable endpoint "
                        f"holding both refused it: {', '.join(busy)}"
                        + (f"; unreachable: {', '.join(failed)}" if failed else ""))
        raise Error("UNAVAILABLE", f"QuantDiff of '{quant}' against '{source}': not served by "
                    f"any reachable endpoint; unreachable: {', '.join(failed)}"
                    f"{self._resolve_note()}")
