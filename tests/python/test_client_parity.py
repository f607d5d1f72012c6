"""The Python client at parity with C++ and pleasant to a numpy user (issue
33, point 5): deadlines, picklable errors, numpy indexing, check/arch/info
with progress, the CLI's heatmap mode names, py.typed, and a local server
that dies with its parent.

Run by ctest (tests/CMakeLists.txt, python_client) with the environment
test_client.py documents.
"""

from __future__ import annotations

import concurrent.futures
import json
import multiprocessing
import os
import pickle
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import warnings
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np

import tensormorph as tm
from live_server import NATIVE_BUILT, READ_PATHS, LiveServer

TENSORMORPHD = os.environ["TENSORMORPH_TENSORMORPHD"]
CLI = os.environ["TENSORMORPH_CLI"]
MAKE_DEMO = os.environ["TENSORMORPH_MAKE_DEMO"]
SOURCE_DIR = Path(os.environ.get("TENSORMORPH_SOURCE_DIR",
                                 Path(__file__).resolve().parents[2]))

Q8 = "model-q8_0.gguf"
Q8_TENSOR = "blk.0.attn_q.weight"
F32_FILE = "values.safetensors"
F32_TENSOR = "w"
F32_SHAPE = (7, 9, 6)
F32_2D_TENSOR = "m"
F32_2D_SHAPE = (5, 11)
BIG_FILE = "big.safetensors"
BIG_TENSOR = "big"
BIG_SHAPE = (1024, 3000)  # 11.7 MiB: a dozen chunks of 1 MiB

_tmp: tempfile.TemporaryDirectory
ROOT: str
_server: LiveServer
ADDRESS: str
OFFSETS: Dict[str, int] = {}


def write_f32_safetensors(path: str, tensors: Dict[str, np.ndarray]) -> Dict[str, int]:
    """A safetensors file of F32 tensors; returns each tensor's absolute
    byte offset, for a memmap of the same bytes."""
    header: Dict[str, Any] = {}
    pos = 0
    for name, a in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [pos, pos + a.nbytes]}
        pos += a.nbytes
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for a in tensors.values():
            f.write(a.astype("<f4").tobytes())
    return {name: 8 + len(text) + header[name]["data_offsets"][0] for name in tensors}


def setUpModule() -> None:
    global _tmp, ROOT, _server, ADDRESS, OFFSETS
    _tmp = tempfile.TemporaryDirectory(prefix="tm-py-parity-")
    ROOT = _tmp.name
    subprocess.run([MAKE_DEMO, ROOT], check=True, stdout=subprocess.DEVNULL)
    rng = np.random.default_rng(33)
    OFFSETS = write_f32_safetensors(os.path.join(ROOT, F32_FILE), {
        F32_TENSOR: rng.standard_normal(F32_SHAPE, dtype=np.float32),
        F32_2D_TENSOR: rng.standard_normal(F32_2D_SHAPE, dtype=np.float32)})
    OFFSETS.update(write_f32_safetensors(os.path.join(ROOT, BIG_FILE), {
        BIG_TENSOR: rng.standard_normal(BIG_SHAPE, dtype=np.float32)}))
    _server = LiveServer(TENSORMORPHD, ROOT)
    ADDRESS = _server.address


def tearDownModule() -> None:
    _server.stop()
    _tmp.cleanup()


def cli_json(*args: str) -> List[Any]:
    out = subprocess.run([CLI, "--server", ADDRESS, "--json", *args], check=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True).stdout
    return [json.loads(l) for l in out.splitlines() if l.strip()]


def read_missing_tensor(address: str) -> None:
    """A call that fails inside a worker process (NOT_FOUND)."""
    with tm.connect(address) as c:
        c.read(Q8, "blk.0.no_such.weight")


