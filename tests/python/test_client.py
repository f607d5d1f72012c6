"""The Python client (client/python) against a real tensormorphd.

Run by ctest (tests/CMakeLists.txt) with PYTHONPATH=<build>/python and the
binaries in the environment:
  TENSORMORPH_TENSORMORPHD  the server
  TENSORMORPH_CLI           the tensormorph CLI, whose answers are the oracle
  TENSORMORPH_MAKE_DEMO     writes the demo checkpoints
  TENSORMORPH_SOURCE_DIR    the repository (for pip install ./client/python)
The server serves a freshly made demo on a free loopback port; every answer
is compared with the CLI's for the same call.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from typing import Any, List

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

_tmp: tempfile.TemporaryDirectory
DEMO: str
_server: LiveServer
ADDRESS: str


def setUpModule() -> None:
    global _tmp, DEMO, _server, ADDRESS
    _tmp = tempfile.TemporaryDirectory(prefix="tm-py-")
    DEMO = os.path.join(_tmp.name, "demo")
    subprocess.run([MAKE_DEMO, DEMO], check=True, stdout=subprocess.DEVNULL)
    _server = LiveServer(TENSORMORPHD, DEMO)
    ADDRESS = _server.address


def tearDownModule() -> None:
    _server.stop()
    _tmp.cleanup()


def cli(*args: str) -> str:
    """The CLI's stdout for a call to the same server."""
    return subprocess.run([CLI, "--server", ADDRESS, *args], check=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True).stdout


def cli_json_lines(*args: str) -> List[Any]:
    return [json.loads(l) for l in cli("--json", *args).splitlines() if l.strip()]


def snake(name: str) -> str:
    return re.sub(r"[A-Z]", lambda m: "_" + m.group(0).lower(), name)


def assert_same(test: unittest.TestCase, cli_value: Any, mine: Any, where: str = "") -> None:
    """The CLI's JSON (protobuf's mapping: camelCase, int64 as strings,
    float32 in shortest form) names the same values as the client's dict."""
    if isinstance(cli_value, dict):
        for k, v in cli_value.items():
            test.assertIn(snake(k), mine, f"{where}.{k}")
            assert_same(test, v, mine[snake(k)], f"{where}.{k}")
    elif isinstance(cli_value, list):
        test.assertEqual(len(cli_value), len(mine), where)
        for i, (a, b) in enumerate(zip(cli_value, mine)):
            assert_same(test, a, b, f"{where}[{i}]")
    elif isinstance(mine, bool) or isinstance(cli_value, bool):
        test.assertEqual(cli_value, mine, where)
    elif isinstance(mine, int):
        test.assertEqual(int(cli_value), mine, where)
    elif isinstance(mine, float):
        c = float(cli_value)
        if math.isnan(c):
            test.assertTrue(math.isnan(mine), where)
        else:
            # doubles print exactly; float32 fields in their shortest form
            test.assertTrue(c == mine or np.float32(c) == np.float32(mine),
                            f"{where}: CLI {cli_value!r}, client {mine!r}")
    else:
        test.assertEqual(cli_value, mine, where)


