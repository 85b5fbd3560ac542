"""A PostgreSQL server of a test's own, run by the pgserver wheel's own ``initdb`` and ``pg_ctl``,
for tests that restart it (the session's server, ``conftest.pg_server``, is shared and never is).

It listens on a Unix socket in its data folder only. The folder is made with ``tempfile`` (not
under pytest's 0700 temp folder): as root the server runs as pgserver's own system user, who
must be able to reach it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg


class OwnServer:
    """``initdb`` + ``pg_ctl start`` in a new folder; ``restart(mode)``, ``terminate(database)``,
    ``stop()`` and ``start()`` again; ``close()`` stops it and removes the folder."""

    def __init__(self) -> None:
        import pgserver  # noqa: F401  the wheel: its binaries, and its user when run as root
        from pgserver._commands import POSTGRES_BIN_PATH
        from pgserver.utils import ensure_user_exists

        self.bin = POSTGRES_BIN_PATH
        self.user = None
        self.data = Path(tempfile.mkdtemp(prefix="polaris-own-pg-"))
        self.data.chmod(0o755)
        if os.geteuid() == 0:
            self.user = "pgserver"
            entry = ensure_user_exists(self.user)
            os.chown(self.data, entry.pw_uid, entry.pw_gid)
        self.pgdata = self.data / "pgdata"
        self._run("initdb", "-D", self.pgdata, "--auth=trust", "--encoding=utf8", "-U", "postgres")
        self.start()
        self.uri = f"postgresql://postgres@/postgres?host={self.data}"

    def _run(self, exe: str, *args: object) -> str:
        done = subprocess.run([str(self.bin / exe), *map(str, args)], user=self.user, capture_output=True, text=True,
                              timeout=120, cwd=self.data)
        if done.returncode:
            raise RuntimeError(f"{exe} {' '.join(map(str, args))} failed: {done.stderr}{done.stdout}")
        return done.stdout

    def _ctl(self, action: str, *args: object) -> None:
        self._run("pg_ctl", "-D", self.pgdata, "-w", "-t", "60", "-l", self.data / "log", *args, action)

    def database(self, name: str, template: str | None = None) -> str:
        """A new database ``name`` on this server (a copy of database ``template``, whose sessions
        are ended first); its URI."""
        with psycopg.connect(self.uri, autocommit=True) as conn:
            if template is not None:
                self.terminate(template)
            conn.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
        return self.uri_of(name)

    def uri_of(self, database: str) -> str:
        """The URI of ``database`` on this server."""
        return f"postgresql://postgres@/{database}?host={self.data}"

    def rename(self, database: str, to: str) -> None:
        """``ALTER DATABASE ... RENAME``, its sessions ended first."""
        with psycopg.connect(self.uri, autocommit=True) as conn:
            self.terminate(database)
            conn.execute(f'ALTER DATABASE "{database}" RENAME TO "{to}"')

    def restart(self, mode: str = "fast") -> None:
        """``pg_ctl restart -m MODE``: every session is ended (``immediate``: without a shutdown)."""
        self._ctl("restart", "-m", mode)

    def terminate(self, database: str) -> int:
        """``pg_terminate_backend`` for every other session on ``database`` (what ``idle_session_timeout``
        or a pooler's reset does to a session); how many were ended."""
        with psycopg.connect(self.uri, autocommit=True) as conn:
            return len(conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s"
                                    " AND pid <> pg_backend_pid()", (database,)).fetchall())

    def start(self) -> None:
        """``pg_ctl start``: listening on a socket in the folder only."""
        self._ctl("start", "-o", f"-h '' -k {self.data}")

    def stop(self) -> None:
        """``pg_ctl stop -m fast``: the server is down until ``start()``."""
        self._ctl("stop", "-m", "fast")

    def close(self) -> None:
        """Stop the server (if it runs) and remove its folder."""
        try:
            if (self.pgdata / "postmaster.pid").exists():
                self.stop()
        finally:
            shutil.rmtree(self.data, ignore_errors=True)