class DeadlineTest(unittest.TestCase):
    """A call never waits past its deadline, whatever the server does."""

    def setUp(self) -> None:
        self.server = LiveServer(TENSORMORPHD, ROOT)

    def tearDown(self) -> None:
        self.server.resume()
        self.server.stop()

    def assert_fails_within(self, call: Any, codes: Tuple[str, ...], seconds: float) -> None:
        start = time.monotonic()
        with self.assertRaises(tm.Error) as cm:
            call()
        self.assertLess(time.monotonic() - start, seconds)
        self.assertIn(cm.exception.code, codes)

    def test_the_default_is_the_cpp_clients(self) -> None:
        header = (SOURCE_DIR / "client" / "client.h").read_text()
        m = re.search(r"kDefaultUnaryTimeout = absl::Seconds\((\d+)\)", header)
        self.assertIsNotNone(m)
        self.assertEqual(tm.DEFAULT_UNARY_TIMEOUT, float(m.group(1)))

    def test_a_call_to_a_stopped_server_fails_within_its_deadline(self) -> None:
        c = tm.connect(self.server.address, native=NATIVE_BUILT)
        g = tm.connect(self.server.address, native=False)
        self.assertEqual(len(c.tensors(Q8)), 21)
        self.assertEqual(c.read(Q8, Q8_TENSOR).shape, g.read(Q8, Q8_TENSOR).shape)
        self.server.kill()
        for call in (lambda: c.server_info(timeout=2), lambda: c.tensors(Q8, timeout=2),
                     lambda: c.read(Q8, Q8_TENSOR, timeout=2),
                     lambda: g.read(Q8, Q8_TENSOR, timeout=2)):
            self.assert_fails_within(call, ("DEADLINE_EXCEEDED", "UNAVAILABLE"), 10)
        c.close()
        g.close()

    def test_a_call_to_a_paused_server_ends_at_its_deadline(self) -> None:
        # SIGSTOP: the kernel still accepts the connection, nothing answers.
        c = tm.connect(self.server.address, native=NATIVE_BUILT)
        g = tm.connect(self.server.address, native=False)
        self.server.pause()
        for call in (lambda: c.server_info(timeout=2), lambda: c.read(Q8, Q8_TENSOR, timeout=2),
                     lambda: g.read(Q8, Q8_TENSOR, timeout=2),
                     lambda: list(c.diff(Q8, "source", timeout=2))):
            self.assert_fails_within(call, ("DEADLINE_EXCEEDED",), 10)
        c.close()
        g.close()

    def test_connects_timeout_is_every_calls_deadline(self) -> None:
        fresh = LiveServer(TENSORMORPHD, ROOT)
        try:
            c = tm.connect(fresh.address, timeout=1.5, native=NATIVE_BUILT)
            g = tm.connect(fresh.address, timeout=1.5, native=False)
            fresh.pause()
            self.assert_fails_within(lambda: c.checkpoint(Q8), ("DEADLINE_EXCEEDED",), 10)
            self.assert_fails_within(lambda: c.read(Q8, Q8_TENSOR), ("DEADLINE_EXCEEDED",), 10)
            self.assert_fails_within(lambda: g.read(Q8, Q8_TENSOR), ("DEADLINE_EXCEEDED",), 10)
            c.close()
            g.close()
        finally:
            fresh.resume()
            fresh.stop()

    def test_ctrl_c_ends_a_read_that_waits_on_a_paused_server(self) -> None:
        # Natively the waiting thread checks for signals every 50 ms and
        # cancels the call; grpcio's streams are taken by the thread that
        # iterates them (channel_options), whose poll yields to signals.
        self.server.pause()
        for native in READ_PATHS:
            with self.subTest(native=native):
                self.assert_ctrl_c_ends_a_read(native)

    def assert_ctrl_c_ends_a_read(self, native: bool) -> None:
        script = ("import tensormorph as tm, sys\n"
                  f"c = tm.connect({self.server.address!r}, native={native})\n"
                  "print('reading', flush=True)\n"
                  "try:\n"
                  f"    c.read({Q8!r}, {Q8_TENSOR!r})\n"
                  "except KeyboardInterrupt:\n"
                  "    print('interrupted', flush=True)\n")
        p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                             env=dict(os.environ))
        try:
            assert p.stdout is not None
            self.assertEqual(p.stdout.readline().strip(), "reading")
            time.sleep(1)
            start = time.monotonic()
            p.send_signal(signal.SIGINT)
            out, _ = p.communicate(timeout=10)
            self.assertLess(time.monotonic() - start, 5)
            self.assertEqual(out.strip(), "interrupted")
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()

    def test_local_takes_a_timeout_and_a_path(self) -> None:
        with tm.local(Path(ROOT), timeout=30) as c:
            self.assertEqual(c.read(Path(ROOT) / Q8, Q8_TENSOR, timeout=5).shape, (256, 256))

    def test_a_timeout_that_is_not_positive_is_refused(self) -> None:
        with self.assertRaises(ValueError):
            tm.connect(self.server.address, timeout=0)
        with tm.connect(self.server.address) as c:
            with self.assertRaises(ValueError):
                c.server_info(timeout=-1)


