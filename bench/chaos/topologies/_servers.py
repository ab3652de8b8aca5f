"""Starting and stopping the servers of a topology: free ports, waiting until a port answers."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Sequence

__all__ = ["free_port", "start_process", "stop_process", "wait_port"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_port(port: int, process: subprocess.Popen[bytes] | None, timeout_s: float = 20) -> None:
    """Return once 127.0.0.1:`port` accepts connections; fail if `process` exits or time runs
    out."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if process is not None and process.poll() is not None:
                raise RuntimeError(f"server on port {port} exited ({process.returncode})") from None
            if time.monotonic() >= deadline:
                raise TimeoutError(f"nothing answers on 127.0.0.1:{port}") from None
            time.sleep(0.02)


def start_process(args: Sequence[str], port: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(list(args), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port, process)
    return process


def stop_process(process: subprocess.Popen[bytes] | None, *, kill: bool = False) -> None:
    """Stop `process` (SIGKILL with `kill`: a crash, nothing flushed) and reap it."""
    if process is None or process.poll() is not None:
        return
    if kill:
        process.kill()
    else:
        process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
