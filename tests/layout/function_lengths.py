#!/usr/bin/env python3
"""The function-length report: no function over 120 lines without a reason.

usage: function_lengths.py [SOURCE_DIR] [--allowlist FILE] [--limit N]

Prints every function of the product's C++ (core/, proto/, render/,
server/, client/, deploy/; not tests/) longer than --limit lines (120), from
the first line of its signature to its closing brace, longest first, and
fails on any that tests/layout/long_functions.txt does not list with a
reason. DESIGN.md accepts two reasons, parsers and rule tables; any other
entry is a debt, printed as such, to be shortened. An entry whose function
is gone or no longer over the limit fails too, so the list only shrinks.

The scan is a lexer, not a compiler: comments, string, raw string and
character literals (and digit separators) are blanked, preprocessor lines
skipped; then braces are matched, and a brace at namespace or class scope
whose head ends like a parameter list (`) const`, `) override`, `-> T`, a
constructor's `) : a_(x)`) opens a function. A lambda counts as part of the
function it is written in.
"""

import argparse
import os
import re
import subprocess
import sys

ROOTS = ("core/", "proto/", "render/", "server/", "client/", "deploy/")
EXTS = (".cc", ".h", ".cpp", ".hpp")
LIMIT = 120
# Reasons DESIGN.md accepts for a long function: anything else is a debt.
ACCEPTED = ("parser:", "rule table:")