class ConnectedClientTest(unittest.TestCase):
    def setUp(self) -> None:
        self.c = tm.connect(ADDRESS)

    def tearDown(self) -> None:
        self.c.close()

    def test_lists_checkpoints_and_tensors(self) -> None:
        paths = [e["path"] for e in self.c.checkpoints("")]
        self.assertIn(Q8, paths)
        self.assertIn("source", paths)
        ts = self.c.tensors(Q8)
        want = [j["name"] for j in cli_json_lines("ls", Q8)]
        self.assertEqual([t.name for t in ts], want)
        q = next(t for t in ts if t.name == Q8_TENSOR)
        self.assertEqual((q.shape, q.dtype, q.encoding["convention"]), ((256, 256), "Q8_0", "ggml"))
        self.assertEqual(q.parts[0].dtype, "Q8_0")

    def test_tensors_in_pages_are_the_whole_list(self) -> None:
        for flt, parts in [("", False), ("blk.0.*", False), ("", True)]:
            with self.subTest(filter=flt, parts=parts):
                whole = self.c.tensors(Q8, filter=flt, parts=parts)
                self.assertGreater(len(whole), 3)
                for size in (1, 3):
                    paged = self.c.tensors(Q8, filter=flt, parts=parts, page_size=size)
                    self.assertEqual([t.name for t in paged], [t.name for t in whole])
                    self.assertEqual([(t.shape, t.dtype) for t in paged],
                                     [(t.shape, t.dtype) for t in whole])

    def test_scalars_equal_the_clis(self) -> None:
        mine = self.c.scalars(Q8, Q8_TENSOR, [(3, 100), (0, 0), (-1, -1)])
        want = cli_json_lines("scalar", Q8, Q8_TENSOR, "3,100", "0,0", "-1,-1")[0]["scalars"]
        self.assertEqual(len(mine), 3)
        assert_same(self, want, mine, "scalars")
        self.assertEqual(mine[0]["index"], [3, 100])
        for key in ("raw_code", "scale", "zero_point", "group", "level", "value"):
            self.assertIn(key, mine[0])

    def test_scalars_with_a_reference_equal_the_clis(self) -> None:
        # GGUF row 1 of attn_q is the Hugging Face source's row 32 (the
        # converter's RoPE permutation, head_dim 64).
        mine = self.c.scalars(Q8, Q8_TENSOR, [(1, 7)], reference="source")
        want = cli_json_lines("scalar", Q8, Q8_TENSOR, "1,7", "--ref", "source")[0]["scalars"]
        assert_same(self, want, mine, "scalars --ref")
        self.assertEqual(mine[0]["source"]["index"], [32, 7])
        self.assertEqual(mine[0]["source"]["error"], mine[0]["value"] - mine[0]["source"]["value"])

    def test_diff_worst_tensor_and_metrics_equal_the_clis(self) -> None:
        events = list(self.c.diff(Q8, "source"))
        summary = events[-1]
        self.assertEqual(summary["event"], "summary")
        reports = {e["name"]: e for e in events[:-1]}
        self.assertTrue(all(e["event"] == "tensor" for e in events[:-1]))
        cli_events = cli_json_lines("diff", Q8, "source")
        cli_summary = next(e["summary"] for e in cli_events if "summary" in e)
        cli_reports = {e["tensor"]["name"]: e["tensor"] for e in cli_events if "tensor" in e}
        self.assertEqual(summary["worst_tensors"][0], cli_summary["worstTensors"][0])
        self.assertEqual(summary["worst_tensors"], cli_summary["worstTensors"])
        self.assertEqual(sorted(reports), sorted(cli_reports))
        worst = summary["worst_tensors"][0]
        for key in ("maxErrSteps", "sqnrDb", "mse", "cosine", "aboveHalfStep"):
            assert_same(self, cli_reports[worst][key], reports[worst][snake(key)], key)

    def test_compare_rows_equal_the_clis(self) -> None:
        q4 = "model-q4_k_m.gguf"
        # The filter is on the rows: the source's (Hugging Face) names.
        got = self.c.compare("source", [Q8, q4], filter="model.layers.0.*", budget_bpw=6.0)
        cli_events = cli_json_lines("compare", "source", Q8, q4, "--filter", "model.layers.0.*",
                                    "--budget-bpw", "6")
        cli_rows = [e["row"] for e in cli_events if "row" in e]
        cli_summary = next(e["summary"] for e in cli_events if "summary" in e)
        # One flat dict per (tensor, quantization): what pandas.DataFrame takes.
        self.assertEqual(len(got["rows"]), 2 * len(cli_rows))
        by_key = {(r["reference_name"], r["quantization"]): r for r in got["rows"]}
        for row in cli_rows:
            for q, cell in enumerate(row["cells"]):
                mine = by_key[(row["referenceName"], q)]
                self.assertEqual(mine["checkpoint"], [Q8, q4][q])
                for key in ("scheme", "bytes", "bitsPerWeight", "sqnrDb", "sumSquaredError"):
                    assert_same(self, cell[key], mine[snake(key)], key)
        mix = got["summary"]["mix"]
        self.assertLessEqual(mix["bytes"], mix["budget_bytes"])
        assert_same(self, cli_summary["mix"]["sumSquaredError"], mix["sum_squared_error"])
        self.assertEqual(len(mix["choices"]), len(cli_rows))

    def test_compare_refuses_one_path_and_two_budgets(self) -> None:
        # Refused before any call: a str would be compared a character at a
        # time, and the request's oneof would silently keep one budget.
        with self.assertRaises(TypeError):
            self.c.compare("source", Q8)
        with self.assertRaises(TypeError):
            self.c.compare("source", Path(Q8))
        with self.assertRaises(ValueError):
            self.c.compare("source", [Q8, "model-q4_k_m.gguf"], budget_bpw=6.0,
                           budget_bytes=1 << 20)
        # Out of range: the client's own ValueError naming the argument, not
        # protobuf's "Value out of range" (the trial's budget_bytes=2**70).
        for bad in (2 ** 70, 2 ** 63, 0, -1, 1.5, True):
            with self.assertRaisesRegex(ValueError, "^budget_bytes "):
                self.c.compare("source", [Q8, "model-q4_k_m.gguf"], budget_bytes=bad)
        for bad_bpw in (0.0, -2.0, math.inf, math.nan):
            with self.assertRaisesRegex(ValueError, "^budget_bpw "):
                self.c.compare("source", [Q8, "model-q4_k_m.gguf"], budget_bpw=bad_bpw)

    def test_diff_gates_flag_tensors(self) -> None:
        events = list(self.c.diff(Q8, "source", filter="blk.0.*", fail_on=["sqnr_db<1000"]))
        summary = events[-1]
        self.assertTrue(summary["flagged"])
        self.assertTrue(all(n.startswith("blk.0.") for n in summary["flagged"]))

    def test_stats_and_heatmap(self) -> None:
        s = self.c.stats(Q8, Q8_TENSOR)
        self.assertEqual(s["count"], 256 * 256)
        self.assertEqual(int(s["histogram"].sum()), 256 * 256)
        self.assertTrue(s["has_levels"])
        h = self.c.heatmap(Q8, Q8_TENSOR, mode="group", width=8, height=4)
        self.assertEqual(h["cells"].shape, (4, 8))
        self.assertEqual(h["groups"].shape, (4, 8))
        # Q8_0: blocks of 32 along a row, 8 per row; cell (0, j) starts block j.
        self.assertEqual(h["groups"][0].tolist(), list(range(8)))
        e = self.c.heatmap(Q8, Q8_TENSOR, mode="error", reference="source", width=16, height=16)
        self.assertTrue(np.all(e["cells"] >= 0))

    def test_an_error_without_details_gets_its_codes_generic_reason(self) -> None:
        self.assertEqual(tm.Error("UNAUTHENTICATED", "no token").reason, "UNAUTHENTICATED")
        self.assertEqual(tm.Error("INVALID_ARGUMENT", "bad").reason, "REQUEST_INVALID")