def field(number: int, value: bytes) -> bytes:
    """A length-delimited protobuf field (values here are < 128 bytes)."""
    assert len(value) < 128
    return bytes([number << 3 | 2, len(value)]) + value


def status_with_error_info(reason: str, metadata: Dict[str, str]) -> bytes:
    """A serialized google.rpc.Status holding an ErrorInfo, as a server puts
    it in the grpc-status-details-bin trailer."""
    info = field(1, reason.encode()) + field(2, b"tensormorph.dev")
    for k, v in metadata.items():
        info += field(3, field(1, k.encode()) + field(2, v.encode()))
    any_msg = field(1, b"type.googleapis.com/google.rpc.ErrorInfo") + field(2, info)
    return bytes([0x08, 5]) + field(2, b"not found") + field(3, any_msg)


class ErrorDetailsTest(unittest.TestCase):
    def test_an_error_info_in_the_status_becomes_details_and_reason(self) -> None:
        import grpc
        blob = status_with_error_info("TENSOR_NOT_FOUND", {"tensor": "w"})

        def handler(request: bytes, context: Any) -> bytes:
            context.set_trailing_metadata([("grpc-status-details-bin", blob)])
            context.abort(grpc.StatusCode.NOT_FOUND, "not found")

        server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=1))
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
            "tensormorph.v1.Tensormorph", {"GetServerInfo": grpc.unary_unary_rpc_method_handler(
                handler)})])
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        try:
            with tm.connect(f"127.0.0.1:{port}") as c:
                with self.assertRaises(tm.Error) as cm:
                    c.server_info(timeout=30)
        finally:
            server.stop(None)
        e = cm.exception
        self.assertEqual((e.code, e.reason), ("NOT_FOUND", "TENSOR_NOT_FOUND"))
        self.assertEqual(e.details, {"reason": "TENSOR_NOT_FOUND", "domain": "tensormorph.dev",
                                     "metadata": {"tensor": "w"}})
        self.assertEqual(pickle.loads(pickle.dumps(e)).reason, "TENSOR_NOT_FOUND")

    def test_a_status_that_does_not_parse_gives_no_details(self) -> None:
        from tensormorph._client import _status_details
        self.assertEqual(_status_details(b"\x1a\x7f"), {})
        self.assertEqual(_status_details(b""), {})


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def issue(d: Path, name: str, extensions: str) -> None:
    """d/name.pem and d/name.key, signed by d/ca.pem."""
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", str(d / f"{name}.key"), "-out", str(d / f"{name}.csr"),
            "-subj", f"/CN={name}")
    (d / f"{name}.ext").write_text(extensions + "\n")
    openssl("x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / "ca.pem"),
            "-CAkey", str(d / "ca.key"), "-CAcreateserial", "-days", "1",
            "-out", str(d / f"{name}.pem"), "-extfile", str(d / f"{name}.ext"))


