"""The Python client reads the checkpoints the numpy writers in
tests/python/writers/ produce (NVIDIA ModelOpt, HQQ) bit for bit as each
writer's own reference dequantization, through a live server and through
tm.local().

Run by ctest (the python_client entry) with PYTHONPATH=<build>/python and
TENSORMORPH_TENSORMORPHD set, as test_fixtures.py is.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import numpy as np

import tensormorph as tm
from live_server import LiveServer

TENSORMORPHD = os.environ["TENSORMORPH_TENSORMORPHD"]
WRITERS = Path(__file__).resolve().parent / "writers"

_tmp: tempfile.TemporaryDirectory
_server: LiveServer


def setUpModule() -> None:
    global _tmp, _server
    _tmp = tempfile.TemporaryDirectory()
    for writer in ("modelopt.py", "hqq.py"):
        subprocess.run([sys.executable, "-B", str(WRITERS / writer), _tmp.name],
                       check=True)
    _server = LiveServer(TENSORMORPHD, _tmp.name)


def tearDownModule() -> None:
    _server.stop()
    _tmp.cleanup()


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype="<f4").reshape(-1).view(np.uint32)


def cases():
    root = Path(_tmp.name)
    for ref in sorted(root.glob("*/ref/*.npy")):
        yield ref.parent.parent.name, ref.name[:-len(".npy")], ref


class QuantWritersTest(unittest.TestCase):
    def test_every_logical_tensor_reads_as_its_reference(self) -> None:
        seen = set()
        with tm.connect(_server.address) as c:
            for ckpt, tensor, ref in cases():
                with self.subTest(checkpoint=ckpt, tensor=tensor):
                    want = np.load(ref)
                    got = c.read(ckpt, tensor)
                    self.assertEqual(got.shape, want.shape)
                    np.testing.assert_array_equal(bits(got), bits(want))
                    seen.add(ckpt)
        self.assertIn("mixed_precision", seen)
        self.assertIn("w4a8_awq", seen)
        self.assertIn("nvfp4_sharded", seen)
        self.assertIn("hqq_mixed_bits", seen)

    def test_local_reads_agree(self) -> None:
        with tm.local(_tmp.name, tensormorphd=TENSORMORPHD) as c:
            for ckpt, tensor, ref in cases():
                if ckpt not in ("nvfp4", "hqq_4bit_g64"):
                    continue
                with self.subTest(checkpoint=ckpt, tensor=tensor):
                    got = c.read(os.path.join(_tmp.name, ckpt), tensor)
                    np.testing.assert_array_equal(bits(got), bits(np.load(ref)))


if __name__ == "__main__":
    unittest.main()
