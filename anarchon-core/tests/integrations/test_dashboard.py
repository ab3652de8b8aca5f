"""``anarchon dashboard`` as a person sees it: a real process serving a store with runs of every
outcome, opened in headless Chromium (Selenium), asserting on the rendered page.

``ANARCHON_UPDATE_SCREENSHOT=1 .venv/bin/pytest anarchon-core/tests/integrations/test_dashboard.py``
also writes the docs' screenshot, ``docs/assets/dashboard.png``.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import os
import re
import selectors
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import Select, WebDriverWait

import anarchon
import anarchon.abc
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

# The colours of dashboard.css, as Chromium computes them (getComputedStyle).
COLOURS = {
    "succeeded": "rgb(46, 157, 79)",
    "failed": "rgb(210, 57, 59)",
    "skipped": "rgb(163, 168, 174)",
    "interrupted": "rgb(142, 68, 173)",
    "running": "rgb(242, 183, 5)",
    "claimed": "rgb(63, 127, 214)",
    "damaged": "rgb(90, 26, 26)",
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


_UNREAD: dict[int, bytes] = {}
"""Per process id: what `_line` read from its stderr past the line it returned."""


def _line(proc: subprocess.Popen[str], pattern: str, timeout: float = 30) -> str:
    """Read stderr until a line matching `pattern` (its match), with a deadline. Reads the raw
    pipe (what it reads past that line is kept for the next call and `_rest`)."""
    assert proc.stderr is not None
    fd = proc.stderr.fileno()
    pending = _UNREAD.pop(proc.pid, b"")
    selector = selectors.DefaultSelector()
    selector.register(fd, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    seen = []
    try:
        while True:
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                seen.append(line.decode())
                found = re.search(pattern, seen[-1])
                if found:
                    _UNREAD[proc.pid] = pending
                    return found[0]
            if time.monotonic() >= deadline:
                break
            if not selector.select(timeout=deadline - time.monotonic()):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            pending += chunk
    finally:
        selector.close()
    raise AssertionError(f"the dashboard did not say {pattern!r}: {seen!r}")


def _rest(proc: subprocess.Popen[str]) -> str:
    """Everything on `proc`'s stderr after what `_line` returned, once it has exited."""
    assert proc.stderr is not None
    return _UNREAD.pop(proc.pid, b"").decode() + proc.stderr.read()


def _address_line(proc: subprocess.Popen[str], timeout: float = 30) -> str:
    """Read stderr until the line with the address the dashboard serves on, with a deadline."""
    return _line(proc, r"http://127\.0\.0\.1:\d+/", timeout)


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

    # The page swaps its content in place every refresh: an element found a moment ago may be
    # gone; the condition is tried again.
    def holds(d: WebDriver) -> bool:
        try:
            return condition(d)
        except WebDriverException as error:
            if _swapped_away(error):
                return False
            raise

    WebDriverWait(driver, timeout, poll_frequency=0.05).until(holds, what)


_READ_PAGE = """
function text(id) {
  var element = document.getElementById(id);
  return element ? element.innerText : null;
}
var jobs = {};
document.querySelectorAll("tr.job").forEach(function (row) {
  jobs[row.dataset.job] = {
    text: row.innerText,
    badges: Array.from(row.querySelectorAll(".badge"), function (b) { return b.innerText; }),
    cells: Array.from(row.querySelectorAll("ol.timeline li.slot"), function (li) {
      var style = getComputedStyle(li);
      return {
        slot: li.dataset.slot,
        classes: Array.from(li.classList),
        title: li.title,
        text: li.innerText,
        background: style.backgroundColor,
        border: style.borderTopColor,
      };
    }),
  };
});
return {
  body: document.body.innerText,
  jobs: jobs,
  legend: text("legend"),
  instances: text("instances"),
  errors: text("errors"),
  control_note: text("control-note"),
};
"""


def _read_page(driver: WebDriver) -> dict[str, Any]:
    """What the page shows, read in one step in the page: its content is swapped in place every
    refresh, so elements found one by one go stale when a refresh falls between two of the
    WebDriver calls (on a busy machine, one does within a few dozen). Per job row (by
    ``data-job``): its text, badges, and timeline cells with their computed colours."""
    page: dict[str, Any] = driver.execute_script(_READ_PAGE)
    return page


