"""A real tensormorphd on a free loopback port, for the Python client's tests."""

import os
import re
import signal
import subprocess
from typing import Sequence


class LiveServer:
    """Starts `tensormorphd --root ROOT --listen 127.0.0.1:0 [ARGS...]` and
    reads its port from the line it prints; `stop()` ends it, `kill()`
    crashes it (SIGKILL), `pause()` stops it (SIGSTOP: the port still
    accepts connections, nothing answers) until `resume()`."""

    def __init__(self, tensormorphd: str, root: str, args: Sequence[str] = ()) -> None:
        self._process = subprocess.Popen(
            [tensormorphd, "--root", root, "--listen", "127.0.0.1:0",
             "--log-level", "error", *args], stdout=subprocess.PIPE, text=True)
        line = self._process.stdout.readline()
        m = re.search(r"listening on (\S+):(\d+)", line)
        if not m:
            self.stop()
            raise RuntimeError(f"tensormorphd did not start: it said {line!r}")
        self.port = int(m.group(2))
        self.address = f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self._process.pid

    def pause(self) -> None:
        os.kill(self._process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self._process.poll() is None:
            os.kill(self._process.pid, signal.SIGCONT)

    def kill(self) -> None:
        self._process.kill()
        self._process.wait(timeout=30)

    def stop(self) -> None:
        if self._process.poll() is None:
            self._process.terminate()
        self._process.wait(timeout=30)
        self._process.stdout.close()
