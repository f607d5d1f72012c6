#!/usr/bin/env python3
"""Every runnable block of README.md and docs/*.md runs as written.

The convention (also stated in docs/README.md):

  * A fenced block whose info string is `console runnable` holds commands,
    each on a line starting with `$ ` (a line ending in `\\` continues onto
    the next), each followed by the output it prints. The block's commands
    run one after another in one bash process (so `export` and `cd` carry
    over); each must exit 0, or N when the command line ends with
    `# exit N`. Every output line shown must appear in what the command
    printed (stdout or stderr), as a whole line after trailing spaces are
    dropped; a line that is only `...` is skipped, and a line ending in `...`
    only has to begin a printed line (for figures that change run to run).
  * A fenced block whose info string is `sh runnable` is a script, run whole
    by `bash -e`, which must exit 0.

Each block runs in a fresh directory laid out as the repository is after
`deploy/quickstart.sh`: `build/demo` (a fresh copy of the demo model written
by tensormorph-make-demo), `build/client/cli/tensormorph`,
`build/server/tensormorphd` and `build/deploy/demo/tensormorph-make-demo`; the
directories of the two binaries are on PATH. One tensormorphd serves another
copy of the demo for the whole run on ports the kernel picks: in a block's
text, `127.0.0.1:7431` (gRPC) and `127.0.0.1:8080` (HTTP) are replaced by
its real addresses, and $TENSORMORPH_SERVER names it, as the README's tour
exports it before its commands (a block that means the CLI's embedded mode
says `unset TENSORMORPH_SERVER`). Blocks that are not marked (samples with other paths,
deployment commands) are not run.

The README is also held to its size: at most 320 lines.

usage: runnable_blocks_test.py SOURCE_DIR --cli PATH --server PATH --make-demo PATH
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

README_MAX_LINES = 320
MIN_README_BLOCKS = 3  # the tour, the gate and the HTTP API at least
BLOCK_TIMEOUT_S = 120
GRPC_PLACEHOLDER = "127.0.0.1:7431"
HTTP_PLACEHOLDER = "127.0.0.1:8080"

FENCE = re.compile(r"^```(.*)$")
EXIT = re.compile(r"#\s*exit\s+(\d+)\s*$")


class Block:
    def __init__(self, path, line, kind, text):
        self.path, self.line, self.kind, self.text = path, line, kind, text

    def where(self):
        return f"{self.path}:{self.line}"


def extract_blocks(path, rel):
    """The runnable blocks of one Markdown file, in order."""
    blocks = []
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        info = m.group(1).split()
        start = i
        i += 1
        body = []
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence
        if len(info) == 2 and info[1] == "runnable" and info[0] in ("console", "sh"):
            blocks.append(Block(rel, start + 1, info[0], "\n".join(body)))
        elif "runnable" in info:
            raise SystemExit(f"{rel}:{start + 1}: unknown runnable block '{' '.join(info)}'")
    return blocks


class Command:
    def __init__(self, text, expected_exit, shown):
        self.text, self.expected_exit, self.shown = text, expected_exit, shown


def parse_console(text):
    """`$ command` lines and the output shown after each."""
    commands = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith("$ "):
            if commands:
                commands[-1].shown.append(line)
            elif line.strip():
                raise ValueError(f"output before the first command: {line!r}")
            i += 1
            continue
        cmd = [line[2:]]
        while cmd[-1].endswith("\\") and i + 1 < len(lines):
            i += 1
            cmd.append(lines[i])
        joined = "\n".join(cmd)
        m = EXIT.search(cmd[-1])
        commands.append(Command(joined, int(m.group(1)) if m else 0, []))
        i += 1
    return commands


def check_shown(shown, printed):
    """The shown lines missing from what was printed."""
    out = [l.rstrip() for l in printed.split("\n")]
    missing = []
    for line in shown:
        line = line.rstrip()
        if not line.strip() or line.strip() == "...":
            continue
        if line.endswith("..."):
            prefix = line[:-3].rstrip()
            if not any(o.startswith(prefix) for o in out):
                missing.append(line)
        elif line not in out:
            missing.append(line)
    return missing


def lay_out(workdir, demo_master, bins):
    """A directory as the repository is after deploy/quickstart.sh."""
    shutil.copytree(demo_master, os.path.join(workdir, "build", "demo"))
    for rel, target in bins.items():
        dst = os.path.join(workdir, "build", rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        os.symlink(target, dst)


def run_block(block, workdir, env, grpc, http):
    text = block.text.replace(GRPC_PLACEHOLDER, grpc).replace(HTTP_PLACEHOLDER, http)
    if block.kind == "sh":
        r = subprocess.run(["bash", "-e", "-c", text], cwd=workdir, env=env,
                           capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
        if r.returncode != 0:
            return [f"exit {r.returncode}, want 0\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"]
        return []
    commands = parse_console(text)
    if not commands:
        return ["a console block without a `$ ` command"]
    results = os.path.join(workdir, ".results")
    os.mkdir(results)
    script = []
    for n, c in enumerate(commands):
        script.append(f"{{\n{c.text}\n}} >{results}/{n}.out 2>{results}/{n}.err </dev/null; "
                      f"echo $? >{results}/{n}.rc")
    r = subprocess.run(["bash", "-c", "\n".join(script)], cwd=workdir, env=env,
                       capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
    failures = []
    for n, c in enumerate(commands):
        def read(ext):
            p = f"{results}/{n}.{ext}"
            return open(p, encoding="utf-8", errors="replace").read() if os.path.exists(p) else ""
        rc = read("rc").strip()
        out, err = read("out"), read("err")
        if rc != str(c.expected_exit):
            failures.append(f"$ {c.text}\n  exit {rc or '(did not run)'}, want {c.expected_exit}"
                            f"\n  stderr: {err.strip()[:2000]}\n  bash: {r.stderr.strip()[:500]}")
            continue
        missing = check_shown(c.shown, out + "\n" + err)
        if missing:
            failures.append(f"$ {c.text}\n  shown but not printed:\n    " + "\n    ".join(missing) +
                            f"\n  printed:\n{out}{err}")
    return failures


def start_server(server_bin, root, logpath):
    log = open(logpath, "w")
    proc = subprocess.Popen([server_bin, "--root", root, "--listen", "127.0.0.1:0",
                             "--http-listen", "127.0.0.1:0"], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    grpc = http = None
    while time.monotonic() < deadline:
        text = open(logpath).read()
        g = re.search(r"^tensormorphd listening on (\S+)", text, re.M)
        h = re.search(r"^tensormorphd http on http://(\S+?)/?$", text, re.M)
        if g and h:
            return proc, g.group(1), h.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("tensormorphd did not start:\n" + open(logpath).read())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("source_dir")
    ap.add_argument("--cli", required=True)
    ap.add_argument("--server", required=True)
    ap.add_argument("--make-demo", required=True)
    args = ap.parse_args()
    src = os.path.abspath(args.source_dir)
    failures = []

    readme = os.path.join(src, "README.md")
    n_lines = len(open(readme, encoding="utf-8").read().rstrip("\n").split("\n"))
    if n_lines > README_MAX_LINES:
        failures.append(f"README.md: {n_lines} lines, at most {README_MAX_LINES}: "
                        "move reference material to docs/")

    blocks = extract_blocks(readme, "README.md")
    if len(blocks) < MIN_README_BLOCKS:
        failures.append(f"README.md: {len(blocks)} runnable blocks, expected at least "
                        f"{MIN_README_BLOCKS} (were their markers dropped?)")
    for path in sorted(glob.glob(os.path.join(src, "docs", "*.md"))):
        blocks += extract_blocks(path, os.path.relpath(path, src))

    bins = {"client/cli/tensormorph": os.path.abspath(args.cli),
            "server/tensormorphd": os.path.abspath(args.server),
            "deploy/demo/tensormorph-make-demo": os.path.abspath(args.make_demo)}
    with tempfile.TemporaryDirectory(prefix="tm-docs-") as tmp:
        master = os.path.join(tmp, "demo")
        subprocess.run([args.make_demo, master], check=True, stdout=subprocess.DEVNULL)
        served = os.path.join(tmp, "served")
        shutil.copytree(master, served)
        proc, grpc, http = start_server(args.server, served, os.path.join(tmp, "server.log"))
        env = dict(os.environ)
        env["TENSORMORPH_SERVER"] = grpc
        env["PATH"] = os.pathsep.join([os.path.dirname(bins["client/cli/tensormorph"]),
                                       os.path.dirname(bins["server/tensormorphd"]),
                                       env.get("PATH", "/usr/bin:/bin")])
        try:
            for n, block in enumerate(blocks):
                workdir = os.path.join(tmp, f"block-{n}")
                os.mkdir(workdir)
                lay_out(workdir, master, bins)
                try:
                    errs = run_block(block, workdir, env, grpc, http)
                except subprocess.TimeoutExpired:
                    errs = [f"did not finish within {BLOCK_TIMEOUT_S} s"]
                status = "ok" if not errs else "FAILED"
                print(f"[{status}] {block.where()} ({block.kind})")
                failures += [f"{block.where()}: {e}" for e in errs]
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    print(f"{len(blocks)} runnable blocks; README.md {n_lines} lines")
    if failures:
        print("\n\n".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
