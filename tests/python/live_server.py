"""A real tensormorphd on a free loopback port, for the Python client's tests."""

import os
import re
import signal
import subprocess
import time
from typing import Sequence, Tuple

#: Whether the build staged tensormorph._native (ctest says so; a sanitizer
#: build does not): tests then require it (native=True), so a module that
#: stopped building fails them instead of passing on grpcio.
NATIVE_BUILT = os.environ.get("TENSORMORPH_PYTHON_NATIVE", "ON") == "ON"
#: The read paths to test, as connect()'s `native`.
READ_PATHS: Tuple[bool, ...] = (True, False) if NATIVE_BUILT else (False,)


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
        """SIGSTOP, returning once every thread of the server is stopped: the
        signal is delivered asynchronously, and a call made in between could
        still be answered."""
        os.kill(self._process.pid, signal.SIGSTOP)
        task_dir = f"/proc/{self._process.pid}/task"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            states = []
            for tid in os.listdir(task_dir):
                try:
                    with open(f"{task_dir}/{tid}/stat") as f:
                        states.append(f.read().rsplit(")", 1)[1].split()[0])
                except OSError:
                    continue  # a thread that ended meanwhile
            if states and all(s in ("T", "t") for s in states):
                return
            time.sleep(0.001)
        raise AssertionError(f"tensormorphd {self._process.pid} did not stop")

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
