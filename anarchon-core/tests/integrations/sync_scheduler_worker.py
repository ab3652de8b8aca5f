"""A process starting a scheduler from sync code, for test_sync_scheduler.py. Its result is the last
line of its output, JSON.

    sync_scheduler_worker.py fork URL JOURNAL    start, fork: the child checks the fork rules
    sync_scheduler_worker.py forget URL JOURNAL  start, run a long job, exit without shutdown()
"""

from __future__ import annotations

import json
import os
import sys
import time

import anarchon


def journal_line(journal: str, text: str) -> None:
    with open(journal, "a") as f:
        f.write(f"{os.getpid()} {text}\n")


def wait_for_line(journal: str, text: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(journal) as f:
                if any(text in line for line in f):
                    return
        except FileNotFoundError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"no {text!r} in the journal after {timeout} s")
        time.sleep(0.02)


def fork(url: str, journal: str) -> dict[str, object]:
    started = anarchon.Scheduler(url, instance="parent", grace="1s")
    idle = anarchon.Scheduler(url, instance="child", grace="1s")  # made here, started there

    @started.job("* * * * * *", name="parent-tick")
    def parent_tick(run: anarchon.Run) -> None:
        journal_line(journal, f"parent-tick {run.slot}")

    @idle.job("* * * * * *", name="child-tick")
    def child_tick(run: anarchon.Run) -> None:
        journal_line(journal, f"child-tick {run.slot}")

    started.start()
    wait_for_line(journal, "parent-tick")
    pid = os.fork()
    if pid == 0:
        code = 0
        for name, call in (
            ("start", started.start),
            ("health", started.health),
            ("shutdown", started.shutdown),
        ):
            try:
                call()
            except RuntimeError as exc:
                if "does not survive a fork" not in str(exc):
                    code |= 1
            else:
                code |= 2  # a started scheduler used after fork must fail loudly
                journal_line(journal, f"child-{name}-did-not-raise")
        idle.start()
        wait_for_line(journal, "child-tick")
        idle.shutdown()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    health = started.health()
    started.shutdown()
    return {
        "child_exit": os.waitstatus_to_exitcode(status),
        "parent_ready_after_fork": health.ready,
        "parent_started_after_shutdown": started.health().started,
    }


def forget(url: str, journal: str) -> dict[str, object]:
    scheduler = anarchon.Scheduler(url, instance="forgetful", grace="300ms")

    @scheduler.job("* * * * * *", overlap="skip")
    def long(run: anarchon.Run) -> None:
        journal_line(journal, f"started {run.slot}")
        while not run.fenced:
            time.sleep(0.02)
        journal_line(journal, f"fenced {run.slot} {run.fence_reason}")

    scheduler.start()
    wait_for_line(journal, "started")
    return {"exiting": True}  # no shutdown(): the interpreter's exit does it


def main() -> None:
    mode, url, journal = sys.argv[1:]
    result = fork(url, journal) if mode == "fork" else forget(url, journal)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