@pytest.mark.processes
def test_the_page_shows_every_outcome_and_refreshes_by_itself(
    dashboard: tuple[Dashboard, Path, dict[str, int]], browser: WebDriver
) -> None:
    server, db, slots = dashboard
    driver = browser
    driver.get(server.address)
    page = _read_page(driver)
    assert "sqlite:///anarchon.db" in page["body"]

    # Jobs: from --app with their schedules and next slots in their zones; a job only the
    # store knows says its schedule is unknown.
    rows = page["jobs"]
    assert set(rows) == {"report", "backup", "legacy"}
    assert "*/5 * * * * (UTC)" in rows["report"]["text"]
    backup = rows["backup"]["text"]
    assert "30 2 * * * (Europe/Paris)" in backup
    assert re.search(r"02:30:00 CES?T \(\+0[12]:00\)", backup), backup
    assert "schedule unknown" in rows["legacy"]["text"]

    # The timeline: one cell per slot, oldest first, coloured by outcome.
    cells = rows["report"]["cells"]
    assert len(cells) == len(slots)
    by_slot = {cell["slot"]: cell for cell in cells}
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
    shown = [cell["slot"] for cell in cells]
    assert shown == sorted(shown), "the timeline reads oldest to newest"
    for name, slot in slots.items():
        cell = by_slot[_iso(slot).replace("T", " ")]
        outcome = outcome_of[name]
        assert outcome in cell["classes"], name
        assert cell["background"] == COLOURS[outcome], name
    skipped = by_slot[_iso(slots["skipped"]).replace("T", " ")]
    assert "skipped: coalesced: a newer slot ran" in skipped["title"]
    late = by_slot[_iso(slots["late"]).replace("T", " ")]
    assert "skipped: late" in late["title"]
    taken = by_slot[_iso(slots["taken-over"]).replace("T", " ")]
    assert taken["text"] == "2"
    assert taken["border"] == "rgb(17, 17, 17)"
    plain = by_slot[_iso(slots["succeeded"]).replace("T", " ")]
    assert plain["border"] == "rgba(0, 0, 0, 0)"

    # The legend names every mark.
    legend = page["legend"]
    for label in ("succeeded", "failed", "skipped", "interrupted", "running", "claimed"):
        assert label in legend
    assert "taken over" in legend and "damaged" in legend

    # Instances seen in recent runs, labelled as such: the store keeps a member list, with
    # nobody in it (no scheduler runs here).
    instances = page["instances"]
    assert "No instance is in the member list now" in instances
    assert "does not track live membership" not in instances
    for host in ("host-a", "host-b", "host-c", "host-old"):
        assert host in instances

    # The last errors: the failed run's error, credentials hidden, and the damaged record.
    errors = page["errors"]
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
        lambda d: "fresh fail" in (_read_page(d)["errors"] or ""),
        what="the new failed run on the page",
    )
    assert driver.execute_script("return window.notReloaded === true;")
    page = _read_page(driver)
    legacy_cells = page["jobs"]["legacy"]["cells"]
    assert len([c for c in legacy_cells if "failed" in c["classes"]]) == 1, legacy_cells
    assert "host-new" in page["instances"]

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

    testing = pytest.importorskip("anarchon_postgres.testing")
    schema = f"dash{secrets.token_hex(4)}"
    url = f"postgresql://postgres:{SECRET}@127.0.0.1:5432/test?schema={schema}"
    # The dashboard opens stores read-only (R1): set this one up first, in a schema of its own,
    # so that the test does not depend on what other tests left in `public`.
    asyncio.run(_set_up(url))
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
        code = proc.wait(timeout=15)
        rest = _rest(proc)
        assert proc.stderr is not None
        proc.stderr.close()  # before any assertion: a pipe left open fails a later test
        testing.drop("postgresql://postgres@127.0.0.1:5432/test", schema)
    assert code == 0, rest
    assert SECRET not in rest


async def _set_up(url: str) -> None:
    async with anarchon.connect(url):
        pass


# -- controls (--allow-control) ----------------------------------------------------------------

TOKEN = "a-token-of-the-tests-0123456789"