class MutualTlsTest(unittest.TestCase):
    def test_a_client_certificate_is_presented_and_required(self) -> None:
        with tempfile.TemporaryDirectory(prefix="tm-mtls-") as tmp:
            d = Path(tmp)
            openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-keyout", str(d / "ca.key"), "-out", str(d / "ca.pem"),
                    "-subj", "/CN=tensormorph test CA", "-days", "1")
            issue(d, "server", "subjectAltName=DNS:localhost,IP:127.0.0.1")
            issue(d, "client", "extendedKeyUsage=clientAuth")
            server = LiveServer(TENSORMORPHD, ROOT, [
                "--tls-cert", str(d / "server.pem"), "--tls-key", str(d / "server.key"),
                "--tls-client-ca", str(d / "ca.pem")])
            try:
                for native in READ_PATHS:
                    with tm.connect(server.address, tls_ca=d / "ca.pem",
                                    tls_cert=d / "client.pem", tls_key=d / "client.key",
                                    native=native) as c:
                        self.assertEqual(c.info(Q8, Q8_TENSOR).dtype, "Q8_0")
                        self.assertEqual(c.read(Q8, Q8_TENSOR).shape, (256, 256))
                    with tm.connect(server.address, tls_ca=d / "ca.pem", native=native) as c:
                        with self.assertRaises(tm.Error) as cm:
                            c.server_info(timeout=10)
                        self.assertEqual(cm.exception.code, "UNAVAILABLE")
                        with self.assertRaises(tm.Error) as cm:
                            c.read(Q8, Q8_TENSOR, timeout=10)
                        self.assertEqual(cm.exception.reason, "UNAVAILABLE")
            finally:
                server.stop()
            with self.assertRaises(ValueError):
                tm.connect(server.address, tls_cert=d / "client.pem")


class TokenTest(unittest.TestCase):
    def test_reads_send_the_token_on_both_paths(self) -> None:
        with tempfile.TemporaryDirectory(prefix="tm-token-") as tmp:
            tokens = Path(tmp) / "tokens"
            tokens.write_text("s3cret\n")
            server = LiveServer(TENSORMORPHD, ROOT, ["--token-file", str(tokens)])
            try:
                for native in READ_PATHS:
                    with self.subTest(native=native):
                        with tm.connect(server.address, token="s3cret", native=native) as c:
                            self.assertEqual(c.read(Q8, Q8_TENSOR).shape, (256, 256))
                        with tm.connect(server.address, token="wrong", native=native) as c:
                            with self.assertRaises(tm.Error) as cm:
                                c.read(Q8, Q8_TENSOR)
                            self.assertEqual(cm.exception.reason, "UNAUTHENTICATED")
            finally:
                server.stop()


