"""Several tensormorphd behind one Python client (tm.connect("a,b,c")): three
servers run with --partial-shards each hold one shard of a checkpoint, and
the client given all three answers every call exactly as one server holding
every shard. Endpoints that fail are named; replicas share calls; dns:///
resolves. The Python twin of tests/client/router_test.cc.

Run by ctest (tests/CMakeLists.txt, the python_client entry) with
PYTHONPATH=<build>/python and:
  TENSORMORPH_TENSORMORPHD  the server
  TENSORMORPH_FIXTURES_DIR  the fixtures (safetensors/gptq_4bit_g32, ...)
"""

from __future__ import annotations

import os
import shutil
import socket
import struct
import tempfile
import threading
import time
import unittest
from pathlib import Path
from typing import Any, List, Optional

import numpy as np

import tensormorph as tm
from live_server import LiveServer
from sharded_checkpoint import SHARDS, copy_shards, write_sharded_gptq

TENSORMORPHD = os.environ["TENSORMORPH_TENSORMORPHD"]
FIXTURES = Path(os.environ.get("TENSORMORPH_FIXTURES_DIR",
                               Path(__file__).resolve().parents[2].parent / "shared" / "fixtures"))
CKPT = "m"


class Roots:
    """One root per shard (index and configs in each), and one with all three."""

    def __init__(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="tm-py-router-")
        base = Path(self._tmp.name)
        self.checkpoint = write_sharded_gptq(FIXTURES, base / "checkpoint")
        self.parts: List[str] = []
        for i, shard in enumerate(SHARDS):
            root = base / f"part{i}"
            copy_shards(self.checkpoint, [shard], root / CKPT)
            self.parts.append(str(root))
        self.whole = str(base / "whole")
        copy_shards(self.checkpoint, SHARDS, Path(self.whole) / CKPT)

    def cleanup(self) -> None:
        self._tmp.cleanup()


def partial_servers(roots: Roots) -> List[LiveServer]:
    return [LiveServer(TENSORMORPHD, r, ["--partial-shards"]) for r in roots.parts]


