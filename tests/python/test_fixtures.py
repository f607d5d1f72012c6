"""The Python client reads the golden fixtures exactly as their reference
implementations decode them (../shared/fixtures, described in FIXTURES.md).

Run by ctest (tests/CMakeLists.txt, the python_client entry) with
PYTHONPATH=<build>/python and:
  TENSORMORPH_TENSORMORPHD  the server
  TENSORMORPH_FIXTURES_DIR  the fixtures (gguf/ and safetensors/)
A tensormorphd serves the fixtures directory on a free loopback port; some
reads also go through tm.local(). GGUF reads must equal ggml's own to_float
bit for bit; the safetensors conventions may differ by one ulp where the
reference rounded in another order (FIXTURES.md), and NaNs must stay NaN.
"""

from __future__ import annotations

import os
import struct
import tempfile
import unittest
from pathlib import Path
from typing import List, Tuple

import numpy as np

import tensormorph as tm
from live_server import LiveServer

TENSORMORPHD = os.environ["TENSORMORPH_TENSORMORPHD"]
FIXTURES = Path(os.environ.get("TENSORMORPH_FIXTURES_DIR",
                               Path(__file__).resolve().parents[2].parent / "shared" / "fixtures"))

_server: LiveServer
ADDRESS: str


def setUpModule() -> None:
    global _server, ADDRESS
    if not (FIXTURES / "gguf").is_dir():
        raise unittest.SkipTest(f"no fixtures at {FIXTURES}")
    _server = LiveServer(TENSORMORPHD, str(FIXTURES))
    ADDRESS = _server.address


def tearDownModule() -> None:
    _server.stop()


def gguf_cases() -> List[Tuple[str, str, Path]]:
    """(checkpoint, tensor, expected file) for every `<TYPE>.<tensor>.deq.f32`."""
    cases = []
    for f in sorted((FIXTURES / "gguf").glob("*.deq.f32")):
        dtype, tensor = f.name[:-len(".deq.f32")].split(".", 1)
        cases.append((f"gguf/{dtype}.gguf", tensor, f))
    return cases


def safetensors_cases() -> List[Tuple[str, str, Path]]:
    """(checkpoint folder, logical tensor, expected file) for every convention."""
    cases = []
    for d in sorted(p for p in (FIXTURES / "safetensors").iterdir() if p.is_dir()):
        for f in sorted((d / "expected").glob("*.f32")):
            cases.append((f"safetensors/{d.name}", f.name[:-len(".f32")], f))
    return cases


def expected(f: Path) -> np.ndarray:
    return np.fromfile(f, dtype="<f4")


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype="<f4").reshape(-1).view(np.uint32)


