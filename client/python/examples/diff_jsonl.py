#!/usr/bin/env python3
"""diff_jsonl.py: per-tensor quantization metrics as JSON lines, one step.

    diff_jsonl.py QUANT SOURCE --step N [-o metrics.jsonl] [--server HOST:PORT]

Appends one JSON object per tensor ({"step", "tensor", "scheme", "sqnr_db",
"max_err_steps", "p99_err_steps", "clipped", "induced_zeros", "flagged"})
to the output (stdout by default): what a training loop calls after each
checkpoint for any dashboard that ingests JSON lines. Infinite SQNR (an
exact tensor) is written as null, since JSON has no infinity.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any, Dict, Optional, Sequence, TextIO

import tensormorph as tm

FIELDS = ("scheme", "sqnr_db", "max_err_steps", "p99_err_steps", "clipped",
          "induced_zeros", "flagged")


def finite_or_none(v: Any) -> Any:
    return None if isinstance(v, float) and not math.isfinite(v) else v


def log_step(c: tm.Client, quant: str, source: str, step: int, out: TextIO,
             fail_on: Optional[Sequence[str]] = None) -> int:
    """Writes one line per tensor of the diff; returns how many."""
    n = 0
    for ev in c.diff(quant, source, fail_on=fail_on, top_k=0, worst_groups=0):
        if ev["event"] != "tensor":
            continue
        row: Dict[str, Any] = {"step": step, "tensor": ev["name"]}
        row.update({k: finite_or_none(ev[k]) for k in FIELDS})
        out.write(json.dumps(row, allow_nan=False) + "\n")
        n += 1
    return n


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("quant")
    ap.add_argument("source")
    ap.add_argument("--step", type=int, required=True, help="the training step to log")
    ap.add_argument("-o", "--output", help="append to this file (default stdout)")
    ap.add_argument("--server", help="a tensormorphd HOST:PORT (default: a private one)")
    ap.add_argument("--fail-on", action="append", default=[], help='a gate, e.g. "sqnr_db<25"')
    args = ap.parse_args(argv)
    c = tm.connect(args.server) if args.server else tm.local()
    out = open(args.output, "a", encoding="utf-8") if args.output else sys.stdout
    try:
        log_step(c, args.quant, args.source, args.step, out, args.fail_on)
    except tm.Error as e:
        print(f"diff_jsonl: {e.code}: {e.message}", file=sys.stderr)
        return 2
    finally:
        c.close()
        if out is not sys.stdout:
            out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