class ReadTest(unittest.TestCase):
    """read() and its errors, through the C++ client (tensormorph._native,
    required where the build made it: live_server.NATIVE_BUILT)."""

    NATIVE = NATIVE_BUILT

    def setUp(self) -> None:
        self.c = tm.connect(ADDRESS, native=self.NATIVE)
        self.assertEqual(self.c.read_path, "native" if self.NATIVE else "grpcio")

    def tearDown(self) -> None:
        self.c.close()

    def cli_npy(self, *args: str) -> np.ndarray:
        out = os.path.join(_tmp.name, "cli.npy")
        cli("read", *args, "-o", out)
        return np.load(out)

    def test_read_float_is_bit_exact_to_the_cli(self) -> None:
        for ckpt, tensor, sl in [(Q8, Q8_TENSOR, None), (Q8, Q8_TENSOR, "0:4, ::2"),
                                 ("int8", "model.layers.0.self_attn.q_proj.weight", None),
                                 ("source", "model.layers.0.mlp.down_proj.weight", "-1")]:
            with self.subTest(ckpt=ckpt, tensor=tensor, slice=sl):
                a = self.c.read(ckpt, tensor, slice=sl)
                want = self.cli_npy(ckpt, tensor, *(["--slice", sl] if sl else []))
                self.assertEqual(a.dtype, np.float32)
                self.assertEqual(a.shape, want.shape)
                self.assertEqual(a.tobytes(), want.astype("<f4").tobytes())

    def test_read_assembles_many_chunks_in_order(self) -> None:
        whole = self.c.read(Q8, Q8_TENSOR)
        small = self.c.read(Q8, Q8_TENSOR, max_chunk_bytes=4096)  # 64 chunks
        self.assertEqual(small.tobytes(), whole.tobytes())
        raw = self.c.read(Q8, Q8_TENSOR, raw=True, max_chunk_bytes=34 * 8)
        self.assertEqual(raw.tobytes(), self.c.read(Q8, Q8_TENSOR, raw=True).tobytes())

    def test_read_raw_is_the_stored_bytes_as_the_cli_writes_them(self) -> None:
        for ckpt, tensor, dtype in [(Q8, Q8_TENSOR, "Q8_0"),
                                    ("source", "model.layers.0.mlp.down_proj.weight", "BF16")]:
            with self.subTest(ckpt=ckpt, tensor=tensor):
                r = self.c.read(ckpt, tensor, raw=True)
                want = self.cli_npy(ckpt, tensor, "--raw")
                self.assertEqual(r.dtype, np.uint8)
                self.assertEqual(r.stored_dtype, dtype)
                self.assertEqual(r.tobytes(), want.tobytes())
                self.assertEqual(r.nbytes, want.nbytes)

    def test_errors_carry_their_code(self) -> None:
        with self.assertRaises(tm.Error) as cm:
            self.c.read(Q8, "blk.0.no_such.weight")
        self.assertEqual((cm.exception.code, cm.exception.reason), ("NOT_FOUND", "TENSOR_NOT_FOUND"))
        self.assertEqual(cm.exception.metadata["tensor"], "blk.0.no_such.weight")
        with self.assertRaises(tm.Error) as cm:
            self.c.tensors("no-such-checkpoint.gguf")
        self.assertEqual((cm.exception.code, cm.exception.reason), ("NOT_FOUND", "CHECKPOINT_NOT_FOUND"))
        with self.assertRaises(tm.Error) as cm:
            self.c.read(Q8, Q8_TENSOR, slice="0:4, 0:4, 0:4")
        self.assertEqual(cm.exception.code, "INVALID_ARGUMENT")

    def test_errors_carry_the_servers_reason_and_metadata(self) -> None:
        with self.assertRaises(tm.Error) as cm:
            self.c.read(Q8, "blk.0.no_such.weight")
        self.assertEqual(cm.exception.reason, "TENSOR_NOT_FOUND")
        self.assertEqual(cm.exception.details["domain"], "tensormorph.dev")
        self.assertEqual(cm.exception.metadata,
                         {"checkpoint": Q8, "tensor": "blk.0.no_such.weight"})
        with self.assertRaises(tm.Error) as cm:
            self.c.tensors("no-such-checkpoint.gguf")
        self.assertEqual(cm.exception.reason, "CHECKPOINT_NOT_FOUND")
        with self.assertRaises(tm.Error) as cm:
            self.c.read(Q8, Q8_TENSOR, slice="0:4, 0:4, 0:4")
        self.assertEqual(cm.exception.reason, "SLICE_INVALID")
        with self.assertRaises(tm.Error) as cm:
            self.c.read(Q8, Q8_TENSOR, slice="0:4, 99999")
        self.assertEqual(cm.exception.reason, "SLICE_OUT_OF_RANGE")
        self.assertEqual(cm.exception.metadata["dimension"], "1")
        with self.assertRaises(tm.Error) as cm:
            self.c.info("../../etc")
        self.assertEqual(cm.exception.reason, "OUTSIDE_ROOTS")

    def test_the_reason_survives_a_pickle(self) -> None:
        import pickle
        with self.assertRaises(tm.Error) as cm:
            self.c.read(Q8, "blk.0.no_such.weight")
        back = pickle.loads(pickle.dumps(cm.exception))
        self.assertEqual(back.reason, "TENSOR_NOT_FOUND")
        self.assertEqual(back.metadata, cm.exception.metadata)