def same(a: Any, b: Any, where: str = "") -> None:
    """Equal value for value, floats and arrays bit for bit."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), f"{where}: {a.keys()} vs {b}"
        for k in a:
            same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, type(a)) and len(a) == len(b), f"{where}: {a} vs {b}"
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray), where
        assert (a.dtype, a.shape) == (b.dtype, b.shape), f"{where}: {a.dtype}{a.shape}"
        assert a.tobytes() == b.tobytes(), f"{where}: values differ"
    elif isinstance(a, float):
        assert isinstance(b, float) and struct.pack("<d", a) == struct.pack("<d", b), \
            f"{where}: {a} vs {b}"
    else:
        assert a == b, f"{where}: {a!r} vs {b!r}"


_roots: Roots
_partial: List[LiveServer]
_whole: LiveServer


def setUpModule() -> None:
    global _roots, _partial, _whole
    if not (FIXTURES / "safetensors" / "gptq_4bit_g32").is_dir():
        raise unittest.SkipTest(f"no fixtures at {FIXTURES}")
    _roots = Roots()
    _partial = partial_servers(_roots)
    _whole = LiveServer(TENSORMORPHD, _roots.whole)


def tearDownModule() -> None:
    for s in _partial:
        s.stop()
    _whole.stop()
    _roots.cleanup()


def listed() -> str:
    return ",".join(s.address for s in _partial)


class RoutedTest(unittest.TestCase):
    def setUp(self) -> None:
        self.routed = tm.connect(listed())
        self.single = tm.connect(_whole.address)

    def tearDown(self) -> None:
        self.routed.close()
        self.single.close()

    def test_a_list_routes_and_one_target_dials_as_before(self) -> None:
        self.assertIsInstance(self.routed, tm.RoutedClient)
        self.assertEqual(self.routed.endpoints, [s.address for s in _partial])
        self.assertIsInstance(self.single, tm.Client)

    def test_checkpoint_is_the_single_servers(self) -> None:
        routed = self.routed.checkpoint(CKPT)
        self.assertEqual([f["path"] for f in routed["files"]], SHARDS)
        self.assertEqual(routed["absent_files"], [])
        same(routed, self.single.checkpoint(CKPT))
        # Each partial server says what it lacks.
        with tm.connect(_partial[0].address) as one:
            self.assertEqual(one.checkpoint(CKPT)["absent_files"], SHARDS[1:])

    def test_tensors_are_the_single_servers_every_field(self) -> None:
        for parts in (False, True):
            routed = self.routed.tensors(CKPT, parts=parts)
            self.assertTrue(routed)
            self.assertEqual(routed, self.single.tensors(CKPT, parts=parts), parts)
        routed = self.routed.tensors(CKPT, filter="*proj*")
        self.assertEqual(len(routed), 2)
        self.assertEqual(routed, self.single.tensors(CKPT, filter="*proj*"))

    def test_every_tensor_reads_the_same_bits_float_and_raw(self) -> None:
        for parts in (False, True):
            for t in self.single.tensors(CKPT, parts=parts):
                for raw in (False, True):
                    where = f"{t.name} part={parts} raw={raw}"
                    try:
                        want = self.single.read(CKPT, t.name, raw=raw, part=parts)
                    except tm.Error as e:
                        with self.assertRaises(tm.Error, msg=where) as got:
                            self.routed.read(CKPT, t.name, raw=raw, part=parts)
                        self.assertEqual((got.exception.code, got.exception.message),
                                         (e.code, e.message), where)
                        continue
                    got = self.routed.read(CKPT, t.name, raw=raw, part=parts)
                    same(np.asarray(got), np.asarray(want), where)
                    if raw:
                        self.assertEqual(got.stored_dtype, want.stored_dtype, where)
                        self.assertEqual(got.stored_shape, want.stored_shape, where)
        sliced = self.routed.read(CKPT, "lm_head.weight", slice="1, :8", raw=True)
        same(np.asarray(sliced),
             np.asarray(self.single.read(CKPT, "lm_head.weight", slice="1, :8", raw=True)))

    def test_scalars_stats_and_heatmaps_are_the_single_servers(self) -> None:
        for t in self.single.tensors(CKPT):
            indices = list(range(0, t.num_elements, 7))
            same(self.routed.scalars(CKPT, t.name, indices),
                 self.single.scalars(CKPT, t.name, indices), t.name)
            same(self.routed.stats(CKPT, t.name), self.single.stats(CKPT, t.name), t.name)
            same(self.routed.heatmap(CKPT, t.name, width=8, height=4),
                 self.single.heatmap(CKPT, t.name, width=8, height=4), t.name)
        # With a reference: the comparison runs where both are.
        t = "model.layers.0.self_attn.q_proj.weight"
        same(self.routed.stats(CKPT, t, reference=CKPT),
             self.single.stats(CKPT, t, reference=CKPT))
        same(self.routed.heatmap(CKPT, t, mode="error", width=8, height=4, reference=CKPT),
             self.single.heatmap(CKPT, t, mode="error", width=8, height=4, reference=CKPT))
        with self.assertRaises(tm.Error) as e:
            self.routed.stats(CKPT, t, reference=CKPT, reference_tensor="lm_head.weight")
        self.assertEqual(e.exception.code, "FAILED_PRECONDITION")
        self.assertIn("no endpoint holds both", e.exception.message)

    def test_an_unknown_tensor_or_checkpoint_is_not_found_as_from_one_server(self) -> None:
        with self.assertRaises(tm.Error) as e:
            self.routed.read(CKPT, "model.norm.weigth")
        self.assertEqual(e.exception.code, "NOT_FOUND")
        self.assertIn("'model.norm.weigth'", e.exception.message)
        with self.assertRaises(tm.Error) as e:
            self.routed.checkpoint("nope")
        self.assertEqual(e.exception.code, "NOT_FOUND")
        self.assertIn("nope", e.exception.message)

    def test_checkpoints_are_the_union_by_path(self) -> None:
        routed = self.routed.checkpoints()
        self.assertEqual([e["path"] for e in routed], [CKPT])
        # Each path once; split across partial holders, counted over the
        # union of their files, as the one server holding it all lists it.
        single = self.single.checkpoints()
        for key in ("file_count", "total_bytes", "stored_tensor_count", "format"):
            self.assertEqual(routed[0][key], single[0][key], key)
        self.assertEqual(routed[0]["file_count"], 3)

    def test_files_no_endpoint_holds_are_unavailable(self) -> None:
        # Every endpoint answered and a shard is on none: a server missing
        # from the list, or not ready. UNAVAILABLE, which retries retry.
        with tm.connect(f"{_partial[0].address},{_partial[1].address}") as two:
            for call in (lambda: two.tensors(CKPT), lambda: two.checkpoint(CKPT),
                         lambda: two.read(CKPT, "lm_head.weight")):
                with self.assertRaises(tm.Error) as e:
                    call()
                self.assertEqual(e.exception.code, "UNAVAILABLE")
                self.assertIn(f"files no endpoint in the list ({_partial[0].address}, "
                              f"{_partial[1].address}) holds: {SHARDS[2]}", e.exception.message)
                self.assertIn("is a server missing from --server, or not ready?",
                              e.exception.message)

    def test_server_info_is_the_first_endpoints(self) -> None:
        self.assertEqual(self.routed.server_info()["version"],
                         self.single.server_info()["version"])

    def test_a_diff_of_a_split_checkpoint_names_who_holds_what(self) -> None:
        with self.assertRaises(tm.Error) as e:
            list(self.routed.diff(CKPT, CKPT))
        self.assertEqual(e.exception.code, "FAILED_PRECONDITION")
        self.assertIn("runs on one endpoint holding both whole", e.exception.message)
        self.assertIn(f"{_partial[2].address} ({SHARDS[2]})", e.exception.message)


class FailureTest(unittest.TestCase):
    def test_a_killed_server_is_named_and_the_others_still_serve(self) -> None:
        roots = Roots()
        servers = partial_servers(roots)
        try:
            addresses = [s.address for s in servers]
            client = tm.connect(",".join(addresses))
            client.checkpoint(CKPT)  # placed with all three
            # It held shard 3 (model.norm and lm_head), and crashes.
            servers[2].kill()
            with self.assertRaises(tm.Error) as e:
                client.read(CKPT, "lm_head.weight")
            self.assertEqual(e.exception.code, "UNAVAILABLE")
            self.assertTrue(e.exception.message.startswith(
                "tensor 'lm_head.weight' of 'm': not served by any reachable endpoint; "
                f"unreachable: {addresses[2]} ("), e.exception.message)
            # Placed again, without it: the message names the file nobody serves.
            with self.assertRaises(tm.Error) as e:
                client.read(CKPT, "lm_head.weight")
            self.assertEqual(e.exception.code, "UNAVAILABLE")
            self.assertIn(addresses[2], e.exception.message)
            self.assertIn(SHARDS[2], e.exception.message)
            # What the others hold is still served.
            self.assertEqual(client.read(CKPT, "model.embed_tokens.weight").shape, (16, 8))
            self.assertTrue(client.scalars(CKPT, "model.layers.0.self_attn.q_proj.weight", [5]))
            # A listing never drops tensors silently.
            with self.assertRaises(tm.Error) as e:
                client.tensors(CKPT)
            self.assertEqual(e.exception.code, "UNAVAILABLE")
            self.assertIn(f"files no reachable endpoint holds: {SHARDS[2]}", e.exception.message)
            with self.assertRaises(tm.Error) as e:
                client.checkpoint(CKPT)
            self.assertEqual(e.exception.code, "UNAVAILABLE")
            self.assertIn(addresses[2], e.exception.message)
            with self.assertRaises(tm.Error) as e:
                client.checkpoints()
            self.assertEqual(e.exception.code, "UNAVAILABLE")
            self.assertIn(addresses[2], e.exception.message)
            client.close()
        finally:
            for s in servers:
                s.stop()
            roots.cleanup()

    def test_a_killed_replica_is_not_needed_and_replicas_share_the_calls(self) -> None:
        roots = Roots()
        a, b = LiveServer(TENSORMORPHD, roots.whole), LiveServer(TENSORMORPHD, roots.whole)
        try:
            client = tm.connect(f"{a.address},{b.address}")
            client.checkpoint(CKPT)

            def calls(s: LiveServer) -> int:
                with tm.connect(s.address) as one:
                    return int(one.server_info()["counters"]["calls"])

            a0, b0 = calls(a), calls(b)
            for _ in range(10):
                client.read(CKPT, "model.norm.weight")
            # Round-robin: five each (server_info counts itself once).
            self.assertEqual(calls(a) - a0 - 1, 5)
            self.assertEqual(calls(b) - b0 - 1, 5)
            b.kill()
            for _ in range(4):
                self.assertEqual(client.read(CKPT, "lm_head.weight").shape, (16, 64))
                self.assertTrue(client.tensors(CKPT))
            client.close()
        finally:
            a.stop()
            b.stop()
            roots.cleanup()

    def test_a_merge_that_would_drop_a_tensor_fails_naming_it(self) -> None:
        # fp8_block_sharded keeps down_proj's FP8 weight in shard 1 and its
        # weight_scale_inv in shard 2: on two servers, neither builds down_proj.
        src = FIXTURES / "safetensors" / "fp8_block_sharded"
        shards = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
        tmp = tempfile.TemporaryDirectory(prefix="tm-py-router-")
        servers = []
        try:
            for i, shard in enumerate(shards):
                d = Path(tmp.name) / str(i) / "f"
                d.mkdir(parents=True)
                for name in ("config.json", "model.safetensors.index.json", shard):
                    shutil.copyfile(src / name, d / name)
                servers.append(LiveServer(TENSORMORPHD, str(d.parent), ["--partial-shards"]))
            client = tm.connect(",".join(s.address for s in servers))
            named = f"model.layers.0.mlp.down_proj.weight (on {servers[0].address})"
            for call in (lambda: client.tensors("f"), lambda: client.checkpoint("f")):
                with self.assertRaises(tm.Error) as e:
                    call()
                self.assertEqual(e.exception.code, "FAILED_PRECONDITION")
                self.assertIn(named, e.exception.message)
            # The tensors one endpoint builds read as usual, the stored parts too.
            client.read("f", "model.layers.0.self_attn.o_proj.weight")
            client.read("f", "model.layers.0.mlp.down_proj.weight", part=True, raw=True)
            # Read as a tensor, the FP8 weight without its scale is refused,
            # never its unscaled part of that name (~300x the values).
            w = "model.layers.0.mlp.down_proj.weight"
            for call in (lambda: client.read("f", w), lambda: client.stats("f", w),
                         lambda: client.scalars("f", w, [0])):
                with self.assertRaises(tm.Error) as e:
                    call()
                self.assertEqual(e.exception.code, "FAILED_PRECONDITION")
                self.assertIn(f"tensor '{w}' of 'f': no endpoint builds it", e.exception.message)
            client.close()
            # One partial server alone: NOT_FOUND naming the scale's shard.
            with tm.connect(servers[0].address) as one:
                with self.assertRaises(tm.Error) as e:
                    one.read("f", w)
                self.assertEqual(e.exception.code, "NOT_FOUND")
                self.assertIn(f"{shards[1]}', which this server does not hold",
                              e.exception.message)
        finally:
            for s in servers:
                s.stop()
            tmp.cleanup()


class FakeResolver:
    """socket.getaddrinfo for one name, answering 127.0.0.1 at the ports of
    `answer` (whatever port was asked), or failing as an unknown name with
    None; the test changes `answer` as servers come and go."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.answer: Optional[List[int]] = None
        self.asked = 0
        self._lock = threading.Lock()

    def __call__(self, host: str, port: str, *args: Any, **kwargs: Any) -> List[Any]:
        with self._lock:
            assert host == self.name, host
            self.asked += 1
            if self.answer is None:
                raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
            return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "",
                     ("127.0.0.1", p)) for p in self.answer]


