"""The Python client's read beside the CLI's, on the same server, same run.

Writes a 256 MiB F32 safetensors tensor, starts a tensormorphd serving it on
loopback, and times, alternating:
  - `tensormorph --server H read big.safetensors big -o /dev/null`
    (process start and connection included: what a user types), and the
    same writing the .npy into tmpfs (memory filled, as Python's array is);
  - `tm.connect(H).read("big.safetensors", "big")` in this process
    (connection included) on each read path: the default (the C++ client,
    tensormorph._native, when the build staged it) and grpcio's
    (`native=False`); and `c.tensor(...)[:]` on the default path;
  - grpcio's bare ReadSlice stream on the client's channel, each reply
    taken as bytes and dropped: the ceiling of any Python client on it;
  - a fresh 256 MiB numpy array written once, no read: what any read into
    a new array pays on top of the stream (the kernel zeroing its pages).
A round runs every path once, back to back, in an order shuffled per
round (no path always follows the same one); GB/s are medians over the
rounds, and each ratio is the median over rounds of that round's ratio (a
path against the CLI a second or two apart, so the load of the moment
largely cancels out), printed with its quartiles. Two ratios: against
`-o /dev/null`, the one issue 33 asks >= 0.8 of, and against the CLI
writing the same bytes into memory, which is the same work as filling an
array. Beside them the client's CPU seconds per GB, which a busy machine
changes least.

  PYTHONPATH=build/python python3 tests/bench/python_read_bench.py \
      --tensormorphd build/server/tensormorphd --cli build/client/cli/tensormorph
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Tuple

import numpy as np

import tensormorph as tm
import tensormorph.v1.tensormorph_pb2  # noqa: F401  (tm.v1 below)

BYTES = 256 << 20
#: Issue 33's ratio: the Python client's read against the CLI's -o /dev/null.
TARGET = 0.8


def write_big(path: str) -> None:
    n = BYTES // 4
    header = json.dumps({"big": {"dtype": "F32", "shape": [n // 4096, 4096],
                                 "data_offsets": [0, BYTES]}}).encode()
    header += b" " * (-len(header) % 8)
    rng = np.random.default_rng(1)
    with open(path, "wb") as f:
        f.write(len(header).to_bytes(8, "little"))
        f.write(header)
        for _ in range(16):
            f.write(rng.standard_normal(n // 16, dtype=np.float32).tobytes())


def cpu_seconds() -> float:
    """This process's CPU time and that of its finished children (the CLI
    runs; the server is not waited for until the end)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def process_cpu_seconds(pid: int) -> float:
    """A running process's CPU time so far (utime + stime, /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(run: Callable[[], None], cpu: List[float], server_cpu: List[float], server: int,
          after: Callable[[], None] = lambda: None) -> float:
    """The wall time of one run; appends the client's CPU seconds to
    `cpu` and the server's (process `server`) to `server_cpu`; `after`
    runs after it, untimed."""
    c0, s0, t0 = cpu_seconds(), process_cpu_seconds(server), time.perf_counter()
    run()
    wall = time.perf_counter() - t0
    cpu.append(cpu_seconds() - c0)
    server_cpu.append(process_cpu_seconds(server) - s0)
    after()
    return wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tensormorphd", default="build/server/tensormorphd")
    ap.add_argument("--cli", default="build/client/cli/tensormorph")
    ap.add_argument("--rounds", type=int, default=9,
                    help="rounds of one run of every path (more on a busy machine)")
    args = ap.parse_args()
    load_before = os.getloadavg()[0]
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(prefix="tm-pybench-", dir=base) as root:
        write_big(os.path.join(root, "big.safetensors"))
        server = subprocess.Popen([args.tensormorphd, "--root", root, "--listen",
                                   "127.0.0.1:0", "--log-level", "error"],
                                  stdout=subprocess.PIPE, text=True)
        try:
            m = re.search(r"listening on (\S+):(\d+)", server.stdout.readline())
            if not m:
                print("tensormorphd did not start", file=sys.stderr)
                return 1
            address = f"127.0.0.1:{m.group(2)}"
            with tm.connect(address) as c:
                default_path = c.read_path  # "native" when the build staged it

            def cli() -> None:
                subprocess.run([args.cli, "--server", address, "read", "big.safetensors",
                                "big", "-o", "/dev/null"], check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

            # The CLI writing the .npy into memory (tmpfs), as a Python
            # read fills an array: both pay for 256 MiB of fresh pages,
            # which /dev/null spares the CLI.
            npy = os.path.join(root, "big.npy")

            def cli_memory() -> None:
                subprocess.run([args.cli, "--server", address, "read", "big.safetensors",
                                "big", "-o", npy], check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

            def python_read() -> None:
                with tm.connect(address) as c:
                    a = c.read("big.safetensors", "big")
                    assert a.nbytes == BYTES

            def grpcio_read() -> None:
                with tm.connect(address, native=False) as c:
                    a = c.read("big.safetensors", "big")
                    assert a.nbytes == BYTES

            def python_index() -> None:
                with tm.connect(address) as c:
                    a = c.tensor("big.safetensors", "big")[:]
                    assert a.nbytes == BYTES

            def bare_stream() -> None:
                with tm.connect(address) as c:
                    stream = c._backends[0].raw_streams["ReadSlice"]
                    req = tm.v1.tensormorph_pb2.ReadSliceRequest(
                        checkpoint="big.safetensors", tensor="big")
                    assert sum(len(m) for m in stream(req)) > BYTES

            def fresh_array() -> None:
                np.empty(BYTES, np.uint8).fill(1)

            python_read()  # warm the page cache and the server's open
            runs = {"cli": cli, "cli_memory": cli_memory, "read": python_read,
                    "grpcio": grpcio_read, "index": python_index, "bare": bare_stream,
                    "fresh": fresh_array}
            rounds: dict = {k: [] for k in runs}
            cpu: dict = {k: [] for k in runs}
            server_cpu: dict = {k: [] for k in runs}
            order = list(runs)
            shuffle = random.Random().shuffle  # a new order each run, too
            for _ in range(args.rounds):
                shuffle(order)
                for k in order:
                    run = runs[k]
                    rounds[k].append(timed(run, cpu[k], server_cpu[k], server.pid,
                                           lambda: os.path.exists(npy) and os.unlink(npy)))
        finally:
            server.terminate()
            server.wait()
    report(rounds, cpu, server_cpu, args.rounds, (load_before, os.getloadavg()[0]),
           default_path)
    return 0


def report(rounds: Dict[str, List[float]], cpu: Dict[str, List[float]],
           server_cpu: Dict[str, List[float]], n: int, load: Tuple[float, float],
           default_path: str) -> None:
    """Prints GB/s (median round), the per-round ratios to both CLI runs
    (median and quartiles), the client's CPU seconds per GB (median run,
    and the least: the path's own cost, with the least of a busy machine's
    steal in it) and the server's (median run); then the verdict on issue
    33's ratio for the default read path (`default_path`) and how far the
    client's CPU is above grpcio's floor: its bare stream plus a fresh
    array, with nothing copied into it."""
    gb = BYTES / 1e9
    gbs = {k: gb / statistics.median(v) for k, v in rounds.items()}
    cpu_gb = {k: statistics.median(v) / gb for k, v in cpu.items()}
    cpu_min = {k: min(v) / gb for k, v in cpu.items()}
    server_gb = {k: statistics.median(v) / gb for k, v in server_cpu.items()}

    def ratios(k: str, base: str) -> List[float]:
        return [b / a for a, b in zip(rounds[k], rounds[base])]

    def ratio(k: str, base: str) -> str:
        r = ratios(k, base)
        q = statistics.quantiles(r, n=4) if len(r) > 1 else [r[0]] * 3
        return f"{q[1]:.2f}x ({q[0]:.2f}-{q[2]:.2f})"

    print(f"256 MiB F32 over loopback, {n} rounds, load average {load[0]:.1f} -> "
          f"{load[1]:.1f}; ratios per round: median (quartiles)")
    print(f"  {'':32s} {'GB/s':>6s}  {'x /dev/null':>19s}  {'x tmpfs':>19s}  "
          f"{'CPU s/GB (least)':>16s}  {'server':>6s}")
    rows = [("cli", "tensormorph read -o /dev/null"),
            ("cli_memory", "tensormorph read -o tmpfs.npy"),
            ("read", f"Client.read ({default_path})"),
            ("grpcio", "Client.read (grpcio)"),
            ("index", f"Client.tensor(...)[:] ({default_path})"),
            ("bare", "grpcio bare stream (no array)")]
    for k, label in rows:
        print(f"  {label:32s} {gbs[k]:6.2f}  {ratio(k, 'cli'):>19s}  "
              f"{ratio(k, 'cli_memory'):>19s}  {cpu_gb[k]:8.2f} ({cpu_min[k]:.2f})  "
              f"{server_gb[k]:6.2f}")
    print(f"  {'a fresh 256 MiB array, written':32s} {gbs['fresh']:6.2f}  {'':19s}  {'':19s}  "
          f"{cpu_gb['fresh']:8.2f} ({cpu_min['fresh']:.2f})")
    floor = cpu_min["bare"] + cpu_min["fresh"]
    for k, label in (("read", "Client.read"), ("index", "Client.tensor(...)[:]")):
        r = statistics.median(ratios(k, "cli"))
        print(f"issue 33 target, {label} ({default_path}) >= {TARGET}x the CLI's -o /dev/null: "
              f"{r:.2f}x, {'met' if r >= TARGET else 'not met'}; least CPU "
              f"{cpu_min[k]:.2f} s/GB, floor {floor:.2f} (bare stream + fresh array)")


if __name__ == "__main__":
    sys.exit(main())
