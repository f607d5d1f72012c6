"""`local()`: a private tensormorphd for this process, for local files."""

from __future__ import annotations

import atexit
import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, List, Optional

import grpc

from ._client import (Client, Error, PathLike, _check_timeout, channel_options,
                      native_settings)


def find_tensormorphd() -> str:
    """$TENSORMORPH_TENSORMORPHD, else the build tree's server/tensormorphd
    (this package staged at <build>/python/tensormorph), else PATH."""
    env = os.environ.get("TENSORMORPH_TENSORMORPHD")
    if env:
        return env
    beside = Path(__file__).resolve().parent.parent.parent / "server" / "tensormorphd"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("tensormorphd")
    if found:
        return found
    raise Error("NOT_FOUND", "tensormorphd not found: set TENSORMORPH_TENSORMORPHD, "
                f"build it (expected at {beside}), or put it on PATH")


class LocalClient(Client):
    """A Client whose tensormorphd this process started; `close()` (or the
    end of a `with` block, or the interpreter's exit) stops it."""

    def __init__(self, process: "subprocess.Popen[str]", address: str, path_base: str,
                 socket_dir: Optional[str] = None, timeout: Optional[float] = None) -> None:
        channel = grpc.insecure_channel(address, options=channel_options())
        super().__init__(channel, path_base=path_base, timeout=timeout, address=address)
        self.process = process
        self.address = address
        self._socket_dir = socket_dir
        atexit.register(self.close)

    def close(self) -> None:
        """Closes the channel and stops the server (SIGTERM, then SIGKILL)."""
        super().close()
        p = self.process
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if p.stdout is not None:
            p.stdout.close()
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
        atexit.unregister(self.close)

    def __exit__(self, *exc: Any) -> None:
        self.close()


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> Optional[Callable[[], None]]:
    """A preexec_fn that has the kernel send the child SIGTERM when this
    process ends, however it ends (a killed kernel, an OOM kill): Linux's
    PR_SET_PDEATHSIG. None elsewhere, and from a thread other than the main
    one: the signal follows the *thread* that forked, and a worker thread
    that ends would take the server with it. prctl is looked up here, in
    the parent, so the child only calls it."""
    if not sys.platform.startswith("linux"):
        return None
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # libc, already loaded
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                      ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def local(root: PathLike = "/", tensormorphd: Optional[PathLike] = None,
          extra_args: Optional[List[str]] = None,
          timeout: Optional[float] = None, native: Optional[bool] = None) -> LocalClient:
    """Starts a private tensormorphd serving `root` (default "/", so any
    local file) and returns a client of it. It listens on a unix socket in a
    fresh directory only this user can enter (a server of "/" must not be
    open to other local users), or on 127.0.0.1 with a free port where the
    socket's path would be too long. Relative checkpoint paths are taken
    from the current directory. The server stops at close(), at the end of
    a `with` block, or at exit; on Linux also when this process dies
    without exiting (killed; its SIGTERM from PR_SET_PDEATHSIG), unless
    local() was called from a thread other than the main one (then only at
    close() or exit: the kernel ties the signal to the thread).
    `timeout` is the calls' deadline and `native` the read path, as
    connect()'s."""
    _check_timeout(timeout)
    exe = os.fspath(tensormorphd) if tensormorphd is not None else find_tensormorphd()
    made = tempfile.mkdtemp(prefix="tensormorph-")  # mode 0700
    socket_dir: Optional[str] = made
    sock = os.path.join(made, "tensormorphd.sock")
    if len(sock) < 100:  # sun_path holds 108 bytes
        listen = f"unix:{sock}"
    else:
        shutil.rmtree(made, ignore_errors=True)
        socket_dir, listen = None, "127.0.0.1:0"
    # At "error": a refused call is the caller's exception already, and its
    # warning line on this process's stderr said it twice.
    cmd = [exe, "--root", os.path.abspath(root), "--listen", listen,
           "--log-level", "error", *(extra_args or [])]
    try:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                             preexec_fn=_die_with_parent())
    except OSError as e:
        if socket_dir is not None:
            shutil.rmtree(socket_dir, ignore_errors=True)
        raise Error("UNAVAILABLE", f"cannot start {exe}: {e}") from None
    line = p.stdout.readline() if p.stdout else ""
    m = re.search(r"listening on (\S+):(\d+)", line)
    if not m:
        p.kill()
        p.wait()
        if socket_dir is not None:
            shutil.rmtree(socket_dir, ignore_errors=True)
        raise Error("UNAVAILABLE", f"{exe} did not start (said {line.strip()!r}, "
                    f"exit code {p.returncode})")
    address = listen if socket_dir is not None else f"{m.group(1)}:{m.group(2)}"
    c = LocalClient(p, address, path_base=os.getcwd(), socket_dir=socket_dir,
                    timeout=timeout)
    c._read_natively(native_settings(address), native)
    return c
