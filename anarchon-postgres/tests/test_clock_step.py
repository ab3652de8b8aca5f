"""F1 when the store's clock steps forward (issue 21): a private PostgreSQL runs under
libfaketime, and the test moves its clock 10 s ahead while a run holds its lease.

The store then sees the lease end 10 s early, and a backup may take the run over. The runner
must notice (its watch of the store's clock, or the refused renew) and stop: no step of its work
may run once it is fenced. Between the step and the runner's notice a backup may already work:
that is the window F2 fencing tokens protect (docs: Leases, "The store's clock").
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .private_server import PrivateServer, private_server

pytestmark = pytest.mark.processes

WORKER = Path(__file__).with_name("clock_step_worker.py")
LIB = os.environ.get(
    "ANARCHON_TEST_LIBFAKETIME", "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
)


@pytest.fixture
def stepped(tmp_path: Path) -> Iterator[tuple[PrivateServer, Path]]:
    if not Path(LIB).exists():
        reason = os.environ.get("ANARCHON_TEST_LIBFAKETIME_ERROR", f"{LIB} is missing")
        pytest.skip(f"libfaketime is needed to step the server's clock: {reason}")
    # Where the server's user can read it (pytest's tmp_path is private to this user).
    folder = Path(tempfile.mkdtemp(prefix="anarchon-faketime-"))
    folder.chmod(0o755)
    spec = folder / "faketime"
    spec.write_text("+0s\n")
    spec.chmod(0o644)
    env = {
        "LD_PRELOAD": LIB,
        "FAKETIME_TIMESTAMP_FILE": str(spec),
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }
    try:
        with private_server(env) as server:
            yield server, spec
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def rows(db: Path, where: str = "1=1") -> list[tuple[int, int, int, str, float]]:
    if not db.exists():
        return []
    conn = sqlite3.connect(db, timeout=30)
    try:
        return list(conn.execute(f"SELECT slot, attempt, pid, event, at FROM runs WHERE {where}"))
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()


def wait_for(condition: Callable[[], bool], timeout: float, what: str, logs: list[Path]) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            # The lines that tell what happened: not the skips of slots the long run overlaps.
            kept = ["\n".join(line for line in p.read_text().splitlines() if "skipped" not in line)
                    for p in logs]  # fmt: skip
            tails = "\n---\n".join(text[-3000:] for text in kept)
            pytest.fail(f"timed out after {timeout} s waiting for {what}\n{tails}")
        time.sleep(0.02)


@pytest.mark.parametrize("round_", range(3))
def test_F1_a_forward_step_of_the_store_clock_stops_the_old_runner(
    stepped: tuple[PrivateServer, Path], tmp_path: Path, round_: int
) -> None:
    server, spec = stepped
    runs = tmp_path / "runs.db"
    gate = tmp_path / "gate"
    url = f"{server.url}?schema=clock{round_}"
    procs, logs = [], []
    try:
        for i in range(2):
            log = tmp_path / f"worker-{i}.log"
            with log.open("w") as stderr:
                proc = subprocess.Popen(
                    [sys.executable, str(WORKER), url, str(runs), str(gate)],
                    stdout=subprocess.PIPE, stderr=stderr, text=True,
                )  # fmt: skip
            procs.append(proc)
            logs.append(log)
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        gate.write_text(str((int(time.time()) + 2) * 1000))
        wait_for(lambda: bool(rows(runs, "event = 'started'")), 20, "a first run", logs)
        slot, _, winner, _, _ = rows(runs, "event = 'started'")[0]
        wait_for(
            lambda: len(rows(runs, f"pid = {winner} AND event = 'step'")) > 60, 5, "steps", logs
        )
        stepped_at = time.time()
        spec.write_text("+10s\n")  # the server's clock jumps 10 s ahead
        mine = f"slot = {slot} AND attempt = 1 AND pid = {winner}"
        wait_for(lambda: bool(rows(runs, f"{mine} AND event = 'fenced'")), 10, "the fence", logs)
        (_, _, _, _, fenced_at) = rows(runs, f"{mine} AND event = 'fenced'")[0]
        late_steps = rows(runs, f"{mine} AND event = 'step' AND at > {fenced_at}")
        assert not late_steps, f"the old runner worked after it was fenced: {late_steps}"
        # The watch reads the store's clock every third of a heartbeat (0.67 s): without it, the
        # runner would learn of the step only from a renew refused after a takeover (or never).
        assert fenced_at - stepped_at < 1.0, f"fenced {fenced_at - stepped_at:.2f} s after the step"
        winner_log = logs[[p.pid for p in procs].index(winner)].read_text()
        assert "stepped forward" in winner_log or "refused the renew" in winner_log, winner_log
        # A backup may or may not have taken the run over before the runner saw the step; if it
        # did, the overlap is the window F2 tokens guard. Either way the run ends once.
        takeover = rows(runs, f"slot = {slot} AND attempt = 2 AND event = 'started'")
        overlap = f"{fenced_at - takeover[0][4]:+.3f} s" if takeover else "none"
        print(f"round {round_}: fenced; overlap with a takeover: {overlap}")
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
            if proc.stdout:
                proc.stdout.close()
