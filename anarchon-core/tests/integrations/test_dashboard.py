"""``anarchon dashboard`` as a person sees it: a real process serving a store with runs of every
outcome, opened in headless Chromium (Selenium), asserting on the rendered page.

``ANARCHON_UPDATE_SCREENSHOT=1 .venv/bin/pytest anarchon-core/tests/integrations/test_dashboard.py``
also writes the docs' screenshot, ``docs/assets/dashboard.png``.
"""

from __future__ import annotations

import asyncio
import os
import re
import selectors
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

import anarchon
from anarchon import ClaimRequest, Outcome, RunStatus
from anarchon.cli import cli
from anarchon.cli._inspect import _iso
from anarchon_sqlite.testing import force_expire

ROOT = Path(__file__).resolve().parents[3]
SCREENSHOT = ROOT / "docs" / "assets" / "dashboard.png"
CHROMIUM = os.environ.get("ANARCHON_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("ANARCHON_TEST_CHROMEDRIVER", "/usr/bin/chromedriver")
MINUTE = 60_000
SECRET = "s3cret-pw"

# The colours of dashboard.css, as Chromium computes them.
COLOURS = {
    "succeeded": "rgba(46, 157, 79, 1)",
    "failed": "rgba(210, 57, 59, 1)",
    "skipped": "rgba(163, 168, 174, 1)",
    "interrupted": "rgba(142, 68, 173, 1)",
    "running": "rgba(242, 183, 5, 1)",
    "claimed": "rgba(63, 127, 214, 1)",
    "damaged": "rgba(90, 26, 26, 1)",
}

APP = """\
import anarchon

scheduler = anarchon.Scheduler("sqlite:///anarchon.db")


@scheduler.job("*/5 * * * *", name="report")
def report() -> None: ...


@scheduler.job("30 2 * * *", name="backup", tz="Europe/Paris")
def backup() -> None: ...
"""


async def _write_runs(db: Path, now_ms: int) -> dict[str, int]:
    """Runs of every outcome for job ``report`` through the real store API (plus two rows the
    API never writes: a ``claimed`` run, and a damaged one). The slots, by outcome."""
    base = now_ms - now_ms % (5 * MINUTE) - 60 * MINUTE
    slots = {
        name: base + i * 5 * MINUTE
        for i, name in enumerate(
            (
                *("succeeded", "failed", "skipped", "late", "interrupted", "taken-over"),
                *("claimed", "damaged", "running"),
            )
        )
    }
    far = 10 * 24 * 3600_000
    async with anarchon.connect(f"sqlite:///{db}") as store:
        assert isinstance(store, anarchon.LeaseStore)

        async def claim(
            slot: int,
            instance: str = "host-a",
            *,
            attempts: int = 3,
            lease_ms: int = 60_000,
            skip_reason: str | None = None,
        ) -> tuple[anarchon.Claim, str]:
            request = ClaimRequest(
                job="report",
                slot=slot,
                instance=instance,
                max_late_ms=far,
                attempts=attempts,
                lease_ms=lease_ms,
                skip_reason=skip_reason,
            )
            return await store.claim(request), request.token

        async def finish(
            slot: int, token: str, status: RunStatus, error: str | None = None
        ) -> None:
            assert await store.finish("report", slot, token, status, error)

        for name in ("succeeded", "claimed", "damaged"):
            _, token = await claim(slots[name])
            await finish(slots[name], token, RunStatus.SUCCEEDED)
        _, token = await claim(slots["failed"])
        error = f"OSError: cannot reach postgresql://bob:{SECRET}@db.internal/prod"
        await finish(slots["failed"], token, RunStatus.FAILED, error)
        skipped, _ = await claim(slots["skipped"], skip_reason="coalesced: a newer slot ran")
        assert skipped.outcome is Outcome.SKIPPED
        late = await store.claim(
            ClaimRequest(job="report", slot=slots["late"], instance="host-b", max_late_ms=0)
        )
        assert late.outcome is Outcome.SKIPPED, late
        # Interrupted: the only attempt's lease runs out (L5).
        await claim(slots["interrupted"], attempts=1)
        force_expire(db, "cron", "report", slots["interrupted"])
        ended, _ = await claim(slots["interrupted"], "host-b", attempts=1)
        assert ended.outcome is Outcome.DONE
        # Taken over: host-a's lease runs out, host-b wins attempt 2 and succeeds (L4).
        await claim(slots["taken-over"])
        force_expire(db, "cron", "report", slots["taken-over"])
        second, token = await claim(slots["taken-over"], "host-b")
        assert second.outcome is Outcome.WON and second.attempt == 2
        await finish(slots["taken-over"], token, RunStatus.SUCCEEDED)
        running, _ = await claim(slots["running"], "host-c", lease_ms=3_600_000)
        assert running.outcome is Outcome.WON
        # A job the app does not have any more, whose run the store still remembers.
        request = ClaimRequest(job="legacy", slot=base, instance="host-old", max_late_ms=far)
        assert (await store.claim(request)).outcome is Outcome.WON
        assert await store.finish("legacy", base, request.token, RunStatus.SUCCEEDED)
    # Two rows the API never writes on SQLite: a run only known as claimed (what stores
    # without leases hold), and a damaged one.
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE anarchon_runs SET status = 'claimed', finished_at = NULL "
            "WHERE job = 'report' AND slot = ?",
            (slots["claimed"],),
        )
        conn.execute(
            "UPDATE anarchon_runs SET status = 'bogus' WHERE job = 'report' AND slot = ?",
            (slots["damaged"],),
        )
    conn.close()
    return slots


