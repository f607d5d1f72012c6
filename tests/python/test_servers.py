"""Several equivalent tensormorphd behind one Python client
(tm.connect("a,b")): what a standard gRPC client does with them, as the C++
client (client/client.h, tests/client/three_servers_test.cc): calls take
turns, a server that is down is failed over once, failures name the server,
dns:/// names are resolved by gRPC, and a bad list is refused naming the
entry.

Run by ctest (tests/CMakeLists.txt, the python_client entry) with
PYTHONPATH=<build>/python and:
  TENSORMORPH_TENSORMORPHD  the server
  TENSORMORPH_FIXTURES_DIR  the fixtures (safetensors/fp8_block_sharded)
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import unittest
from pathlib import Path
from typing import List

import tensormorph as tm
from live_server import NATIVE_BUILT, READ_PATHS, LiveServer

TENSORMORPHD = os.environ["TENSORMORPH_TENSORMORPHD"]
FIXTURES = Path(os.environ.get("TENSORMORPH_FIXTURES_DIR",
                               Path(__file__).resolve().parents[2].parent / "shared" / "fixtures"))
CKPT = "fp8"
# down_proj's FP8 weight is in shard 1, its weight_scale_inv in shard 2.
STRADDLING = "model.layers.0.mlp.down_proj.weight"

_tmp: tempfile.TemporaryDirectory  # type: ignore[type-arg]
_root: str


def setUpModule() -> None:
    global _tmp, _root
    src = FIXTURES / "safetensors" / "fp8_block_sharded"
    if not src.is_dir():
        raise unittest.SkipTest(f"no fixtures at {FIXTURES}")
    _tmp = tempfile.TemporaryDirectory(prefix="tm-py-servers-")
    _root = _tmp.name
    shutil.copytree(src, Path(_root) / CKPT)


def tearDownModule() -> None:
    _tmp.cleanup()


def calls(s: LiveServer) -> int:
    with tm.connect(s.address) as one:
        return int(one.server_info()["counters"]["calls"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServersTest(unittest.TestCase):
    def setUp(self) -> None:
        self.servers: List[LiveServer] = [LiveServer(TENSORMORPHD, _root) for _ in range(2)]
        self.target = ",".join(s.address for s in self.servers)

    def tearDown(self) -> None:
        for s in self.servers:
            s.stop()

    def test_a_list_is_one_client_whose_calls_take_turns(self) -> None:
        a, b = self.servers
        with tm.connect(self.target) as c:
            self.assertIsInstance(c, tm.Client)
            a0, b0 = calls(a), calls(b)
            for _ in range(10):
                c.info(CKPT, STRADDLING)
            # Five each (server_info counts itself once).
            self.assertEqual(calls(a) - a0 - 1, 5)
            self.assertEqual(calls(b) - b0 - 1, 5)

    def test_reads_are_the_single_servers_bit_for_bit(self) -> None:
        for native in READ_PATHS:
            with tm.connect(self.target, native=native) as c, \
                    tm.connect(self.servers[0].address, native=False) as one:
                for _ in range(2):  # once on each server
                    # Scaled values, and the FP8 codes of its stored part.
                    for raw in (False, True):
                        want = one.read(CKPT, STRADDLING, part=raw, raw=raw)
                        got = c.read(CKPT, STRADDLING, part=raw, raw=raw)
                        self.assertEqual((got.dtype, got.shape), (want.dtype, want.shape))
                        self.assertEqual(got.tobytes(), want.tobytes())

    def test_a_server_down_is_failed_over_for_calls_and_streams(self) -> None:
        self.servers[1].kill()
        for native in READ_PATHS:
            with tm.connect(self.target, native=native) as c:
                for _ in range(4):  # twice starting at the dead one
                    self.assertEqual(len(c.checkpoint(CKPT)["files"]), 2)
                    self.assertTrue(c.tensors(CKPT))
                    self.assertEqual(c.read(CKPT, STRADDLING).dtype.name, "float32")

    def test_every_server_down_is_unavailable_naming_each(self) -> None:
        ports = [free_port(), free_port()]
        target = ",".join(f"127.0.0.1:{p}" for p in ports)
        with tm.connect(target, native=NATIVE_BUILT) as c, \
                tm.connect(target, native=False) as g:
            for call in (lambda: c.checkpoint(CKPT), lambda: c.tensors(CKPT),
                         lambda: c.read(CKPT, STRADDLING), lambda: g.read(CKPT, STRADDLING)):
                with self.assertRaises(tm.Error) as e:
                    call()
                self.assertEqual(e.exception.reason, "UNAVAILABLE")
                # The message names each server it tried.
                for p in ports:
                    self.assertIn(f"127.0.0.1:{p}", e.exception.message)

    def test_a_dns_name_reaches_the_server(self) -> None:
        # localhost resolves to ::1 too, where nothing listens: round_robin
        # keeps to the address that answers.
        for native in READ_PATHS:
            with tm.connect(f"dns:///localhost:{self.servers[0].port}", native=native) as c:
                for _ in range(3):
                    self.assertEqual(c.read(CKPT, STRADDLING).shape, (200, 300))
        with tm.connect("dns:///no-such-host.invalid:7431") as c:
            with self.assertRaises(tm.Error) as e:
                c.server_info()
            self.assertEqual(e.exception.reason, "UNAVAILABLE")
            self.assertIn("dns:///no-such-host.invalid:7431", e.exception.message)

    def test_a_bad_list_raises_naming_the_entry(self) -> None:
        # The reason, and the entry the message names: its place, its text.
        for target, named in [
                ("127.0.0.1:1,,127.0.0.1:2", ["entry 2"]),
                ("127.0.0.1:1,b", ["entry 2", "'b'"]),
                ("127.0.0.1", ["entry 1", "'127.0.0.1'"]),
                ("127.0.0.1:1, host", ["entry 2", "'host'"]),
                ("", []),
                ("127.0.0.1:1,dns://8.8.8.8/x:1", ["entry 2", "'dns://8.8.8.8/x:1'"])]:
            with self.assertRaises(tm.Error, msg=target) as e:
                tm.connect(target)
            self.assertEqual(e.exception.reason, "REQUEST_INVALID", target)
            for value in named:
                self.assertIn(value, e.exception.message, target)
        self.assertEqual(tm.resolve_endpoints("127.0.0.1:1,127.0.0.1:2,127.0.0.1:1"),
                         ["127.0.0.1:1", "127.0.0.1:2"])
        # Spaces around entries, as a shell user writes a list, are trimmed.
        self.assertEqual(tm.resolve_endpoints(" 127.0.0.1:1, 127.0.0.1:2 "),
                         ["127.0.0.1:1", "127.0.0.1:2"])

    def test_fresh_clients_spread_over_the_servers(self) -> None:
        # Each new client (a new process, as often) starts its turns at a
        # random server, not always the first.
        a, b = self.servers
        a0, b0 = calls(a), calls(b)
        runs = 20
        for _ in range(runs):
            with tm.connect(self.target) as c:
                c.checkpoint(CKPT)
        da, db = calls(a) - a0 - 1, calls(b) - b0 - 1
        self.assertEqual(da + db, runs)
        self.assertGreaterEqual(da, 1)
        self.assertGreaterEqual(db, 1)


if __name__ == "__main__":
    unittest.main()
