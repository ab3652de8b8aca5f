"""A private PgBouncer in transaction mode in front of the test PostgreSQL, for one test session.

It listens on a free 127.0.0.1 port, trusts the test user (listed in its ``auth_file``) and
connects to the database of ``ANARCHON_TEST_POSTGRES_URL`` with few server connections
(`POOL_SIZE`), so that many client connections take turns on them: a store that left state on
its session (a ``SET``, a prepared statement, an advisory lock) would hand it to another client.

``ignore_startup_parameters = options`` is the setting the docs tell users to add: the store
sends ``statement_timeout`` and ``lock_timeout`` in libpq's ``options``, which PgBouncer (1.18)
otherwise refuses at login; ``ignore_options=False`` leaves it out, to check that refusal.

The binary is ``ANARCHON_TEST_PGBOUNCER`` (``scripts/pgbouncer`` installs Debian's package and
sets it), else ``pgbouncer`` on the PATH or in /usr/sbin.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

from .private_server import free_port

__all__ = ["POOL_SIZE", "PgBouncer", "binary", "missing_reason"]

POOL_SIZE = 2
"""Server connections per (database, user): fewer than any store's pool."""
START_TIMEOUT_S = 15.0


def binary() -> str | None:
    given = os.environ.get("ANARCHON_TEST_PGBOUNCER")
    if given:
        return given if os.access(given, os.X_OK) else None
    found = shutil.which("pgbouncer")
    if found is not None:
        return found
    return "/usr/sbin/pgbouncer" if os.access("/usr/sbin/pgbouncer", os.X_OK) else None


def missing_reason() -> str:
    """Why there is no PgBouncer to run: the install script's reason when it failed."""
    error = os.environ.get("ANARCHON_TEST_PGBOUNCER_ERROR")
    where = os.environ.get("ANARCHON_TEST_PGBOUNCER", "pgbouncer (PATH or /usr/sbin)")
    reason = f"scripts/pgbouncer failed: {error}" if error else f"{where} is not installed"
    return f"{reason}; run `bash scripts/pgbouncer` (scripts/dev test does) as root"


def _quoted(value: object) -> str:
    """A value of a PgBouncer connection string (libpq's quoting)."""
    text = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{text}'"


class PgBouncer:
    """One PgBouncer process (not a daemon) with its ini, auth file and log in a temp dir.

    ``url`` reaches the server of `server_url` through it: the same user and database, no
    password (PgBouncer trusts the user, and logs in to the server with the password of
    `server_url`, if any)."""

    def __init__(self, server_url: str, *, ignore_options: bool = True) -> None:
        server = conninfo_to_dict(server_url)
        self.user = str(server.get("user") or "postgres")
        self.dbname = str(server.get("dbname") or self.user)
        self.port = free_port()
        self.url = f"postgresql://{self.user}@127.0.0.1:{self.port}/{self.dbname}"
        self.admin_url = f"postgresql://{self.user}@127.0.0.1:{self.port}/pgbouncer"
        self.directory = Path(tempfile.mkdtemp(prefix="anarchon-pgbouncer-"))
        self.log = self.directory / "pgbouncer.log"
        self._process: subprocess.Popen[bytes] | None = None
        target = " ".join(
            f"{key}={_quoted(server[key])}"
            for key in ("host", "port", "dbname", "user", "password")
            if server.get(key)
        )
        ignore = "ignore_startup_parameters = options\n" if ignore_options else ""
        (self.directory / "userlist.txt").write_text(f'"{self.user}" ""\n')
        (self.directory / "pgbouncer.ini").write_text(
            f"[databases]\n{self.dbname} = {target}\n\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self.directory / 'userlist.txt'}\n"
            f"admin_users = {self.user}\n"
            f"pool_mode = transaction\ndefault_pool_size = {POOL_SIZE}\n"
            "min_pool_size = 0\nreserve_pool_size = 0\nmax_client_conn = 1000\n"
            f"{ignore}"
        )

    def start(self, executable: str) -> None:
        """Run it and wait until it answers a query through to the server; `RuntimeError` with
        its log when it does not within `START_TIMEOUT_S`."""
        command = [executable, str(self.directory / "pgbouncer.ini")]
        if os.geteuid() == 0:  # PgBouncer refuses to run as root
            command[1:1] = ["-u", "postgres"]
            shutil.chown(self.directory, "postgres")
            for path in self.directory.iterdir():
                shutil.chown(path, "postgres")
        with self.log.open("wb") as log:
            self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"PgBouncer exited with {self._process.returncode}: {self.tail()}"
                )
            try:
                with psycopg.connect(self.url, connect_timeout=2, autocommit=True) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError as exc:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"PgBouncer did not answer within {START_TIMEOUT_S} s ({exc}): {self.tail()}"
                    ) from None
            time.sleep(0.05)

    def show(self, what: str) -> list[dict[str, Any]]:
        """``SHOW <what>`` on the admin console (simple query protocol only: a client cursor)."""
        with psycopg.connect(
            self.admin_url,
            autocommit=True,
            cursor_factory=psycopg.ClientCursor,
            row_factory=dict_row,
        ) as conn:
            return conn.execute(f"SHOW {what}").fetchall()

    def version(self) -> str:
        """``PgBouncer 1.18.0``, from its admin console."""
        return str(self.show("VERSION")[0]["version"])

    def server_connections(self) -> int:
        """The test database's server connections open now, in any state."""
        states = ("sv_active", "sv_idle", "sv_used", "sv_tested", "sv_login")
        pools = [p for p in self.show("POOLS") if p["database"] == self.dbname]
        return sum(int(pool[state]) for pool in pools for state in states)

    def tail(self, lines: int = 15) -> str:
        try:
            return " | ".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()  # SIGTERM: PgBouncer's immediate shutdown
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)
