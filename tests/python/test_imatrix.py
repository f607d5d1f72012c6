"""Importance matrices (llama.cpp's imatrix, both forms) listed and used to
weight a diff and a squared-error heatmap, held to an independent numpy
computation.

tests/python/writers/imatrix_writer.py writes the files from llama-imatrix's
definitions; a float32 source and its float16 copy (numpy rounds it, so the
decoded values are known here) make the diff. Over gRPC (a tensormorphd on a
loopback port, the Python client) and through the CLI's embedded server.
Env: PYTHONPATH=<build>/python, TENSORMORPH_TENSORMORPHD, TENSORMORPH_CLI.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import numpy as np

import tensormorph as tm
from live_server import LiveServer

sys.path.insert(0, str(Path(__file__).resolve().parent / "writers"))
import imatrix_writer as iw  # noqa: E402

TENSORMORPHD = os.environ["TENSORMORPH_TENSORMORPHD"]
CLI = os.environ["TENSORMORPH_CLI"]
CHUNK_SIZE = 512

rng = np.random.default_rng(34)
# name -> source [.., columns]; experts first for the 3-D one.
SOURCE = {
    "blk.0.ffn_up.weight": rng.normal(size=(6, 40)).astype(np.float32),
    "blk.0.ffn_up_exps.weight": rng.normal(size=(4, 3, 16)).astype(np.float32),
    "blk.0.attn_k.weight": rng.normal(size=(4, 24)).astype(np.float32),
    "blk.0.attn_q.weight": rng.normal(size=(4, 32)).astype(np.float32),
}
ENTRIES = [
    iw.Entry("blk.0.ffn_up.weight",
             rng.uniform(0.01, 50, size=(1, 40)).astype(np.float32), [1300]),
    # Experts 1 and 3 never reached: their weights read 1.
    iw.Entry("blk.0.ffn_up_exps.weight",
             np.where(np.array([[1], [0], [1], [0]]),
                      rng.uniform(0.01, 9, size=(4, 16)), 0).astype(np.float32),
             [700, 0, 90, 0]),
    # 30 columns against the tensor's 24: it does not fit.
    iw.Entry("blk.0.attn_k.weight",
             rng.uniform(0.5, 2, size=(1, 30)).astype(np.float32), [600]),
]
# blk.0.attn_q.weight has no entry.


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, arr in tensors.items():
        data = arr.tobytes()
        header[name] = {"dtype": {"float32": "F32", "float16": "F16"}[arr.dtype.name],
                        "shape": list(arr.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    Path(path).write_bytes(len(h).to_bytes(8, "little") + h + b"".join(blobs))


def weighted_reference(x, w_per_expert):
    """sum w * err^2 and sum w * x^2 in float64, exactly rounded (fsum)."""
    xq = x.astype(np.float16).astype(np.float32)
    x3 = x.reshape((-1,) + x.shape[-2:]) if x.ndim == 3 else x[None]
    q3 = xq.reshape(x3.shape)
    se, xx = [], []
    for e in range(x3.shape[0]):
        w = w_per_expert[e].astype(np.float64)[None, :]
        src = x3[e].astype(np.float64)
        err = src - q3[e].astype(np.float64)
        se.append((w * (err * err)).ravel())
        xx.append((w * (src * src)).ravel())
    return math.fsum(np.concatenate(se)), math.fsum(np.concatenate(xx))


def lanes_cells(terms, row_edges, col_edges):
    """Each cell's sum of `terms` as GetHeatmapResponse.values states
    SQ_ERROR's: the term at column offset k inside its cell into partial sum
    k % 16, each partial sum in row-major order from 0, then p[k] + p[k + 8],
    those as q[k] + q[k + 4], then r[k] + r[k + 2], then the two; every
    addition in float64, one at a time (Python floats)."""
    out = np.empty((len(row_edges) - 1, len(col_edges) - 1))
    for i in range(len(row_edges) - 1):
        for j in range(len(col_edges) - 1):
            p = [0.0] * 16
            for r in range(row_edges[i], row_edges[i + 1]):
                for c in range(col_edges[j], col_edges[j + 1]):
                    p[(c - col_edges[j]) % 16] += float(terms[r, c])
            q = [p[k] + p[k + 8] for k in range(8)]
            r4 = [q[k] + q[k + 4] for k in range(4)]
            out[i, j] = (r4[0] + r4[2]) + (r4[1] + r4[3])
    return out


def snake(v):
    if isinstance(v, dict):
        return {re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), k): snake(x)
                for k, x in v.items()}
    if isinstance(v, list):
        return [snake(x) for x in v]
    return v


def assert_close(test, got, want):
    test.assertLessEqual(abs(got - want), 1e-12 * abs(want), (got, want))


class ImatrixTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        root = Path(cls.tmp.name)
        (root / "src").mkdir()
        (root / "q").mkdir()
        (root / "q2").mkdir()
        write_safetensors(str(root / "src" / "model.safetensors"), SOURCE)
        write_safetensors(str(root / "q" / "model.safetensors"),
                          {k: v.astype(np.float16) for k, v in SOURCE.items()})
        # A second quantization for compare: the float16 copy, less one tensor.
        write_safetensors(str(root / "q2" / "model.safetensors"),
                          {k: v.astype(np.float16) for k, v in SOURCE.items()
                           if k != "blk.0.attn_k.weight"})
        (root / "imatrix.gguf").write_bytes(
            iw.gguf_bytes(ENTRIES, 3, CHUNK_SIZE, ["calib.txt", "more.txt"]))
        (root / "imatrix.dat").write_bytes(iw.legacy_bytes(ENTRIES, 3, CHUNK_SIZE, "calib.txt"))
        cls.root = root
        cls.server = LiveServer(TENSORMORPHD, str(root))
        cls.client = tm.connect(cls.server.address)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.server.stop()
        cls.tmp.cleanup()

    def cli(self, *args):
        """The CLI's --json lines, keys in the proto's own (snake_case) names
        as the Python client gives them (the CLI prints proto JSON's
        lowerCamelCase)."""
        out = subprocess.run([CLI, "--json", *args], cwd=self.root, capture_output=True,
                             text=True, check=True)
        return [snake(json.loads(line)) for line in out.stdout.splitlines() if line.strip()]

    def check_listing(self, m, form):
        self.assertEqual(m["form"], form)
        self.assertEqual(int(m["chunk_count"]), 3)
        by_name = {e["name"]: e for e in m["entries"]}
        self.assertEqual(sorted(by_name), sorted(e.name for e in ENTRIES))
        for e in ENTRIES:
            got = by_name[e.name]
            self.assertEqual(int(got["chunks"]), e.ncall(CHUNK_SIZE))
            if form == "IMATRIX_FORM_GGUF":
                self.assertEqual(int(got["columns"]), e.in_sum2.shape[1])
                self.assertEqual(int(got["experts"]), e.in_sum2.shape[0])
                self.assertEqual([float(c) for c in got["counts"]], list(map(float, e.counts)))
                never = [i for i, c in enumerate(e.counts) if c == 0]
                self.assertEqual([int(i) for i in got["experts_never_reached"]], never)
            else:
                self.assertEqual(int(got["columns"]), e.in_sum2.size)
                self.assertEqual(int(got["experts"]), 1)
                self.assertEqual([float(c) for c in got["counts"]], [e.ncall(CHUNK_SIZE)])
                self.assertEqual(got["experts_never_reached"], [])

    def test_lists_both_forms_over_grpc_and_cli(self):
        g = self.client.importance_matrix("imatrix.gguf")
        self.check_listing(g, "IMATRIX_FORM_GGUF")
        self.assertEqual(g["datasets"], ["calib.txt", "more.txt"])
        self.assertEqual(int(g["chunk_size"]), CHUNK_SIZE)
        self.check_listing(self.client.importance_matrix("imatrix.dat"), "IMATRIX_FORM_LEGACY")
        self.check_listing(self.cli("imatrix", "imatrix.gguf")[0], "IMATRIX_FORM_GGUF")
        self.check_listing(self.cli("imatrix", "imatrix.dat")[0], "IMATRIX_FORM_LEGACY")

    def expected_weights(self, form, name):
        e = next(e for e in ENTRIES if e.name == name)
        if form == "gguf":
            return iw.gguf_weights(e)
        experts = SOURCE[name].shape[0] if SOURCE[name].ndim == 3 else 1
        return iw.legacy_weights(e, CHUNK_SIZE).reshape(experts, -1)

    def check_diff(self, events, form):
        tensors = {e["name"]: e for e in events if e.get("event", "tensor") == "tensor"
                   and "name" in e}
        summary = next(e for e in events if "tensors_compared" in e)
        total_se = []
        total_xx = []
        for name in ["blk.0.ffn_up.weight", "blk.0.ffn_up_exps.weight"]:
            t = tensors[name]
            self.assertEqual(t["imatrix_use"], "IMATRIX_USE_WEIGHTED", name)
            se, xx = weighted_reference(SOURCE[name], self.expected_weights(form, name))
            assert_close(self, float(t["weighted_sq_err"]), se)
            assert_close(self, float(t["weighted_source_energy"]), xx)
            self.assertAlmostEqual(float(t["weighted_sqnr_db"]), 10 * math.log10(xx / se),
                                   places=9)
            total_se.append(float(t["weighted_sq_err"]))
            total_xx.append(float(t["weighted_source_energy"]))
        self.assertEqual(tensors["blk.0.attn_k.weight"]["imatrix_use"], "IMATRIX_USE_MISMATCH")
        self.assertEqual(tensors["blk.0.attn_q.weight"]["imatrix_use"], "IMATRIX_USE_MISSING")
        self.assertEqual(int(summary["imatrix_weighted"]), 2)
        self.assertEqual(summary["imatrix_missing"], ["blk.0.attn_q.weight"])
        self.assertEqual(len(summary["imatrix_mismatched"]), 1)
        self.assertTrue(summary["imatrix_mismatched"][0].startswith("blk.0.attn_k.weight: "))
        # Name order: ffn_up before ffn_up_exps.
        self.assertEqual(float(summary["weighted_sq_err"]), total_se[0] + total_se[1])
        self.assertEqual(float(summary["weighted_source_energy"]), total_xx[0] + total_xx[1])

    def test_weights_a_diff_as_numpy_says_over_grpc(self):
        for form in ["gguf", "dat"]:
            with self.subTest(form=form):
                events = list(self.client.diff("q", "src", imatrix=f"imatrix.{form}"))
                self.check_diff(events, "gguf" if form == "gguf" else "dat")

    def test_weights_a_diff_as_numpy_says_in_the_cli(self):
        for form in ["gguf", "dat"]:
            with self.subTest(form=form):
                lines = self.cli("diff", "q", "src", "--imatrix", f"imatrix.{form}")
                events = [{"event": "tensor", **e["tensor"]} if "tensor" in e else
                          e.get("summary", e) for e in lines]
                self.check_diff(events, form)

    def test_weights_a_comparison_as_numpy_says(self):
        out = self.client.compare("src", ["q", "q2"], imatrix="imatrix.gguf")
        cells = {(r["reference_name"], r["quantization"]): r for r in out["rows"]}
        self.assertEqual(len(cells), 7)  # q2 lacks attn_k
        summary = out["summary"]
        self.assertTrue(summary["weighted"])
        self.assertEqual(summary["not_shared"], ["blk.0.attn_k.weight"])
        self.assertEqual(summary["unweighted"], ["blk.0.attn_q.weight"])
        # An unweighted error counts at the matrix's mean importance: every
        # weight of every entry (never-reached experts' 1s included), summed
        # in name order as the server sums them.
        mean = 0.0
        count = 0
        for e in sorted(ENTRIES, key=lambda e: e.name):
            for w in iw.gguf_weights(e).ravel():
                mean += float(w)
                count += 1
        mean /= count
        factor = float(summary["unweighted_factor"])
        assert_close(self, factor, mean)
        for q in [0, 1]:
            total = []
            for name in ["blk.0.attn_q.weight", "blk.0.ffn_up.weight",
                         "blk.0.ffn_up_exps.weight"]:
                c = cells[(name, q)]
                if name == "blk.0.attn_q.weight":
                    self.assertEqual(c["imatrix_use"], "IMATRIX_USE_MISSING")
                    total.append(factor * float(c["sum_squared_error"]))
                    continue
                self.assertEqual(c["imatrix_use"], "IMATRIX_USE_WEIGHTED", name)
                se, xx = weighted_reference(SOURCE[name], self.expected_weights("gguf", name))
                assert_close(self, float(c["weighted_error"]), se)
                assert_close(self, float(c["weighted_source_energy"]), xx)
                total.append(float(c["weighted_error"]))
            t = summary["totals"][q]
            self.assertEqual(int(t["tensors_weighted"]), 2)
            # Row order: the missing tensor's unweighted error times the
            # factor, then the two.
            self.assertEqual(float(t["weighted_error"]), (total[0] + total[1]) + total[2])

    def test_weights_a_heatmap_as_numpy_says(self):
        """HEATMAP_MODE_SQ_ERROR at one cell per element: each cell is that
        element's w * (x - x̂)^2, computed in float64 as numpy does it here,
        bit for bit; an expert's view takes that expert's weights; coarser
        cells (narrower than the 16 lanes, and wider, wrapping them) are
        those terms summed in the lanes' order, bit for bit, and add up to
        the same total (to 1e-12)."""
        for form in ["gguf", "dat"]:
            for name in ["blk.0.ffn_up.weight", "blk.0.ffn_up_exps.weight"]:
                x = SOURCE[name]
                x3 = x if x.ndim == 3 else x[None]
                w = self.expected_weights(form, name)
                for e in range(x3.shape[0]):
                    with self.subTest(form=form, name=name, expert=e):
                        src = x3[e].astype(np.float64)
                        err = src - x3[e].astype(np.float16).astype(np.float64)
                        want = w[e].astype(np.float64)[None, :] * (err * err)
                        rows, cols = src.shape
                        h = self.client.heatmap("q", name, mode="sq-error", reference="src",
                                                imatrix=f"imatrix.{form}", width=cols,
                                                height=rows, leading=[e] if x.ndim == 3 else [])
                        self.assertEqual(h["imatrix_use"], "IMATRIX_USE_WEIGHTED")
                        self.assertTrue(np.array_equal(h["cells"], want))
                        for width, height in [(3, 2), (2, 3), (1, 1)]:
                            coarse = self.client.heatmap(
                                "q", name, mode="sq-error", reference="src",
                                imatrix=f"imatrix.{form}", width=width, height=height,
                                leading=[e] if x.ndim == 3 else [])
                            lanes = lanes_cells(want, coarse["row_edges"], coarse["col_edges"])
                            self.assertTrue(np.array_equal(coarse["cells"], lanes),
                                            (width, height, coarse["cells"], lanes))
                            assert_close(self, float(coarse["cells"].sum()),
                                         math.fsum(want.ravel()))

    def test_refuses_a_heatmap_it_cannot_weigh(self):
        for name, use in [("blk.0.attn_q.weight", "MISSING"),
                          ("blk.0.attn_k.weight", "MISMATCH")]:
            with self.subTest(name=name):
                with self.assertRaises(tm.Error) as caught:
                    self.client.heatmap("q", name, mode="sq-error", reference="src",
                                        imatrix="imatrix.gguf")
                self.assertEqual(caught.exception.reason, "IMATRIX_NOT_APPLICABLE")
                self.assertEqual(caught.exception.metadata.get("use"), use)
                self.assertEqual(caught.exception.metadata.get("tensor"), name)
        with self.assertRaises(tm.Error) as caught:
            self.client.heatmap("q", "blk.0.ffn_up.weight", mode="error", reference="src",
                                imatrix="imatrix.gguf")
        self.assertEqual(caught.exception.reason, "REQUEST_INVALID")
        self.assertEqual(caught.exception.metadata.get("field"), "imatrix")

    def test_refuses_a_file_outside_the_roots(self):
        with self.assertRaises(tm.Error) as caught:
            self.client.importance_matrix("/etc/hostname")
        self.assertEqual(caught.exception.code, "PERMISSION_DENIED")

    def test_a_diff_with_an_imatrix_it_cannot_read_fails_before_any_work(self):
        with self.assertRaises(tm.Error) as caught:
            list(self.client.diff("q", "src", imatrix="/etc/hostname"))
        self.assertEqual(caught.exception.reason, "OUTSIDE_ROOTS")
        (self.root / "empty.dat").write_bytes(b"")
        with self.assertRaises(tm.Error) as caught:
            list(self.client.diff("q", "src", imatrix="empty.dat"))
        self.assertEqual(caught.exception.reason, "HEADER_INVALID")
        self.assertEqual(caught.exception.metadata.get("rule"), "truncated")

    def test_a_missing_file_is_not_found_as_an_importance_matrix(self):
        with self.assertRaises(tm.Error) as caught:
            self.client.importance_matrix("no-such.imatrix")
        self.assertEqual(caught.exception.reason, "NOT_FOUND")
        self.assertIn("importance matrix", caught.exception.message)

    def test_refuses_a_model_as_an_imatrix(self):
        good = iw.gguf_bytes(ENTRIES, 3, CHUNK_SIZE, [])
        # general.type's value, same length: a GGUF that is no imatrix.
        path = self.root / "not-an-imatrix.gguf"
        path.write_bytes(good.replace(b"\x07\x00\x00\x00\x00\x00\x00\x00imatrix",
                                      b"\x07\x00\x00\x00\x00\x00\x00\x00llamaxx", 1))
        with self.assertRaises(tm.Error) as caught:
            self.client.importance_matrix(path.name)
        self.assertEqual(caught.exception.code, "DATA_LOSS")
        self.assertEqual(caught.exception.reason, "HEADER_INVALID")
        self.assertEqual(caught.exception.metadata.get("rule"), "general.type")

if __name__ == "__main__":
    unittest.main()
