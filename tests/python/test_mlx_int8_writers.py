"""The Python client reads the checkpoints of the numpy fixture writers
(tests/python/writers: MLX, bitsandbytes LLM.int8) bit for bit as the
writers' own references, remote (a tensormorphd on a loopback port) and
local (tm.local()), and inspects their scalars.

Run by ctest (the python_client entry) with PYTHONPATH=<build>/python and
TENSORMORPH_TENSORMORPHD, the server.
"""

from __future__ import annotations

import os
import sys
import tempfile
import unittest
from pathlib import Path

import numpy as np

import tensormorph as tm
from live_server import LiveServer

sys.path.insert(0, str(Path(__file__).resolve().parent / "writers"))
import bnb_int8_writer  # noqa: E402
import mlx_writer  # noqa: E402

TENSORMORPHD = os.environ["TENSORMORPH_TENSORMORPHD"]


class WrittenCheckpoints(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls._tmp = tempfile.TemporaryDirectory(prefix="tm-writers-")
        cls.root = Path(cls._tmp.name)
        for name, writer in (("mlx", mlx_writer), ("bnb", bnb_int8_writer)):
            argv, sys.argv = sys.argv, ["writer", str(cls.root / name)]
            try:
                writer.main()
            finally:
                sys.argv = argv
        cls.server = LiveServer(TENSORMORPHD, str(cls.root))

    @classmethod
    def tearDownClass(cls) -> None:
        cls.server.stop()
        cls._tmp.cleanup()

    def cases(self, name: str):
        index = (self.root / name / "expected" / "index.txt").read_text()
        for line in index.splitlines():
            tensor = line.split(" ")[0]
            yield tensor, np.load(self.root / name / "expected" / (tensor + ".npy"))

    def test_reads_equal_the_writers_references_bit_for_bit(self) -> None:
        with tm.connect(self.server.address) as remote, tm.local() as local:
            for name, convention in (("mlx", "mlx"), ("bnb", "bitsandbytes")):
                info = {t.name: t for t in remote.tensors(f"{name}/model")}
                for tensor, want in self.cases(name):
                    with self.subTest(checkpoint=name, tensor=tensor):
                        self.assertEqual(info[tensor].encoding["convention"], convention)
                        for got in (remote.read(f"{name}/model", tensor),
                                    local.read(str(self.root / name / "model"), tensor)):
                            self.assertEqual(got.shape, want.shape)
                            np.testing.assert_array_equal(got.view(np.uint32),
                                                          want.view(np.uint32))

    def test_scalars_name_the_groups_parameters(self) -> None:
        with tm.connect(self.server.address) as c:
            t = "model.layers.0.self_attn.q_proj.weight"
            want = np.load(self.root / "mlx" / "expected" / (t + ".npy"))
            s = c.scalars("mlx/model", t, [(1, 70)])[0]
            self.assertEqual(np.float32(s["value"]).view(np.uint32),
                             want[1, 70].view(np.uint32))
            names = [p["name"] for p in s["params"]]
            self.assertEqual(names, ["scale", "bias"])
            self.assertEqual(s["group"], 1 * 2 + 1)  # [8, 128] in groups of 64


if __name__ == "__main__":
    unittest.main()
