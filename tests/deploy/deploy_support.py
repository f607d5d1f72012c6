"""What the deploy tests share: where the sources and the built binaries are,
the flags the binaries accept (read from their --help), a parse of
deploy/Dockerfile, and a tensormorphd started with a given command line.

The binaries come from CMake (tests/CMakeLists.txt) through the environment:
TENSORMORPH_TENSORMORPHD, TENSORMORPH_CLI and TENSORMORPH_SOURCE_DIR."""

import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile

SOURCE_DIR = os.environ.get(
    "TENSORMORPH_SOURCE_DIR",
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TENSORMORPHD = os.environ.get("TENSORMORPH_TENSORMORPHD", "")
CLI = os.environ.get("TENSORMORPH_CLI", "")



def source(*parts):
    return os.path.join(SOURCE_DIR, *parts)


def read(*parts):
    with open(source(*parts), encoding="utf-8") as f:
        return f.read()


_OPTION_LINE = re.compile(r"^\s+(?:-\w,)?(--[a-z0-9][a-z0-9-]*)( [A-Z])?")


def help_options(argv):
    """{flag: takes_a_value} from CLI11's --help of `argv`."""
    out = subprocess.run(argv + ["--help"], capture_output=True, text=True,
                         check=True).stdout
    options = {}
    for line in out.splitlines():
        m = _OPTION_LINE.match(line)
        if m:
            options[m.group(1)] = m.group(2) is not None
    return options


@functools.lru_cache(maxsize=None)
def server_options():
    return help_options([TENSORMORPHD])


@functools.lru_cache(maxsize=None)
def cli_options(command=None):
    """The global options (command None) or one command's own."""
    return help_options([CLI] + ([command] if command else []))


@functools.lru_cache(maxsize=None)
def cli_commands():
    out = subprocess.run([CLI, "--help"], capture_output=True, text=True,
                         check=True).stdout
    commands = out.split("Subcommands:", 1)[1]
    return {m.group(1) for m in re.finditer(r"^\s+([a-z][a-z-]*)\s", commands,
                                            re.M)}


def flags_of(args):
    """The --flags among `args`, "--flag=value" counted as --flag."""
    return [a.split("=", 1)[0] for a in args if a.startswith("--")]


def flag_values(args, flag):
    """Every value `flag` is given in `args` ("--f v" or "--f=v")."""
    values = []
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            values.append(args[i + 1])
        elif a.startswith(flag + "="):
            values.append(a.split("=", 1)[1])
    return values


def port_of(address):
    return int(address.rsplit(":", 1)[1])


def cli_invocations(script):
    """Each `tensormorph ...` command in a shell script, as (global flags and
    values, command, command's arguments): the words up to the end of the
    command (;, &&, ||, a pipe or a redirection)."""
    lexer = shlex.shlex(script, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words = list(lexer)
    ends = {";", "&&", "||", "|", ">", ">>", "&"}
    globals_ = cli_options()
    found = []
    i = 0
    while i < len(words):
        if os.path.basename(words[i]) != "tensormorph":
            i += 1
            continue
        j = i + 1
        before = []
        while j < len(words) and words[j].startswith("--"):
            before.append(words[j])
            takes_value = globals_.get(words[j].split("=", 1)[0], False)
            if takes_value and "=" not in words[j]:
                before.append(words[j + 1])
                j += 1
            j += 1
        command = words[j] if j < len(words) else None
        k = j + 1
        while k < len(words) and words[k] not in ends:
            k += 1
        found.append((before, command, words[j + 1:k]))
        i = k
    return found


class Dockerfile:
    """deploy/Dockerfile as instructions: (stage index, KEYWORD, text), line
    continuations joined and comments dropped."""

    def __init__(self, text):
        self.text = text
        self.instructions = []
        stage = -1
        logical = ""
        for line in text.splitlines():
            stripped = line.strip()
            if stripped.startswith("#"):
                continue
            logical += (" " if logical else "") + stripped
            if logical.endswith("\\"):
                logical = logical[:-1].rstrip()
                continue
            if logical:
                keyword, _, rest = logical.partition(" ")
                keyword = keyword.upper()
                if keyword == "FROM":
                    stage += 1
                self.instructions.append((stage, keyword, rest.strip()))
            logical = ""

    def all(self, keyword, stage=None):
        return [rest for s, k, rest in self.instructions
                if k == keyword and (stage is None or s == stage)]

    def last_stage(self):
        return max(s for s, _, _ in self.instructions)

    def documented_tag(self):
        """The tag the header's `docker build ... -t TAG .` gives."""
        m = re.search(r"^#\s+docker build .*-t (\S+)", self.text, re.M)
        return m.group(1) if m else None


def exec_form(text):
    """A JSON-array instruction argument (ENTRYPOINT ["a", "b"]) as a list."""
    return json.loads(text)


def project_version():
    m = re.search(r"project\(tensormorph VERSION (\S+)", read("CMakeLists.txt"))
    return m.group(1)


class RunningServer:
    """tensormorphd run with `args` (a deployment's own command line, its
    listen port swapped for 0, its roots for an empty directory, its token
    file and cache directory for ones of its own), so the test learns the
    server accepts that exact command line; `address` is where it listens."""

    def __init__(self, args):
        self.root = tempfile.mkdtemp(prefix="tm-deploy-")
        self.scratch = tempfile.mkdtemp(prefix="tm-deploy-scratch-")
        self.process = subprocess.Popen(
            [TENSORMORPHD] + localized(args, self.root, self.scratch) +
            ["--log-level", "error"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.process.stdout.readline()
        m = re.search(r"listening on (\S+):(\d+)", line)
        if not m:
            err = self.stop()
            raise AssertionError(
                f"tensormorphd {shlex.join(args)} did not start: {line!r} "
                f"{err!r}")
        self.address = f"127.0.0.1:{m.group(2)}"

    def stop(self):
        self.process.terminate()
        _, err = self.process.communicate(timeout=30)
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.rmtree(self.scratch, ignore_errors=True)
        return err


def localized(args, root, scratch):
    """`args` with every --listen/--http-listen on a free loopback port,
    every --root at `root` (and every --backing ROOT=URL backing `root`
    instead), and --token-file (a Secret's mount in a pod) and --cache-dir
    (a pod's volume) in `scratch`."""
    tokens = os.path.join(scratch, "tokens")
    with open(tokens, "w", encoding="utf-8") as f:
        f.write("deploy-test-token\n")
    cache = os.path.join(scratch, "cache")
    os.makedirs(cache, exist_ok=True)
    out = []
    i = 0
    while i < len(args):
        a = args[i]
        name = a.split("=", 1)[0]
        if name == "--backing":
            value = a.split("=", 1)[1] if a.startswith("--backing=") else (
                args[i + 1] if i + 1 < len(args) else "")
            url = value[value.index("=") + 1:] if "=" in value else value
            out += ["--backing", f"{root}={url}"]
            i += 1 if a.startswith("--backing=") else 2
            continue
        swap = {"--listen": "127.0.0.1:0", "--http-listen": "127.0.0.1:0",
                "--root": root, "--token-file": tokens,
                "--cache-dir": cache}.get(name)
        if swap is None:
            out.append(a)
        elif "=" in a:
            out.append(f"{name}={swap}")
        else:
            out += [a, swap]
            i += 1
        i += 1
    return out