class Dashboard:
    """An ``anarchon dashboard`` process and the address it serves on."""

    def __init__(self, proc: subprocess.Popen[str], address: str) -> None:
        self.proc = proc
        self.address = address


def _address_line(proc: subprocess.Popen[str], timeout: float = 30) -> str:
    """Read stderr until the line with the address the dashboard serves on, with a deadline."""
    assert proc.stderr is not None
    selector = selectors.DefaultSelector()
    selector.register(proc.stderr, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    seen = []
    try:
        while time.monotonic() < deadline:
            if not selector.select(timeout=deadline - time.monotonic()):
                continue
            line = proc.stderr.readline()
            if not line:
                break
            seen.append(line)
            found = re.search(r"http://127\.0\.0\.1:\d+/", line)
            if found:
                return found[0]
    finally:
        selector.close()
    raise AssertionError(f"the dashboard did not start: {''.join(seen)!r}")


@pytest.fixture
def dashboard(tmp_path: Path) -> Iterator[tuple[Dashboard, Path, dict[str, int]]]:
    db = tmp_path / "anarchon.db"
    slots = asyncio.run(_write_runs(db, time.time_ns() // 1_000_000))
    (tmp_path / "app.py").write_text(APP, encoding="utf-8")
    # A relative URL (the process runs in tmp_path) keeps the screenshot free of test paths.
    command = [sys.executable, "-m", "anarchon.cli", "dashboard", "sqlite:///anarchon.db"]
    command += ["--port", "0", "--app", "app:scheduler", "--refresh", "1s"]
    proc = subprocess.Popen(command, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        yield Dashboard(proc, _address_line(proc)), db, slots
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    reason = os.environ.get("ANARCHON_TEST_CHROMIUM_ERROR")
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.path.exists(path):
            pytest.skip(reason or f"{path} is missing: run scripts/chromium (Debian's chromium)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        # Without these Chromium waits on network services this closed network never answers.
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'chromium'}",
        "--window-size=1400,1000",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(
    driver: WebDriver, condition: Callable[[WebDriver], bool], timeout: float = 20, what: str = ""
) -> None:
    """Wait until `condition` holds on the page, failing after `timeout` seconds."""
    WebDriverWait(driver, timeout, poll_frequency=0.05).until(condition, what)


@pytest.mark.processes
def test_the_page_shows_every_outcome_and_refreshes_by_itself(
    dashboard: tuple[Dashboard, Path, dict[str, int]], browser: WebDriver
) -> None:
    server, db, slots = dashboard
    driver = browser
    driver.get(server.address)
    page = driver.find_element(By.TAG_NAME, "body").text
    assert "sqlite:///anarchon.db" in page

    # Jobs: from --app with their schedules and next slots in their zones; a job only the
    # store knows says its schedule is unknown.
    rows = {
        row.get_attribute("data-job"): row
        for row in driver.find_elements(By.CSS_SELECTOR, "tr.job")
    }
    assert set(rows) == {"report", "backup", "legacy"}
    assert "*/5 * * * * (UTC)" in rows["report"].text
    backup = rows["backup"].text
    assert "30 2 * * * (Europe/Paris)" in backup
    assert re.search(r"02:30:00 CES?T \(\+0[12]:00\)", backup), backup
    assert "schedule unknown" in rows["legacy"].text

    # The timeline: one cell per slot, oldest first, coloured by outcome.
    cells = rows["report"].find_elements(By.CSS_SELECTOR, "ol.timeline li.slot")
    assert len(cells) == len(slots)
    by_slot = {cell.get_attribute("data-slot"): cell for cell in cells}
    outcome_of = {
        "succeeded": "succeeded",
        "failed": "failed",
        "skipped": "skipped",
        "late": "skipped",
        "interrupted": "interrupted",
        "taken-over": "succeeded",
        "claimed": "claimed",
        "damaged": "damaged",
        "running": "running",
    }
    shown = [cell.get_attribute("data-slot") or "" for cell in cells]
    assert shown == sorted(shown), "the timeline reads oldest to newest"
    for name, slot in slots.items():
        cell = by_slot[_iso(slot).replace("T", " ")]
        outcome = outcome_of[name]
        assert outcome in (cell.get_attribute("class") or "").split(), name
        assert cell.value_of_css_property("background-color") == COLOURS[outcome], name
    skipped = by_slot[_iso(slots["skipped"]).replace("T", " ")]
    assert "skipped: coalesced: a newer slot ran" in (skipped.get_attribute("title") or "")
    late = by_slot[_iso(slots["late"]).replace("T", " ")]
    assert "skipped: late" in (late.get_attribute("title") or "")
    taken = by_slot[_iso(slots["taken-over"]).replace("T", " ")]
    assert taken.text == "2"
    assert taken.value_of_css_property("border-top-color") == "rgba(17, 17, 17, 1)"
    plain = by_slot[_iso(slots["succeeded"]).replace("T", " ")]
    assert plain.value_of_css_property("border-top-color") == "rgba(0, 0, 0, 0)"

    # The legend names every mark.
    legend = driver.find_element(By.ID, "legend").text
    for label in ("succeeded", "failed", "skipped", "interrupted", "running", "claimed"):
        assert label in legend
    assert "taken over" in legend and "damaged" in legend

    # Instances seen in recent runs, labelled as such.
    instances = driver.find_element(By.ID, "instances").text
    assert "does not track live membership" in instances
    for host in ("host-a", "host-b", "host-c", "host-old"):
        assert host in instances

    # The last errors: the failed run's error, credentials hidden, and the damaged record.
    errors = driver.find_element(By.ID, "errors").text
    assert "OSError: cannot reach postgresql://bob:***@db.internal/prod" in errors
    assert "bogus" in errors
    assert SECRET not in driver.page_source

    if os.environ.get("ANARCHON_UPDATE_SCREENSHOT"):
        driver.set_window_size(1400, 1000)
        assert driver.save_screenshot(str(SCREENSHOT))

    # It refreshes by itself: a new run shows up without the test reloading the page.
    driver.execute_script("window.notReloaded = true;")

    async def one_more_run() -> None:
        async with anarchon.connect(f"sqlite:///{db}") as store:
            assert isinstance(store, anarchon.LeaseStore)
            slot = slots["running"] + 5 * MINUTE
            request = ClaimRequest(job="legacy", slot=slot, instance="host-new", max_late_ms=10**9)
            assert (await store.claim(request)).outcome is Outcome.WON
            assert await store.finish("legacy", slot, request.token, RunStatus.FAILED, "fresh fail")

    asyncio.run(one_more_run())
    _wait(
        driver,
        lambda d: "fresh fail" in d.find_element(By.ID, "errors").text,
        what="the new failed run on the page",
    )
    assert driver.execute_script("return window.notReloaded === true;")
    legacy = driver.find_element(By.CSS_SELECTOR, "tr.job[data-job='legacy']")
    assert len(legacy.find_elements(By.CSS_SELECTOR, "li.slot.failed")) == 1
    assert "host-new" in driver.find_element(By.ID, "instances").text

    # It stops on SIGTERM, and the page says it lost the dashboard.
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(timeout=15) == 0
    _wait(
        driver,
        lambda d: "cannot reach the dashboard" in d.find_element(By.ID, "refresh-state").text,
        what="the page saying the dashboard is gone",
    )


# -- the command's errors (no browser) ---------------------------------------------------------


def _invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["dashboard", *args])
    return result.exit_code, result.output


def test_a_network_address_needs_allow_remote(tmp_path: Path) -> None:
    code, output = _invoke(f"sqlite:///{tmp_path}/x.db", "--host", "0.0.0.0")
    assert code == 2
    assert "not a loopback address" in output and "--allow-remote" in output


def test_a_missing_database_file_is_an_error_not_a_new_file(tmp_path: Path) -> None:
    code, output = _invoke(f"sqlite:///{tmp_path}/typo.db", "--port", "0")
    assert code == 5
    assert f"no SQLite database file {tmp_path}/typo.db" in output
    assert not (tmp_path / "typo.db").exists()


def test_a_too_short_refresh_is_refused(tmp_path: Path) -> None:
    code, output = _invoke(f"sqlite:///{tmp_path}/x.db", "--refresh", "10ms")
    assert code == 2 and "--refresh" in output and "at least 500 ms" in output


def test_without_the_extra_it_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "uvicorn", None)
    code, output = _invoke(f"sqlite:///{tmp_path}/x.db")
    assert code == 2
    assert "pip install 'anarchon[dashboard]'" in output


@pytest.mark.services
@pytest.mark.processes
def test_the_store_password_never_reaches_the_page(tmp_path: Path) -> None:
    """PostgreSQL on this machine trusts every password: a made-up one connects, and must show
    nowhere (the page, its title, the address line)."""
    import secrets
    import urllib.request

    prefix = f"dash{secrets.token_hex(4)}"
    url = f"postgresql://postgres:{SECRET}@127.0.0.1:5432/test?prefix={prefix}"
    command = [sys.executable, "-m", "anarchon.cli", "dashboard", url, "--port", "0"]
    proc = subprocess.Popen(command, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        line_address = _address_line(proc)
        with urllib.request.urlopen(line_address, timeout=20) as response:
            html = response.read().decode()
        assert response.status == 200
        assert "postgresql://postgres:***@127.0.0.1:5432/test" in html
        assert "No jobs in this store yet" in html
        assert SECRET not in html
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        assert proc.stderr is not None
        rest = proc.stderr.read()
        proc.stderr.close()
    assert SECRET not in rest