class PicklableErrorTest(unittest.TestCase):
    def test_an_error_survives_pickle_with_code_message_and_details(self) -> None:
        e = tm.Error("NOT_FOUND", "tensor 'x' not found", {"reason": "TENSOR_NOT_FOUND"})
        back = pickle.loads(pickle.dumps(e))
        self.assertIs(type(back), tm.Error)
        self.assertEqual((back.code, back.message, back.details),
                         ("NOT_FOUND", "tensor 'x' not found", {"reason": "TENSOR_NOT_FOUND"}))
        self.assertEqual(str(back), str(e))

    def test_a_process_pool_workers_error_arrives_as_that_error(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
            future = pool.submit(read_missing_tensor, ADDRESS)
            with self.assertRaises(tm.Error) as cm:
                future.result(timeout=120)
        self.assertEqual(cm.exception.reason, "TENSOR_NOT_FOUND")
        self.assertEqual(cm.exception.metadata["tensor"], "blk.0.no_such.weight")

    def test_a_multiprocessing_pool_does_not_hang(self) -> None:
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            result = pool.apply_async(read_missing_tensor, (ADDRESS,))
            with self.assertRaises(tm.Error) as cm:
                result.get(timeout=120)
        self.assertEqual(cm.exception.code, "NOT_FOUND")


def random_index(rng: random.Random, shape: Tuple[int, ...]) -> Any:
    """A random basic index of numpy's: ints (negative too), slices of any
    step (bounds past the ends too), at most one Ellipsis, some None."""
    items: List[Any] = []
    dims = rng.randint(0, len(shape))
    use_ellipsis = rng.random() < 0.3
    ellipsis_at = rng.randint(0, dims) if use_ellipsis else -1
    for d in range(dims):
        if d == ellipsis_at:
            items.append(Ellipsis)
        if rng.random() < 0.1:
            items.append(None)
        n = shape[d] if not use_ellipsis or d < ellipsis_at else shape[len(shape) - dims + d]
        if rng.random() < 0.3:
            items.append(rng.randint(-n, n - 1))
        else:
            def bound() -> Any:
                return None if rng.random() < 0.3 else rng.randint(-n - 2, n + 2)
            step = rng.choice([None, 1, 2, 3, -1, -2, -3])
            items.append(slice(bound(), bound(), step))
    if ellipsis_at == dims:
        items.append(Ellipsis)
    if len(items) == 1 and rng.random() < 0.5:
        return items[0]
    return tuple(items)


class NumpyIndexingTest(unittest.TestCase):
    NATIVE = NATIVE_BUILT

    @classmethod
    def setUpClass(cls) -> None:
        cls.c = tm.connect(ADDRESS, native=cls.NATIVE)
        path = os.path.join(ROOT, F32_FILE)
        cls.w = np.memmap(path, dtype="<f4", mode="r", offset=OFFSETS[F32_TENSOR],
                          shape=F32_SHAPE)
        cls.m = np.memmap(path, dtype="<f4", mode="r", offset=OFFSETS[F32_2D_TENSOR],
                          shape=F32_2D_SHAPE)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.c.close()

    def test_a_handle_has_numpys_shape_dtype_len_and_array(self) -> None:
        t = self.c.tensor(Path(F32_FILE), F32_TENSOR)
        self.assertEqual((t.shape, t.ndim, t.dtype, len(t)),
                         (F32_SHAPE, 3, np.dtype(np.float32), F32_SHAPE[0]))
        self.assertEqual(t.scheme, "F32")
        self.assertTrue(np.array_equal(np.asarray(t), self.w))
        self.assertEqual(np.asarray(t, dtype=np.float64).dtype, np.float64)

    def test_500_random_index_expressions_equal_numpys_on_a_memmap(self) -> None:
        rng = random.Random(33)
        handles = [(self.c.tensor(F32_FILE, F32_TENSOR), self.w),
                   (self.c.tensor(F32_FILE, F32_2D_TENSOR), self.m)]
        for i in range(500):
            t, want_from = handles[i % 2]
            key = random_index(rng, want_from.shape)
            with self.subTest(i=i, key=key):
                want = want_from[key]
                got = t[key]
                self.assertEqual(np.shape(got), np.shape(want))
                self.assertTrue(np.array_equal(got, want))
                self.assertEqual(np.asarray(got).dtype, np.float32)

    def test_an_int_out_of_range_is_numpys_index_error(self) -> None:
        t = self.c.tensor(F32_FILE, F32_TENSOR)
        for key in (7, -8, (0, 9), (0, 0, -7), (Ellipsis, 6)):
            with self.subTest(key=key):
                with self.assertRaises(IndexError):
                    self.w[key]
                with self.assertRaises(IndexError):
                    t[key]
        with self.assertRaises(IndexError):
            t[0, 0, 0, 0]  # too many indices
        with self.assertRaises(IndexError):
            t[..., ...]
        with self.assertRaises(IndexError):
            t[1.5]

    def test_advanced_indexing_reads_the_whole_tensor_and_agrees(self) -> None:
        t = self.c.tensor(F32_FILE, F32_TENSOR)
        for key in ([0, 2, -1], (slice(None), [1, 1, 3]), self.w > 0, True):
            with self.subTest(key=str(key)[:40]):
                self.assertTrue(np.array_equal(t[key], self.w[key]))

    def test_a_missing_tensor_is_not_found_when_first_used(self) -> None:
        t = self.c.tensor(F32_FILE, "no_such")
        with self.assertRaises(tm.Error) as cm:
            t.shape
        self.assertEqual(cm.exception.code, "NOT_FOUND")


class NumpyIndexingThroughGrpcioTest(NumpyIndexingTest):
    NATIVE = False


class LargeReadTest(unittest.TestCase):
    """A read of many chunks, whatever its chunk size, slice or thread,
    is numpy's memmap of the file, bit for bit."""

    NATIVE = NATIVE_BUILT

    @classmethod
    def setUpClass(cls) -> None:
        cls.c = tm.connect(ADDRESS, native=cls.NATIVE)
        cls.want = np.memmap(os.path.join(ROOT, BIG_FILE), dtype="<f4", mode="r",
                             offset=OFFSETS[BIG_TENSOR], shape=BIG_SHAPE)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.c.close()

    def assert_same_bits(self, got: np.ndarray, want: np.ndarray) -> None:
        self.assertEqual((got.shape, got.dtype), (want.shape, np.dtype(np.float32)))
        self.assertEqual(got.tobytes(), np.ascontiguousarray(want).tobytes())

    def test_a_whole_read_is_the_memmap(self) -> None:
        whole = self.c.read(BIG_FILE, BIG_TENSOR)
        self.assert_same_bits(whole, self.want)
        self.assert_same_bits(self.c.read(BIG_FILE, BIG_TENSOR, max_chunk_bytes=40_000), self.want)
        raw = self.c.read(BIG_FILE, BIG_TENSOR, raw=True)
        self.assertEqual(raw.tobytes(), np.ascontiguousarray(self.want).tobytes())

    def test_slices_and_indexing_are_the_memmaps(self) -> None:
        t = self.c.tensor(BIG_FILE, BIG_TENSOR)
        for key in (np.s_[3:1000:7, 5:], np.s_[::-3], np.s_[100:900, 2999], np.s_[..., 1:-1:2]):
            with self.subTest(key=key):
                self.assert_same_bits(np.asarray(t[key]), self.want[key])
        self.assert_same_bits(self.c.read(BIG_FILE, BIG_TENSOR, slice="17:1000:3, 10:2900"),
                              self.want[17:1000:3, 10:2900])

    def test_reads_from_several_threads_at_once_are_the_memmap(self) -> None:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            got = list(pool.map(lambda _: self.c.read(BIG_FILE, BIG_TENSOR), range(4)))
        for a in got:
            self.assert_same_bits(a, self.want)


class LargeReadThroughGrpcioTest(LargeReadTest):
    NATIVE = False


class InterruptedReadTest(unittest.TestCase):
    """Ctrl-C in the middle of a large read: KeyboardInterrupt, the call
    cancelled, and the client and server as usable as before."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = tempfile.TemporaryDirectory(prefix="tm-py-interrupt-")
        shape = (8192, 4096)  # 128 MiB: seconds in chunks of 64 KiB
        write_f32_safetensors(os.path.join(cls.tmp.name, "huge.safetensors"),
                              {"huge": np.ones(shape, dtype=np.float32)})
        cls.server = LiveServer(TENSORMORPHD, cls.tmp.name)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.server.stop()
        cls.tmp.cleanup()

    def test_a_signal_50_ms_into_a_read_raises_keyboard_interrupt(self) -> None:
        for native in READ_PATHS:
            with self.subTest(native=native), \
                    tm.connect(self.server.address, native=native) as c:
                self.assertEqual(c.read("huge.safetensors", "huge", slice="0:2").shape,
                                 (2, 4096))
                main = threading.main_thread().ident
                assert main is not None
                timer = threading.Timer(0.05, signal.pthread_kill, (main, signal.SIGINT))
                start = time.monotonic()
                timer.start()
                try:
                    with self.assertRaises(KeyboardInterrupt):
                        c.read("huge.safetensors", "huge", max_chunk_bytes=64 << 10)
                finally:
                    timer.join()
                # The signal's 50 ms, then at most a 50 ms check (native)
                # or grpcio's 200 ms poll: far less than the whole read.
                self.assertLess(time.monotonic() - start, 5)
                a = c.read("huge.safetensors", "huge", slice="8191, 4000:")
                self.assertEqual(a.tolist(), [1.0] * 96)
                self.assertTrue(c.server_info()["version"])


class ForkTest(unittest.TestCase):
    @unittest.skipUnless(NATIVE_BUILT, "the build did not make tensormorph._native")
    def test_a_forked_child_reads_through_grpcio_and_the_parent_reads_on(self) -> None:
        # A child shares the parent's C++ connections' sockets and has none
        # of its gRPC threads: it must neither hang nor disturb the parent.
        script = ("import os, sys, tensormorph as tm\n"
                  "c = tm.connect(sys.argv[1])\n"
                  f"want = c.read({Q8!r}, {Q8_TENSOR!r}).tobytes()\n"
                  "print('parent', c.read_path, flush=True)\n"
                  "pid = os.fork()\n"
                  "if pid == 0:\n"
                  "    for cc in (c, tm.connect(sys.argv[1])):\n"
                  "        try:\n"
                  f"            ok = cc.read({Q8!r}, {Q8_TENSOR!r}, timeout=20).tobytes() == want\n"
                  "            print('child', cc.read_path, ok, flush=True)\n"
                  "        except tm.Error as e:  # grpcio's own limits after a fork\n"
                  "            print('child', cc.read_path, e.code, flush=True)\n"
                  "    os._exit(0)\n"
                  "os.waitpid(pid, 0)\n"
                  f"print('parent', c.read({Q8!r}, {Q8_TENSOR!r}).tobytes() == want, flush=True)\n")
        r = subprocess.run([sys.executable, "-c", script, ADDRESS], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout)
        lines = [l.split() for l in r.stdout.splitlines() if l.startswith(("parent", "child"))]
        self.assertEqual(lines[0], ["parent", "native"])
        self.assertEqual([l[:2] for l in lines[1:3]], [["child", "grpcio"]] * 2, r.stdout)
        for l in lines[1:3]:
            self.assertIn(l[2], ("True", "UNAVAILABLE"), r.stdout)
        self.assertEqual(lines[3], ["parent", "True"])


class ParityCallsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.c = tm.connect(ADDRESS)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.c.close()

    def test_diff_reports_progress_and_yields_what_it_did(self) -> None:
        progress: List[Dict[str, Any]] = []
        events = list(self.c.diff(Q8, "source", progress=progress.append))
        self.assertEqual([e["event"] for e in events], ["tensor"] * 21 + ["summary"])
        self.assertGreaterEqual(len(progress), 1)
        self.assertEqual(progress[0]["tensors_total"], 21)
        self.assertTrue(all(p["tensors_done"] <= p["tensors_total"] for p in progress))

    def test_check_equals_the_clis_with_progress(self) -> None:
        progress: List[Dict[str, Any]] = []
        mine = self.c.check(Q8, progress=progress.append, hashes=True)
        want = cli_json("check", Q8)
        summary = next(e["summary"] for e in want if "summary" in e)
        self.assertEqual(mine["summary"]["tensors_checked"], int(summary["tensorsChecked"]))
        self.assertEqual(mine["summary"]["errors"], int(summary.get("errors", 0)))
        self.assertEqual(len(mine["findings"]), sum(1 for e in want if "finding" in e))
        self.assertEqual(len(mine["hashes"]), mine["summary"]["stored_tensors"])
        self.assertGreaterEqual(len(progress), 1)
        self.assertEqual(progress[-1]["tensors_total"], 21)
        with self.assertRaises(ValueError):
            self.c.check(Q8, fail_level="fatal")

    def test_arch_equals_the_clis(self) -> None:
        mine = self.c.arch(Q8)
        want = cli_json("arch", Q8)[0]
        self.assertEqual(mine["boundaries"], int(want.get("boundaries", 0)))
        self.assertEqual(mine["root"]["params"], int(want["root"]["params"]))
        self.assertEqual([n["name"] for n in mine["root"]["children"]],
                         [n["name"] for n in want["root"]["children"]])

    def test_info_is_the_checkpoint_or_one_tensor(self) -> None:
        ckpt = self.c.info(Path(Q8))
        self.assertEqual(ckpt, self.c.checkpoint(Q8))
        t = self.c.info(Q8, Q8_TENSOR)
        self.assertIsInstance(t, tm.TensorInfo)
        self.assertEqual((t.name, t.shape, t.dtype), (Q8_TENSOR, (256, 256), "Q8_0"))
        with self.assertRaises(tm.Error) as cm:
            self.c.info(Q8, "blk.0.no_such.weight")
        self.assertEqual(cm.exception.code, "NOT_FOUND")

    def test_heatmap_takes_the_clis_mode_names_and_warns_on_old_ones(self) -> None:
        help_text = subprocess.run([CLI, "heatmap", "--help"], stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True).stdout
        cli_modes = re.search(r"\{([a-z,-]+)\}", help_text.replace(" ", "")).group(1).split(",")
        for mode in cli_modes:
            if mode == "mean":
                continue  # the CLI's alias of value: below
            with self.subTest(mode=mode):
                with warnings.catch_warnings():
                    warnings.simplefilter("error")
                    h = self.c.heatmap(Q8, Q8_TENSOR, mode=mode, width=8, height=4,
                                       reference="source" if mode in ("error", "sq-error")
                                       else "")
                self.assertEqual(h["cells"].shape, (4, 8))
        with self.assertWarns(DeprecationWarning):
            old = self.c.heatmap(Q8, Q8_TENSOR, mode="mean", width=8, height=4)
        new = self.c.heatmap(Q8, Q8_TENSOR, mode="value", width=8, height=4)
        self.assertTrue(np.array_equal(old["cells"], new["cells"]))


class PackageTest(unittest.TestCase):
    def test_the_package_says_it_is_typed(self) -> None:
        self.assertTrue((Path(tm.__file__).parent / "py.typed").is_file())

    def test_the_public_api_type_checks(self) -> None:
        try:
            import mypy  # noqa: F401  (Debian: python3-mypy)
        except ImportError:
            self.skipTest("mypy is not installed (apt-get install python3-mypy)")
        pkg = Path(tm.__file__).parent
        with tempfile.TemporaryDirectory(prefix="tm-mypy-") as tmp:
            config = Path(tmp) / "mypy.ini"
            # The generated stubs are protoc's, checked by no one here.
            config.write_text("[mypy]\nignore_missing_imports = True\n"
                              "[mypy-tensormorph.v1.*]\nignore_errors = True\n")
            r = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(config),
                                "--cache-dir", os.path.join(tmp, "cache"),
                                *(str(pkg / f) for f in ("__init__.py", "_client.py",
                                                         "_local.py", "_tensor.py",
                                                         "_native_read.py"))],
                               cwd=pkg.parent, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
        self.assertEqual(r.returncode, 0, r.stdout)

    def test_a_local_server_dies_with_its_killed_parent(self) -> None:
        script = ("import sys, time, tensormorph as tm\n"
                  "c = tm.local(sys.argv[1])\n"
                  "print(c.process.pid, flush=True)\n"
                  "time.sleep(600)\n")
        env = dict(os.environ, TENSORMORPH_TENSORMORPHD=TENSORMORPHD)
        child = subprocess.Popen([sys.executable, "-c", script, ROOT], env=env,
                                 stdout=subprocess.PIPE, text=True)
        try:
            server_pid = int(child.stdout.readline())
            self.assertTrue(alive(server_pid))
        finally:
            child.kill()  # SIGKILL: no atexit, no close()
            child.wait()
            child.stdout.close()
        deadline = time.monotonic() + 20
        while alive(server_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertFalse(alive(server_pid), "the local server outlived its parent")


def alive(pid: int) -> bool:
    """Running, not a zombie left for init to reap."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


if __name__ == "__main__":
    unittest.main()