@contextlib.contextmanager
def _serve(
    cwd: Path, url: str, *args: str, env: dict[str, str] | None = None
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """An ``anarchon dashboard`` process on a free port, and its address; stopped at the end."""
    command = [sys.executable, "-m", "anarchon.cli", "dashboard", url, "--port", "0", *args]
    environment = {**os.environ, **(env or {})}
    proc = subprocess.Popen(command, cwd=cwd, stderr=subprocess.PIPE, text=True, env=environment)
    try:
        yield proc, _address_line(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()


def _http(
    address: str, method: str, path: str, *, cookie: str = "", form: dict[str, str] | None = None
) -> tuple[int, dict[str, str], str]:
    """One request, redirects not followed: (status, headers, body)."""
    parts = urllib.parse.urlsplit(address)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=20)
    headers = {"Cookie": cookie} if cookie else {}
    body = None
    if form is not None:
        body = urllib.parse.urlencode(form)
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    try:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read().decode()
    finally:
        conn.close()


async def _pauses(db: Path) -> list[anarchon.Pause]:
    async with anarchon.connect(f"sqlite:///{db}") as store:
        assert isinstance(store, anarchon.abc.SupportsPause)
        return await store.pauses()


async def _triggers(db: Path) -> list[anarchon.Trigger]:
    async with anarchon.connect(f"sqlite:///{db}") as store:
        assert isinstance(store, anarchon.abc.SupportsTrigger)
        return await store.triggers(0)


def _row(driver: WebDriver, job: str) -> WebElement:
    return driver.find_element(By.CSS_SELECTOR, f"tr.job[data-job='{job}']")


def _state(driver: WebDriver, job: str) -> tuple[str, list[str]]:
    """A job row's pause badge (or "") and button labels, read in one step in the page (its
    content is swapped in place every refresh, so elements found one by one can go stale)."""
    badge, buttons = driver.execute_script(
        """
        var row = document.querySelector("tr.job[data-job='" + arguments[0] + "']");
        var badge = row.querySelector(".badge.paused");
        var buttons = Array.from(row.querySelectorAll("button"), function (b) {
          return b.textContent.trim();
        });
        return [badge ? badge.textContent.trim() : "", buttons];
        """,
        job,
    )
    return badge, buttons


def _flash(driver: WebDriver) -> str:
    """The flash message's text ('' when there is none), read in one step in the page: an
    element found first and read next can be swapped away by a refresh in between."""
    text = driver.execute_script(
        "var flash = document.getElementById('flash'); return flash ? flash.innerText : '';"
    )
    return str(text)


def _swapped_away(error: WebDriverException) -> bool:
    """The element was swapped away by the page's refresh: Chrome says so with a stale element
    reference or, from some versions, with an "unknown error" about a node that "does not
    belong to the document"."""
    return isinstance(error, StaleElementReferenceException) or (
        "does not belong to the document" in str(error.msg)
    )


def _retrying(act: Callable[[], None], timeout: float = 20) -> None:
    """Do `act` on the page, again if the refresh swapped its elements away meanwhile."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            act()
            return
        except WebDriverException as error:
            if not _swapped_away(error) or time.monotonic() > deadline:
                raise


def _click(driver: WebDriver, job: str, label: str) -> None:
    _retrying(
        lambda: _row(driver, job).find_element(By.XPATH, f".//button[text()='{label}']").click()
    )


@pytest.mark.processes
def test_without_allow_control_pauses_show_but_nothing_changes_the_store(
    tmp_path: Path, browser: WebDriver
) -> None:
    db = tmp_path / "anarchon.db"
    asyncio.run(_write_runs(db, time.time_ns() // 1_000_000))

    async def pause_by_cli() -> None:
        async with anarchon.connect(f"sqlite:///{db}") as store:
            assert isinstance(store, anarchon.abc.SupportsPause)
            await store.pause("report", reason="deploy freeze", by="ops@laptop")

    asyncio.run(pause_by_cli())
    with _serve(tmp_path, "sqlite:///anarchon.db", "--refresh", "1s") as (_, address):
        browser.get(address)
        rows = _read_page(browser)["jobs"]
        assert rows["report"]["badges"] == ["paused until resumed by ops@laptop: deploy freeze"]
        assert rows["legacy"]["badges"] == []
        assert not browser.find_elements(By.TAG_NAME, "form")
        assert not browser.find_elements(By.TAG_NAME, "button")
        assert "read-only" in browser.find_element(By.TAG_NAME, "footer").text
        for path in ("/control/pause", "/control/resume", "/control/trigger"):
            status, _, _ = _http(address, "POST", path, form={"job": "report"})
            assert status == 404, path
        assert _http(address, "GET", f"/login?token={TOKEN}")[0] == 404
    assert [p.job for p in asyncio.run(_pauses(db))] == ["report"]
    assert asyncio.run(_triggers(db)) == []


@pytest.mark.processes
def test_pause_resume_and_trigger_from_the_page(tmp_path: Path, browser: WebDriver) -> None:
    db = tmp_path / "anarchon.db"
    asyncio.run(_write_runs(db, time.time_ns() // 1_000_000))
    (tmp_path / "app.py").write_text(APP, encoding="utf-8")
    args = ("--app", "app:scheduler", "--refresh", "1s", "--allow-control")
    with _serve(tmp_path, "sqlite:///anarchon.db", *args) as (proc, address):
        link = _line(proc, r"http://127\.0\.0\.1:\d+/login\?token=\S+")
        driver = browser

        # Not signed in: the page says how to sign in, and shows no button.
        driver.get(address)
        assert "not signed in" in (_read_page(driver)["control_note"] or "")
        assert not driver.find_elements(By.TAG_NAME, "button")

        # The printed link signs in and leaves the token out of the address bar.
        driver.get(link)
        _wait(driver, lambda d: d.current_url == address, what="the redirect to the page")
        token = link.rsplit("=", 1)[1]
        assert token not in driver.page_source
        assert not driver.find_elements(By.ID, "control-note")
        rows = set(
            driver.execute_script(
                "return Array.from(document.querySelectorAll('tr.job'), r => r.dataset.job);"
            )
        )
        assert rows == {"report", "backup", "legacy"}
        for job in rows:
            assert _state(driver, job) == ("", ["Pause", "Trigger now"]), job

        # Pause report for an hour, with a reason.
        def fill_in_and_pause() -> None:
            row = _row(driver, "report")
            row.find_element(By.NAME, "reason").send_keys("deploy freeze")
            # While the form has the focus the page does not swap its content.
            Select(row.find_element(By.NAME, "until")).select_by_visible_text("for 1 h")
            row.find_element(By.XPATH, ".//button[text()='Pause']").click()

        before = time.time_ns() // 1_000_000
        _retrying(fill_in_and_pause)
        _wait(
            driver,
            lambda d: _flash(d).startswith("Paused report until "),
            what="the flash of the pause",
        )
        badge, buttons = _state(driver, "report")
        assert re.fullmatch(r"paused until \S+ \S+Z by dashboard:\S+@\S+: deploy freeze", badge), (
            badge
        )
        assert buttons == ["Resume", "Trigger now"]
        after = time.time_ns() // 1_000_000
        (pause,) = asyncio.run(_pauses(db))
        assert pause.job == "report" and pause.reason == "deploy freeze"
        assert pause.by.startswith("dashboard:") and "@" in pause.by
        assert pause.until_ms is not None
        assert before + 3_600_000 - 5_000 <= pause.until_ms <= after + 3_600_000 + 5_000

        # The flash is shown once: a reload no longer has it.
        driver.get(address)
        assert not driver.find_elements(By.ID, "flash")

        # Resume.
        _click(driver, "report", "Resume")
        _wait(
            driver,
            lambda d: "Resumed report" in _flash(d),
            what="the flash of the resume",
        )
        assert _state(driver, "report") == ("", ["Pause", "Trigger now"])
        assert asyncio.run(_pauses(db)) == []

        # Trigger now.
        _click(driver, "backup", "Trigger now")
        _wait(
            driver,
            lambda d: "Triggered backup" in _flash(d),
            what="the flash of the trigger",
        )
        (made,) = asyncio.run(_triggers(db))
        assert made.job == "backup" and made.by.startswith("dashboard:")
        assert _iso(made.slot) in _flash(driver)

        # A pause made elsewhere shows on the next refresh, without a reload.
        driver.execute_script("window.notReloaded = true;")

        async def pause_elsewhere() -> None:
            async with anarchon.connect(f"sqlite:///{db}") as store:
                assert isinstance(store, anarchon.abc.SupportsPause)
                await store.pause("legacy", reason="retired", by="ops@laptop")

        asyncio.run(pause_elsewhere())
        _wait(
            driver,
            lambda d: "retired" in _state(d, "legacy")[0],
            what="the badge of a pause made by another tool",
        )
        assert driver.execute_script("return window.notReloaded === true;")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        assert token not in _rest(proc), "the token is printed once, in the link only"


@pytest.mark.processes
def test_a_wrong_or_missing_token_or_form_field_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "anarchon.db"
    asyncio.run(_write_runs(db, time.time_ns() // 1_000_000))
    env = {"ANARCHON_DASHBOARD_TOKEN": TOKEN}
    args = ("--job", "report", "--allow-control")
    with _serve(tmp_path, "sqlite:///anarchon.db", *args, env=env) as (proc, address):
        link = _line(proc, r"sign in to the controls at .*")
        assert TOKEN not in link and link.endswith("login?token=<your token>")

        status, _, body = _http(address, "GET", "/login?token=wrong-token-0123456789")
        assert status == 403 and "Wrong or missing token" in body
        assert _http(address, "GET", "/login")[0] == 403
        status, headers, _ = _http(address, "GET", f"/login?token={TOKEN}")
        assert status == 303
        cookie = headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and TOKEN not in cookie
        session = cookie.split(";", 1)[0]

        status, _, page = _http(address, "GET", "/", cookie=session)
        assert status == 200 and TOKEN not in page
        csrf = re.search(r'name="csrf" value="(\w+)"', page)
        assert csrf is not None
        good = {"csrf": csrf[1], "job": "report", "reason": "", "until": ""}

        # No session cookie, a wrong one, a missing or wrong form field: 403, nothing written.
        for cookie_sent, form in (
            ("", good),
            ("anarchon_control=forged", good),
            (session, {**good, "csrf": ""}),
            (session, {**good, "csrf": "0" * 64}),
        ):
            status, _, body = _http(
                address, "POST", "/control/pause", cookie=cookie_sent, form=form
            )
            assert status == 403, (cookie_sent, form)
        assert asyncio.run(_pauses(db)) == []

        # Bad input: 400, saying what was wrong.
        status, _, body = _http(
            address, "POST", "/control/pause", cookie=session, form={**good, "until": "soon"}
        )
        assert status == 400 and "--until &#x27;soon&#x27;" in body
        status, _, body = _http(
            address, "POST", "/control/trigger", cookie=session, form={**good, "job": "no job"}
        )
        assert status == 400 and "job name" in body

        # The right cookie and field: done, and the page shows it.
        status, headers, _ = _http(address, "POST", "/control/pause", cookie=session, form=good)
        assert status == 303 and headers["location"] == "../"
        assert [p.job for p in asyncio.run(_pauses(db))] == ["report"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        assert TOKEN not in _rest(proc)


@pytest.mark.services
@pytest.mark.processes
def test_a_store_that_cannot_pause_shows_no_button_and_refuses_with_400(tmp_path: Path) -> None:
    """NATS keeps run history (so the dashboard serves it) but cannot pause or trigger."""
    import secrets

    url = f"nats://127.0.0.1:4222?prefix=dash{secrets.token_hex(4)}"

    async def one_run() -> None:
        async with anarchon.connect(url) as store:
            now = time.time_ns() // 1_000_000
            slot = now - now % 60_000
            request = ClaimRequest(job="report", slot=slot, instance="h", max_late_ms=MINUTE)
            assert (await store.claim(request)).outcome is Outcome.WON

    asyncio.run(one_run())
    env = {"ANARCHON_DASHBOARD_TOKEN": TOKEN}
    args = ("--job", "report", "--allow-control")
    with _serve(tmp_path, url, *args, env=env) as (_, address):
        session = _http(address, "GET", f"/login?token={TOKEN}")[1]["set-cookie"].split(";")[0]
        status, _, page = _http(address, "GET", "/", cookie=session)
        assert status == 200
        assert "this store cannot pause or trigger" in page and "<button" not in page
        assert 'name="csrf"' not in page
        # No form on the page: post what one would carry (the field every session's forms get).
        from anarchon.dashboard._control import _derive

        form = {"csrf": _derive(TOKEN, "anarchon-dashboard-csrf"), "job": "report"}
        for action in ("pause", "trigger"):
            status, _, body = _http(
                address, "POST", f"/control/{action}", cookie=session, form=form
            )
            assert status == 400, action
            assert f"cannot {action}" in body.lower()


def test_control_token_needs_allow_control_and_a_long_enough_token(tmp_path: Path) -> None:
    code, output = _invoke(f"sqlite:///{tmp_path}/x.db", "--control-token", TOKEN)
    assert code == 2 and "needs --allow-control" in output
    code, output = _invoke(
        f"sqlite:///{tmp_path}/x.db", "--allow-control", "--control-token", "short"
    )
    assert code == 2 and "at least 16 characters" in output
    assert "short" not in output.replace("--control-token must", "")