class ReadThroughGrpcioTest(ReadTest):
    """The same through grpcio, the path of a pure-Python install."""

    NATIVE = False


class MixedDirectoryListingTest(unittest.TestCase):
    """A safetensors directory with a GGUF and a checkpoint in a
    subdirectory beside its shard: checkpoints() lists the directory, then
    what is beside it, as the CLI's `ls`; the directory itself opens as its
    safetensors alone."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.root = tempfile.mkdtemp(prefix="tm-py-mixed-", dir=_tmp.name)
        mixed = os.path.join(cls.root, "mixed")
        os.makedirs(os.path.join(mixed, "sub"))
        shutil.copy(os.path.join(DEMO, "source", "model.safetensors"), mixed)
        shutil.copy(os.path.join(DEMO, Q8), os.path.join(mixed, "b.gguf"))
        shutil.copy(os.path.join(DEMO, Q8), os.path.join(mixed, "sub", "c.gguf"))
        cls.server = LiveServer(TENSORMORPHD, cls.root)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.server.stop()

    def test_checkpoints_list_the_directory_then_what_is_beside_it(self) -> None:
        want = ["mixed", "mixed/b.gguf", "mixed/sub/c.gguf"]
        with tm.connect(self.server.address) as c:
            for root in ("", "mixed", Path("mixed")):
                with self.subTest(root=root):
                    self.assertEqual([e["path"] for e in c.checkpoints(root)], want)
            listed = c.checkpoints("mixed")
            self.assertEqual([e["format"] for e in listed],
                             ["CHECKPOINT_FORMAT_SAFETENSORS", "CHECKPOINT_FORMAT_GGUF",
                              "CHECKPOINT_FORMAT_GGUF"])
            out = subprocess.run([CLI, "--server", self.server.address, "--json", "ls", "mixed",
                                  "--checkpoints"],
                                 check=True, stdout=subprocess.PIPE, text=True).stdout
            shown = [json.loads(l) for l in out.splitlines() if l.strip()]
            for e in shown:
                e.pop("nextPageToken", None)  # the CLI followed the pages
            assert_same(self, shown, listed)
            # The directory is its safetensors checkpoint, as before.
            self.assertEqual(c.checkpoint("mixed")["format"], "CHECKPOINT_FORMAT_SAFETENSORS")
            self.assertEqual([t.name for t in c.tensors("mixed")],
                             [t.name for t in c.tensors("mixed/model.safetensors")])
            self.assertEqual(c.checkpoint("mixed/sub/c.gguf")["format"], "CHECKPOINT_FORMAT_GGUF")


class LocalServerTest(unittest.TestCase):
    def test_local_reads_local_files_and_stops_its_server(self) -> None:
        os.environ["TENSORMORPH_TENSORMORPHD"] = TENSORMORPHD
        cwd = os.getcwd()
        os.chdir(DEMO)
        try:
            with tm.local() as c:
                self.assertEqual(c.read_path, "native" if NATIVE_BUILT else "grpcio")
                a = c.read(Q8, Q8_TENSOR)  # relative to the working directory
                pid = c.process.pid
                self.assertIsNone(c.process.poll())
                # A server of "/" listens where only this user can connect.
                self.assertTrue(c.address.startswith("unix:"), c.address)
                sock = c.address[len("unix:"):]
                self.assertEqual(os.stat(os.path.dirname(sock)).st_mode & 0o077, 0)
        finally:
            os.chdir(cwd)
        with tm.connect(ADDRESS) as remote:
            self.assertEqual(a.tobytes(), remote.read(Q8, Q8_TENSOR).tobytes())
        self.assertIsNotNone(c.process.poll())
        self.assertFalse(os.path.exists(sock))
        with self.assertRaises(ProcessLookupError):
            os.kill(pid, 0)

    def test_local_server_stops_at_exit_without_close(self) -> None:
        script = ("import tensormorph as tm\n"
                  "c = tm.local()\n"
                  "print(c.process.pid, flush=True)\n")
        env = dict(os.environ, TENSORMORPH_TENSORMORPHD=TENSORMORPHD)
        r = subprocess.run([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout)
        with self.assertRaises(ProcessLookupError):
            os.kill(int(r.stdout.split()[0]), 0)

    def test_a_missing_server_binary_is_an_error(self) -> None:
        with self.assertRaises(tm.Error) as cm:
            tm.local(tensormorphd=os.path.join(_tmp.name, "no-such-tensormorphd"))
        self.assertEqual(cm.exception.code, "UNAVAILABLE")


class PipInstallTest(unittest.TestCase):
    def test_pip_install_in_a_system_site_packages_venv(self) -> None:
        try:
            import ensurepip  # noqa: F401  (python3-venv provides it on Debian)
        except ImportError:
            self.skipTest("python3-venv is not installed (apt-get install python3-venv)")
        with tempfile.TemporaryDirectory(prefix="tm-venv-") as tmp:
            venv = Path(tmp) / "venv"
            r = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages",
                                str(venv)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
            if r.returncode != 0 and "ensurepip" in r.stdout:
                self.skipTest("python3-venv is not installed (apt-get install python3-venv)")
            self.assertEqual(r.returncode, 0, r.stdout)
            # No index: the install must need nothing from the network.
            env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
            env.pop("PYTHONPATH", None)
            r = subprocess.run([str(venv / "bin" / "pip"), "install", "./client/python"],
                               cwd=SOURCE_DIR, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
            self.assertEqual(r.returncode, 0, r.stdout)
            script = ("import hashlib, pathlib, sys, tensormorph as tm\n"
                      "assert 'site-packages' in tm.__file__, tm.__file__\n"
                      "assert (pathlib.Path(tm.__file__).parent / 'py.typed').is_file()\n"
                      "c = tm.connect(sys.argv[1])\n"
                      "assert c.read_path == 'grpcio', c  # no compiled module\n"
                      f"print(hashlib.sha256(c.read({Q8!r}, {Q8_TENSOR!r}).tobytes()).hexdigest())\n")
            r = subprocess.run([str(venv / "bin" / "python"), "-c", script, ADDRESS], cwd=tmp,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
            self.assertEqual(r.returncode, 0, r.stdout)
            with tm.connect(ADDRESS) as c:
                want = hashlib.sha256(c.read(Q8, Q8_TENSOR).tobytes()).hexdigest()
            self.assertEqual(r.stdout.strip(), want)


class QuantReportExampleTest(unittest.TestCase):
    def test_writes_one_self_contained_page_with_every_section(self) -> None:
        out = os.path.join(_tmp.name, "report.html")
        script = SOURCE_DIR / "client" / "python" / "examples" / "quant_report.py"
        r = subprocess.run([sys.executable, str(script), "--server", ADDRESS, Q8, "source",
                            "-o", out], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
        self.assertEqual(r.returncode, 0, r.stdout)
        page = Path(out).read_text()
        for section in ("Per-layer SQNR", "Max error in steps", "Error heatmaps",
                        "Level usage"):
            self.assertIn(section, page)
        # The charts are matplotlib's SVG, inlined: SQNR, max error, one
        # level-usage plot per worst tensor; no standalone-file prolog.
        self.assertGreaterEqual(page.count("<svg"), 2 + 3, "charts missing")
        self.assertNotIn("<?xml", page)
        self.assertNotIn("<!DOCTYPE svg", page)
        self.assertIn("data:image/png;base64,", page)
        self.assertNotRegex(page, r"(src|href)=\"https?:")
        with tm.connect(ADDRESS) as c:
            for t in c.tensors(Q8):
                self.assertIn(t.name, page)

    def test_refuses_to_write_onto_its_input_and_leaves_it_whole(self) -> None:
        # A private server on local files (no --server): -o naming the
        # quantized checkpoint itself is refused before any work.
        quant = os.path.join(DEMO, Q8)
        before = Path(quant).read_bytes()
        script = SOURCE_DIR / "client" / "python" / "examples" / "quant_report.py"
        r = subprocess.run([sys.executable, str(script), quant, os.path.join(DEMO, "source"),
                            "-o", quant], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
        self.assertEqual(r.returncode, 1, r.stderr)
        # The refusal names the output it will not write.
        self.assertIn(f"-o {quant}", r.stderr)
        self.assertEqual(Path(quant).read_bytes(), before)


class DiffJsonlExampleTest(unittest.TestCase):
    def test_logs_one_json_line_per_tensor_with_the_step(self) -> None:
        script = SOURCE_DIR / "client" / "python" / "examples" / "diff_jsonl.py"
        r = subprocess.run([sys.executable, str(script), "--server", ADDRESS, Q8, "source",
                            "--step", "7"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = [json.loads(l) for l in r.stdout.splitlines()]
        with tm.connect(ADDRESS) as c:
            self.assertEqual(sorted(row["tensor"] for row in rows),
                             [t.name for t in c.tensors(Q8)])
            reports = {e["name"]: e for e in c.diff(Q8, "source") if e["event"] == "tensor"}
        for row in rows:
            self.assertEqual(row["step"], 7)
            self.assertEqual(row["max_err_steps"], reports[row["tensor"]]["max_err_steps"])


if __name__ == "__main__":
    unittest.main()