class TargetsTest(unittest.TestCase):
    def test_a_dns_name_resolves_to_its_addresses(self) -> None:
        client = tm.connect(f"dns:///localhost:{_whole.port}")
        self.assertIsInstance(client, tm.RoutedClient)
        self.assertIn(f"127.0.0.1:{_whole.port}", client.endpoints)
        self.assertEqual(client.checkpoint(CKPT)["files"], self.whole_files())
        self.assertEqual(client.read(CKPT, "lm_head.weight").shape, (16, 64))
        client.close()

    def test_a_name_is_resolved_again_after_the_ttl(self) -> None:
        # A long-lived client follows a rollout: the name resolves to B once
        # A is gone, and the same client reaches B after the placement TTL;
        # a resolution that fails keeps the endpoints it had; with every
        # endpoint gone too, the failed resolution is named.
        resolver = FakeResolver("pods")
        a = LiveServer(TENSORMORPHD, _roots.whole)
        b = None
        try:
            resolver.answer = [a.port]
            client = tm.RoutedClient(tm.resolve_endpoints("dns:///pods:7431", resolver),
                                     targets="dns:///pods:7431", ttl=0.1, resolver=resolver)
            self.assertEqual(client.endpoints, [a.address])
            self.assertEqual(client.read(CKPT, "lm_head.weight").shape, (16, 64))

            a.stop()
            b = LiveServer(TENSORMORPHD, _roots.whole)
            resolver.answer = [b.port]
            time.sleep(0.15)
            self.assertEqual(client.read(CKPT, "lm_head.weight").shape, (16, 64))
            self.assertEqual(client.endpoints, [b.address])

            resolver.answer = None  # "Name or service not known"
            time.sleep(0.15)
            self.assertEqual(client.read(CKPT, "lm_head.weight").shape, (16, 64))
            self.assertEqual(client.endpoints, [b.address])
            self.assertGreaterEqual(resolver.asked, 3)

            b.stop()
            time.sleep(0.15)
            with self.assertRaises(tm.Error) as e:
                client.checkpoint(CKPT)
            self.assertEqual(e.exception.code, "UNAVAILABLE")
            self.assertIn(f"unreachable: {b.address}", e.exception.message)
            self.assertIn("resolving the server list again failed: server list entry 1 "
                          "'dns:///pods:7431' does not resolve: Name or service not known",
                          e.exception.message)
            client.close()
        finally:
            a.stop()
            if b is not None:
                b.stop()

    def test_a_dns_name_of_one_address_is_routed(self) -> None:
        # It may resolve to other pods later; a plain list of one is not.
        with tm.connect(f"dns:///127.0.0.1:{_whole.port}") as c:
            self.assertIsInstance(c, tm.RoutedClient)
        with tm.connect(f"{_whole.address}, {_whole.address}") as c:
            self.assertIsInstance(c, tm.Client)

    def whole_files(self) -> List[Any]:
        with tm.connect(_whole.address) as c:
            return c.checkpoint(CKPT)["files"]

    def test_a_bad_list_raises_naming_the_entry(self) -> None:
        for target, code, text in [
                ("127.0.0.1:1,,127.0.0.1:2", "INVALID_ARGUMENT", "entry 2 is empty"),
                ("127.0.0.1:1,b", "INVALID_ARGUMENT", "entry 2 'b' has no port"),
                ("127.0.0.1", "INVALID_ARGUMENT", "entry 1 '127.0.0.1' has no port"),
                ("127.0.0.1:1, host", "INVALID_ARGUMENT", "entry 2 'host' has no port"),
                ("", "INVALID_ARGUMENT", "empty server address"),
                ("127.0.0.1:1,dns://8.8.8.8/x:1", "INVALID_ARGUMENT", "entry 2 'dns://8.8.8.8/x:1'"),
                ("dns:///no-such-host.invalid:7431", "UNAVAILABLE",
                 "entry 1 'dns:///no-such-host.invalid:7431' does not resolve")]:
            with self.assertRaises(tm.Error, msg=target) as e:
                tm.connect(target)
            self.assertEqual(e.exception.code, code, target)
            self.assertIn(text, e.exception.message, target)
        self.assertEqual(tm.resolve_endpoints("127.0.0.1:1,127.0.0.1:2,127.0.0.1:1"),
                         ["127.0.0.1:1", "127.0.0.1:2"])
        # Spaces around entries, as a shell user writes a list, are trimmed.
        self.assertEqual(tm.resolve_endpoints(" 127.0.0.1:1, 127.0.0.1:2 "),
                         ["127.0.0.1:1", "127.0.0.1:2"])

    def test_fresh_clients_spread_over_replicas(self) -> None:
        # Each new client (a new process, as often) starts its round-robin
        # at a random replica, not always the first.
        second = LiveServer(TENSORMORPHD, _roots.whole)
        try:
            def calls(address: str) -> int:
                with tm.connect(address) as one:
                    return int(one.server_info()["counters"]["streams_started"])

            a0, b0 = calls(_whole.address), calls(second.address)
            runs = 20
            for _ in range(runs):
                with tm.connect(f"{_whole.address},{second.address}") as c:
                    c.read(CKPT, "model.norm.weight")
            da, db = calls(_whole.address) - a0, calls(second.address) - b0
            self.assertEqual(da + db, runs)
            self.assertGreaterEqual(da, 1)
            self.assertGreaterEqual(db, 1)
        finally:
            second.stop()


if __name__ == "__main__":
    unittest.main()