def blank_literals(text):
    """`text` with comments, literals and preprocessor lines replaced by
    spaces (newlines kept, so line numbers hold)."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if line_start and c == "#":
            # A preprocessor line, with its continuations.
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        line_start = False
        if c == "\n":
            line_start = True
            out.append(c)
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"' or (c == "R" and text.startswith('R"', i) and
                          not _ident_before(text, i)):
            j = _string_end(text, i)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'":
            if _digit_separator(text, i):
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != "'":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(" " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _ident_before(text, i):
    return i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_") and \
        not re.search(r"(?:^|\W)(?:u8|u|U|L)$", text[max(0, i - 3):i])


def _string_end(text, i):
    """The index past the string literal (raw or not) that starts at i."""
    if text[i] == "R":
        m = re.compile(r'R"([^()\\ ]{0,16})\(').match(text, i)
        if m:
            end = text.find(")" + m.group(1) + '"', m.end())
            return len(text) if end < 0 else end + len(m.group(1)) + 2
        i += 1
    j = i + 1
    while j < len(text) and text[j] not in '"\n':
        j += 2 if text[j] == "\\" else 1
    return min(j + 1, len(text))


def _digit_separator(text, i):
    """A ' between digits of a number (1'000), not a character literal."""
    m = re.search(r"[\w.]+$", text[max(0, i - 40):i])
    return bool(m) and m.group(0)[0].isdigit()


FUNCTION_HEAD = re.compile(
    r"\)\s*(?:const|volatile|noexcept(?:\([^)]*\))?|override|final|mutable|"
    r"&&?|\s)*(?:->[^;{}]*)?$")
CTOR_INIT = re.compile(r"\)\s*(?:noexcept\s*)?:(?!:)")
CLASS_HEAD = re.compile(r"\b(?:class|struct|union)\b")
NAMESPACE_HEAD = re.compile(r"\bnamespace\b|\bextern\s*$")
CLASS_NAME = re.compile(
    r"\b(?:class|struct|union)\s+(?:alignas\s*\([^)]*\)\s*|\[\[[^\]]*\]\]\s*)*"
    r"([A-Za-z_]\w*)")
TEST_MACRO = re.compile(r"(?:TYPED_)?TEST(?:_[FP])?|BENCHMARK\w*")
NAME = re.compile(r"(~?[A-Za-z_][\w:~]*(?:\s*<[^()]*>)?|operator\s*\S+)\s*$")


def function_name(head):
    """The name in a function's head: the qualified identifier before its
    parameter list (with a test macro's arguments: TEST(Suite, Name))."""
    # Attributes come first and look like calls: skip them.
    head = re.sub(r"^\s*(?:\[\[[^\]]*\]\]\s*|__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\)\s*)+",
                  "", head)
    depth = 0
    for k, ch in enumerate(head):
        if ch in "<":
            depth += 1
        elif ch in ">" and depth:
            depth -= 1
        elif ch == "(" and depth == 0:
            m = NAME.search(head[:k])
            if not m:
                continue
            name = re.sub(r"\s+", "", m.group(1))
            if TEST_MACRO.fullmatch(name):
                close = head.find(")", k)
                name += re.sub(r"\s+", " ", head[k:close + 1])
            return name
    return "(lambda)" if "[" in head else "(unnamed)"


def scan(text):
    """(name, first line, last line) of every function in C++ `text`."""
    code = blank_literals(text)
    found = []
    # Scopes: 'ns' (namespace or file), 'class', 'fn', 'init' (an
    # initializer or enum body at ns/class scope, part of a head).
    stack = [("ns", 0, "", 0)]
    head, head_line = [], None
    line = 1
    for ch in code:
        if ch == "\n":
            line += 1
        kind = stack[-1][0]
        if kind in ("ns", "class", "init"):
            if ch == "{":
                h = "".join(head).strip()
                if kind == "init":
                    stack.append(("init", line, "", 0))
                elif NAMESPACE_HEAD.search(h):
                    stack.append(("ns", line, "", 0))
                    head, head_line = [], None
                elif FUNCTION_HEAD.search(h) or (CTOR_INIT.search(h) and
                                                 h.endswith((")", "}"))):
                    owner = "".join(f"{s[2]}::" for s in stack
                                    if s[0] == "class" and s[2])
                    stack.append(("fn", head_line or line, (owner, h), 0))
                    head, head_line = [], None
                elif CLASS_HEAD.search(h) and "=" not in h:
                    m = CLASS_NAME.search(h)
                    stack.append(("class", line, m.group(1) if m else "", 0))
                    head, head_line = [], None
                else:
                    stack.append(("init", line, "", 0))
                    head.append(ch)
                continue
            if ch == "}":
                popped = stack.pop() if len(stack) > 1 else stack[0]
                if popped[0] == "init":
                    head.append(ch)
                else:
                    head, head_line = [], None
                continue
            if kind != "init":
                if ch == ";":
                    head, head_line = [], None
                    continue
                if head_line is None and not ch.isspace():
                    head_line = line
                head.append(ch)
            else:
                head.append(ch)
            continue
        # Inside a function: only the braces matter.
        if ch == "{":
            stack[-1] = stack[-1][:3] + (stack[-1][3] + 1,)
        elif ch == "}":
            if stack[-1][3] > 0:
                stack[-1] = stack[-1][:3] + (stack[-1][3] - 1,)
            else:
                _, first, (owner, h), _ = stack.pop()
                found.append((owner + function_name(h), first, line))
                head, head_line = [], None
    return found


def product_files(src):
    try:
        out = subprocess.run(["git", "-C", src, "ls-files", "-z"], check=True,
                             capture_output=True).stdout.decode()
        files = [f for f in out.split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for root, dirs, names in os.walk(src):
            rel = os.path.relpath(root, src)
            dirs[:] = [d for d in dirs if d != ".git" and
                       not (rel == "." and d.startswith("build"))]
            files += [os.path.normpath(os.path.join(rel, n)) for n in names]
    return sorted(f for f in files if f.startswith(ROOTS) and f.endswith(EXTS))


def read_allowlist(path):
    """{(file, function): reason} from lines 'file function  reason'."""
    entries = {}
    with open(path, encoding="utf-8") as f:
        for lineno, raw in enumerate(f, 1):
            text = raw.strip()
            if not text or text.startswith("#"):
                continue
            parts = text.split(None, 2)
            if len(parts) < 3:
                raise SystemExit(f"{path}:{lineno}: want 'FILE FUNCTION REASON'")
            entries[(parts[0], parts[1])] = parts[2]
    return entries


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", nargs="?", default=os.path.join(here, "..", ".."))
    ap.add_argument("--allowlist", default=os.path.join(here, "long_functions.txt"))
    ap.add_argument("--limit", type=int, default=LIMIT)
    args = ap.parse_args(argv[1:])
    src = os.path.abspath(args.src)
    allow = read_allowlist(args.allowlist)

    long_ones = []
    for path in product_files(src):
        with open(os.path.join(src, path), encoding="utf-8",
                  errors="replace") as f:
            for name, first, last in scan(f.read()):
                n = last - first + 1
                if n > args.limit:
                    long_ones.append((n, path, first, name))
    long_ones.sort(key=lambda t: (-t[0], t[1], t[2]))

    failures, debts = [], []
    print(f"functions over {args.limit} lines (first line of the signature "
          "to the closing brace):")
    seen = set()
    for n, path, first, name in long_ones:
        key = (path, name)
        seen.add(key)
        reason = allow.get(key)
        if reason is None:
            mark = "FAIL"
            failures.append(f"{path}:{first}: {name} is {n} lines (> "
                            f"{args.limit}): shorten it, or list it in "
                            f"{os.path.relpath(args.allowlist, src)} with a "
                            "reason (parsers and rule tables)")
        elif reason.startswith(ACCEPTED):
            mark = "ok  "
        else:
            mark = "DEBT"
            debts.append(key)
        print(f"  {mark} {n:5d}  {path}:{first}  {name}"
              + (f"  -- {reason}" if reason else ""))
    for key, reason in sorted(allow.items()):
        if key not in seen:
            failures.append(f"{os.path.relpath(args.allowlist, src)}: "
                            f"{key[0]} {key[1]} is no longer over "
                            f"{args.limit} lines (or gone): remove its entry")
    for f in failures:
        print(f"FAIL {f}")
    accepted = len(long_ones) - len(debts) - sum(
        1 for _, path, _, name in long_ones if (path, name) not in allow)
    print(f"function_lengths: {len(long_ones)} over {args.limit} lines: "
          f"{accepted} with an accepted reason, {len(debts)} debts to "
          f"shorten; {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