def ulps_apart(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Distance in representable float32 steps (0 for equal bits, including
    NaN against the same NaN; +0 and -0 are one ulp apart on this scale)."""
    def ordered(b: np.ndarray) -> np.ndarray:
        i = b.astype(np.int64)
        return np.where(i & 0x80000000, 0x80000000 - i, i + 0)
    return np.abs(ordered(bits(got)) - ordered(bits(want)))


def tiny_gguf(path: Path, ggml_type: int, block_bytes: int) -> None:
    """A GGUF v3 file with one [256] tensor of `ggml_type` (one 256-element
    block of zero bytes): enough for the reader to know the type."""
    name = b"blk.0.attn_q.weight"
    head = b"GGUF" + struct.pack("<IQQ", 3, 1, 0)
    info = struct.pack("<Q", len(name)) + name + struct.pack("<IQIQ", 1, 256, ggml_type, 0)
    body = head + info
    body += b"\0" * (-len(body) % 32)
    path.write_bytes(body + b"\0" * block_bytes)


class GgufFixturesTest(unittest.TestCase):
    def test_every_gguf_tensor_reads_bit_exact_to_ggml(self) -> None:
        cases = gguf_cases()
        self.assertGreaterEqual(len(cases), 2 * 19, "fixtures missing")
        with tm.connect(ADDRESS) as c:
            for ckpt, tensor, f in cases:
                with self.subTest(checkpoint=ckpt, tensor=tensor):
                    a = c.read(ckpt, tensor)
                    want = expected(f)
                    self.assertEqual(a.dtype, np.float32)
                    self.assertEqual(a.shape, (4, 256))
                    mismatch = np.flatnonzero(bits(a) != bits(want))
                    self.assertEqual(mismatch.size, 0,
                                     f"{ckpt} {tensor}: {mismatch.size} elements differ, first "
                                     f"at {mismatch[:1].tolist()}: got "
                                     f"{a.reshape(-1)[mismatch[:1]].tolist()}, want "
                                     f"{want[mismatch[:1]].tolist()}")

    def test_slices_are_bit_exact_too(self) -> None:
        with tm.connect(ADDRESS) as c:
            for ckpt, tensor, f in gguf_cases():
                with self.subTest(checkpoint=ckpt, tensor=tensor):
                    a = c.read(ckpt, tensor, slice="1:4:2, 3::7")
                    want = expected(f).reshape(4, 256)[1:4:2, 3::7]
                    self.assertEqual(a.shape, want.shape)
                    np.testing.assert_array_equal(bits(a), bits(want))

    def test_local_server_reads_are_bit_exact(self) -> None:
        os.environ["TENSORMORPH_TENSORMORPHD"] = TENSORMORPHD
        cases = [c for c in gguf_cases()
                 if c[0].split("/")[1].split(".")[0] in ("Q4_K", "Q8_0", "IQ4_XS", "NVFP4")]
        self.assertEqual(len(cases), 8)
        with tm.local() as c:
            for ckpt, tensor, f in cases:
                with self.subTest(checkpoint=ckpt, tensor=tensor):
                    a = c.read(str(FIXTURES / ckpt), tensor)
                    np.testing.assert_array_equal(bits(a), bits(expected(f)))
            ckpt, tensor, f = next(x for x in safetensors_cases()
                                   if x[0].endswith("gptq_4bit_g32_actorder"))
            a = c.read(str(FIXTURES / ckpt), tensor)
            self.assertLessEqual(int(ulps_apart(a, expected(f)).max()), 1)

    def test_the_iq_codebook_types_decode(self) -> None:
        # Zero blocks: scale 0, so every value is +0 (bit-exactness against
        # ggml is the C++ oracle tests' job).
        os.environ["TENSORMORPH_TENSORMORPHD"] = TENSORMORPHD
        iq = {"IQ2_XXS": (16, 66), "IQ2_XS": (17, 74), "IQ3_XXS": (18, 98), "IQ1_S": (19, 50),
              "IQ3_S": (21, 110), "IQ2_S": (22, 82), "IQ1_M": (29, 56)}
        with tempfile.TemporaryDirectory(prefix="tm-iq-") as tmp, tm.local() as c:
            for dtype, (ggml_type, block) in iq.items():
                with self.subTest(dtype=dtype):
                    path = Path(tmp) / f"{dtype}.gguf"
                    tiny_gguf(path, ggml_type, block)
                    info = c.tensors(str(path))
                    self.assertEqual([(t.name, t.dtype) for t in info],
                                     [("blk.0.attn_q.weight", dtype)])
                    a = c.read(str(path), "blk.0.attn_q.weight")
                    self.assertEqual(a.shape, (256,))
                    self.assertEqual(int(np.count_nonzero(a)), 0)

    def test_a_type_id_the_server_does_not_know_is_unimplemented(self) -> None:
        os.environ["TENSORMORPH_TENSORMORPHD"] = TENSORMORPHD
        with tempfile.TemporaryDirectory(prefix="tm-unknown-") as tmp, tm.local() as c:
            path = Path(tmp) / "unknown.gguf"
            tiny_gguf(path, 200, 66)
            info = c.tensors(str(path))
            self.assertEqual([t.name for t in info], ["blk.0.attn_q.weight"])
            self.assertIn("ggml type 200", info[0].dtype)
            for raw in (False, True):
                with self.subTest(raw=raw), self.assertRaises(tm.Error) as cm:
                    c.read(str(path), "blk.0.attn_q.weight", raw=raw)
                self.assertEqual(cm.exception.reason, "UNSUPPORTED_DTYPE", cm.exception.message)
                self.assertIn("ggml type 200", cm.exception.metadata["dtype"])


class SafetensorsFixturesTest(unittest.TestCase):
    def test_every_convention_reads_to_its_reference_within_one_ulp(self) -> None:
        cases = safetensors_cases()
        folders = {c[0] for c in cases}
        self.assertGreaterEqual(len(folders), 10, "fixtures missing")
        with tm.connect(ADDRESS) as c:
            for ckpt, tensor, f in cases:
                with self.subTest(checkpoint=ckpt, tensor=tensor):
                    info = {t.name: t for t in c.tensors(ckpt)}
                    self.assertIn(tensor, info)
                    a = c.read(ckpt, tensor)
                    want = expected(f)
                    self.assertEqual(a.dtype, np.float32)
                    self.assertEqual(a.shape, tuple(info[tensor].shape))
                    self.assertEqual(a.size, want.size)
                    got = a.reshape(-1)
                    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
                    d = ulps_apart(got, want)
                    d[np.isnan(want)] = 0
                    self.assertLessEqual(int(d.max(initial=0)), 1,
                                         f"worst at {int(d.argmax()) if d.size else -1}")


if __name__ == "__main__":
    unittest.main()
