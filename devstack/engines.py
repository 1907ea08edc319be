"""PostgreSQL, Redis and nginx (Debian's packages) as `ServiceProcess`es on loopback.

Each keeps its data and configuration in a folder of ours (var/cluster/, or a temporary folder
in tests), listens on 127.0.0.1 only, on a port we pass, and never touches the system's own
instance (/etc/postgresql, /var/lib/redis, /etc/nginx). scripts/install-services.sh installs the
packages.

Running as root (CI does): PostgreSQL refuses to, so its processes run as the `postgres` user
the Debian package creates (without root's groups), and its data folder belongs to that user;
nginx's master runs as root and its workers as `nobody`. When the `postgres` user cannot reach
the folder we were given (the checkout is in a folder only root can enter: a home directory,
`mktemp -d`), the data goes to a private folder of its own in the system's temporary folder
(owner `postgres`, mode 0700) and our folder holds a symbolic link to it; `remove_postgres_data`
removes both.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from devstack.services import HOST, ServiceProcess, free_port

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


def _as_root() -> bool:
    return os.geteuid() == 0


def postgres_bin(program: str) -> str:
    """Path of a PostgreSQL server program (initdb, postgres, pg_isready, psql)."""
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name), reverse=True
    )
    for folder in versions:
        if (folder / program).exists():
            return str(folder / program)
    found = shutil.which(program)
    if found:
        return found
    raise RuntimeError(f"PostgreSQL's {program} is not installed: run scripts/install-services.sh")


# A data folder placed in the temporary folder (see the module's docstring) is <PRIVATE_PREFIX>*/data.
PRIVATE_PREFIX = "rasa-mcp-bridge-pg-"
# In that private folder: the path of the link that points at it (to find abandoned ones).
LINK_RECORD = "link"


def _reaches(user: str, folder: Path) -> bool:
    """Whether `user` (with its own group only) can get into `folder`: every folder on the way
    must let it through. Asked of the system, as that user, so ACLs count too."""
    result = subprocess.run(
        ["test", "-x", str(folder)],
        user=user,
        group=user,
        extra_groups=[],
        cwd="/",
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        capture_output=True,
    )
    return result.returncode == 0


def _write_new(path: Path, text: str, owner: str | None) -> None:
    """Write `text` into a new file `path`, mode 0600 from the start; never through a link."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    if owner:
        shutil.chown(path, owner, owner)


def _private_folder(link: Path) -> Path | None:
    """The private folder `link` points into, if it is one of ours."""
    if not link.is_symlink():
        return None
    folder = link.resolve().parent
    return folder if folder.name.startswith(PRIVATE_PREFIX) else None


def remove_postgres_data(location: Path) -> None:
    """Remove a PostgreSQL data folder made by `Postgres`: the folder itself, or the link and the
    private folder it points into. The server must be stopped."""
    location = location.absolute()
    private = _private_folder(location)
    if private is not None:
        shutil.rmtree(private, ignore_errors=True)
        location.unlink(missing_ok=True)
    elif location.is_symlink():
        location.unlink()
    else:
        shutil.rmtree(location, ignore_errors=True)


def _sweep_abandoned(base: Path) -> None:
    """Remove private data folders of ours whose link is gone or points elsewhere (`rm -rf var`,
    `make clean`) and whose server is not running: nothing can reach their data any more."""
    for folder in base.glob(f"{PRIVATE_PREFIX}*"):
        try:
            if folder.is_symlink() or not folder.is_dir():
                continue
            link = Path((folder / LINK_RECORD).read_text().strip())
            if _private_folder(link) == folder or (folder / "data" / "postmaster.pid").exists():
                continue
        except OSError:
            continue
        shutil.rmtree(folder, ignore_errors=True)


class Postgres:
    """One PostgreSQL cluster in `data_dir`; `service(port)` runs it.

    Password authentication (SCRAM) for every TCP connection; the superuser is `postgres` with
    `password`. No Unix socket: TCP on 127.0.0.1 only. `durable=False` (tests) turns fsync off.
    As root, `data_dir` may become a link to a private folder (see the module's docstring).
    """

    def __init__(self, data_dir: Path, password: str, *, durable: bool = True) -> None:
        # Where the caller keeps it; the data itself is at `data_dir` (the link followed).
        self.location = data_dir.absolute()
        self.password = password
        self.durable = durable
        self.user = "postgres" if _as_root() else None
        self.port = 0

    @property
    def data_dir(self) -> Path:
        return self.location.resolve()

    def _chown(self, path: Path) -> None:
        if self.user:
            shutil.chown(path, self.user, self.user)

    def _unreachable(self, folder: Path) -> bool:
        return self.user is not None and not _reaches(self.user, folder)

    def _place(self) -> Path:
        """The folder a new cluster's data goes to: `location`, or, when the `postgres` user
        cannot reach that, `<tmp>/<PRIVATE_PREFIX>XXXX/data` with `location` a link to it."""
        if self.location.is_symlink():  # its target is gone (the temporary folder was emptied)
            self.location.unlink()
        self.location.parent.mkdir(parents=True, exist_ok=True)
        if not self._unreachable(self.location.parent):
            return self.location
        base = Path(tempfile.gettempdir())
        if self.user is None or self._unreachable(base):
            raise RuntimeError(
                f"PostgreSQL runs as the `{self.user}` user, which can reach neither "
                f"{self.location.parent} nor the temporary folder {base}: put the checkout in a "
                "folder every user can pass through (`chmod o+x` on each folder above it), or set "
                "TMPDIR to one (such as /tmp)"
            )
        _sweep_abandoned(base)
        private = Path(tempfile.mkdtemp(prefix=PRIVATE_PREFIX, dir=base))  # mode 0700
        data = private / "data"
        data.mkdir(mode=0o700)
        self.location.symlink_to(data, target_is_directory=True)
        # After the link: a sweep that finds the record always finds the link too.
        (private / LINK_RECORD).write_text(f"{self.location}\n")
        self._chown(private)
        self._chown(data)
        print(
            f"note: the `{self.user}` user cannot reach {self.location.parent}, so PostgreSQL's data "
            f"is in {data} (owner {self.user}, mode 0700); {self.location} links to it",
            flush=True,
        )
        return data

    def init(self) -> None:
        """initdb, once: a second call on an initialised folder does nothing."""
        if (self.data_dir / "PG_VERSION").exists():
            return
        data_dir = self._place()
        data_dir.mkdir(parents=True, exist_ok=True)
        data_dir.chmod(0o700)
        self._chown(data_dir)
        # Next to the data folder (initdb wants that empty), where the `postgres` user reaches it.
        pwfile = data_dir.parent / f".{data_dir.name}.pw"
        _write_new(pwfile, self.password + "\n", self.user)
        try:
            result = subprocess.run(
                [postgres_bin("initdb"), "-D", str(data_dir), "-U", "postgres", "-E", "UTF8"]
                + ["--locale=C", "--auth-host=scram-sha-256", "--auth-local=scram-sha-256"]
                + [f"--pwfile={pwfile}", "--no-instructions"],
                capture_output=True,
                text=True,
                timeout=120,
                user=self.user,
                group=self.user,
                extra_groups=[] if self.user else None,
                cwd=data_dir.parent,
            )
        finally:
            pwfile.unlink(missing_ok=True)
        if result.returncode != 0:
            raise RuntimeError(f"initdb failed ({result.returncode}):\n{result.stdout}{result.stderr}")

    def remove(self) -> None:
        """Remove the data (and the private folder it may be in). The server must be stopped."""
        remove_postgres_data(self.location)

    def service(
        self, port: int | None = None, *, log_path: Path | None = None, detached: bool = False
    ) -> ServiceProcess:
        self.init()
        if self._unreachable(self.data_dir):
            raise RuntimeError(
                f"PostgreSQL's data folder {self.data_dir} is in a folder the `{self.user}` user "
                f"cannot reach: remove {self.location} (a new one is made where it can), or let "
                "it through (`chmod o+x` on each folder above it)"
            )
        self.port = port or free_port()
        args = [postgres_bin("postgres"), "-D", str(self.data_dir), "-h", HOST, "-p", str(self.port)]
        args += ["-c", "unix_socket_directories=", "-c", "shared_buffers=32MB", "-c", "max_connections=100"]
        if not self.durable:
            args += ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log_path.touch()
        return ServiceProcess(
            "postgres",
            args,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"},
            ready_check=self.ready,
            url=f"postgresql://{HOST}:{self.port}",  # no password: this one gets printed
            log_path=log_path,
            detached=detached,
            user=self.user,
            start_timeout=60.0,
        )

    def ready(self) -> bool:
        result = subprocess.run(
            [postgres_bin("pg_isready"), "-q", "-h", HOST, "-p", str(self.port)], capture_output=True
        )
        return result.returncode == 0

    def url(self, database: str, user: str = "postgres", password: str | None = None) -> str:
        secret = self.password if password is None else password
        return f"postgresql://{user}:{secret}@{HOST}:{self.port}/{database}"

    def sql(self, statements: Sequence[str], database: str = "postgres") -> str:
        """Run SQL as the superuser with psql; its output. Raises when a statement fails.

        The statements go to psql's standard input, not its arguments: a `PASSWORD '...'` in one
        would otherwise be in the process list for anyone to read."""
        args = [postgres_bin("psql"), "-h", HOST, "-p", str(self.port), "-U", "postgres", "-d", database]
        args += ["-v", "ON_ERROR_STOP=1", "-qAt", "-f", "-"]
        result = subprocess.run(
            args,
            input="".join(statement.rstrip().rstrip(";") + ";\n" for statement in statements),
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PGPASSWORD": self.password, "PGCONNECT_TIMEOUT": "5"},
        )
        if result.returncode != 0:
            raise RuntimeError(f"psql failed ({result.returncode}): {result.stderr.strip()}")
        return result.stdout

    def create_database(self, name: str, owner: str, password: str) -> str:
        """A role `owner` with `password` and a database `name` it owns (both kept if present);
        returns the database's URL for that role."""
        exists = self.sql([f"SELECT 1 FROM pg_roles WHERE rolname = '{owner}'"]).strip()
        verb = "ALTER" if exists else "CREATE"
        quoted = password.replace("'", "''")
        self.sql([f"{verb} ROLE {owner} LOGIN PASSWORD '{quoted}'"])
        if not self.sql([f"SELECT 1 FROM pg_database WHERE datname = '{name}'"]).strip():
            self.sql([f"CREATE DATABASE {name} OWNER {owner}"])
        return self.url(name, owner, password)


@contextlib.contextmanager
def scratch_postgres(prefix: str) -> Iterator[Postgres]:
    """A PostgreSQL server of its own for a test module, started, and its data folder removed after. Not
    under pytest's tmp_path: as root the server runs as `postgres`, which must reach the folder."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    folder.chmod(0o755)
    server = Postgres(folder / "data", secrets.token_urlsafe(16), durable=False)
    service = server.service()
    try:
        service.start()
        yield server
    finally:
        service.close()
        shutil.rmtree(folder, ignore_errors=True)


def redis_server(
    folder: Path,
    password: str,
    port: int | None = None,
    *,
    log_path: Path | None = None,
    detached: bool = False,
) -> ServiceProcess:
    """A Redis server on 127.0.0.1 with `password`, nothing persisted (a lock store needs no
    history); its configuration file (with the password) is private to us."""
    port = port or free_port()
    folder.mkdir(parents=True, exist_ok=True)
    conf = folder / "redis.conf"
    conf.write_text(
        "\n".join(
            [
                f"bind {HOST}",
                f"port {port}",
                "protected-mode yes",
                f"dir {folder}",
                'save ""',
                "appendonly no",
                "daemonize no",
                'logfile ""',
                f"requirepass {password}",
            ]
        )
        + "\n"
    )
    conf.chmod(0o600)

    def ready() -> bool:
        try:
            with socket.create_connection((HOST, port), timeout=1.0) as sock:
                sock.sendall(f"AUTH {password}\r\nPING\r\n".encode())
                answer = b""
                while answer.count(b"\r\n") < 2:
                    chunk = sock.recv(256)
                    if not chunk:
                        return False
                    answer += chunk
                return answer.endswith(b"+PONG\r\n")
        except OSError:
            return False

    return ServiceProcess(
        "redis",
        [REDIS_SERVER, str(conf)],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        ready_check=ready,
        url=f"redis://{HOST}:{port}/0",
        log_path=log_path,
        detached=detached,
    )


HEALTH_PATH = "/__nginx"


def nginx_config(folder: Path, listeners: dict[str, tuple[int, Sequence[str]]], access_log: Path) -> Path:
    """nginx.conf in `folder`: for each name, a server on 127.0.0.1:port balancing over the
    upstream addresses (round robin).

    `listeners[name] = (port, ["127.0.0.1:5005", ...])`. nginx passes a request on to the next
    replica when one refuses the connection; a POST that already reached a replica is never sent to
    another (no `non_idempotent`): a message that stalls one replica must not stall the next, and
    only the bridge knows which calls are safe to repeat (it repeats those itself, under their
    idempotency key). Every answer says which replica gave it (`X-Upstream`), and the access log has
    one line per request with the replica and the status.
    """
    temp = folder / "tmp"
    temp.mkdir(parents=True, exist_ok=True)
    if _as_root():
        shutil.chown(temp, "nobody")
    blocks = []
    for name, (port, upstreams) in listeners.items():
        servers = "".join(f"        server {address} max_fails=1 fail_timeout=3s;\n" for address in upstreams)
        retry = "error timeout http_502 http_503"
        blocks.append(
            f"""    upstream {name} {{
{servers}        keepalive 32;
    }}
    server {{
        listen {HOST}:{port};
        location = {HEALTH_PATH} {{ return 200 "ok\\n"; }}
        location / {{
            proxy_pass http://{name};
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_connect_timeout 2s;
            proxy_read_timeout 90s;
            proxy_next_upstream {retry};
            proxy_next_upstream_tries 2;
            proxy_buffering off;
            add_header X-Upstream $upstream_addr always;
        }}
    }}
"""
        )
    user = "user nobody nogroup;\n" if _as_root() else ""
    conf = folder / "nginx.conf"
    conf.write_text(
        f"""# Written by devstack/engines.py for devstack/cluster.py; regenerated on every start.
{user}worker_processes 1;
daemon off;
pid {folder / "nginx.pid"};
error_log {folder / "error.log"} warn;
events {{ worker_connections 1024; }}
http {{
    log_format upstream '$time_iso8601 $server_port "$request_method $uri" $status '
                        '$upstream_addr $upstream_status $request_time';
    client_body_temp_path {temp / "body"};
    proxy_temp_path {temp / "proxy"};
    fastcgi_temp_path {temp / "fastcgi"};
    uwsgi_temp_path {temp / "uwsgi"};
    scgi_temp_path {temp / "scgi"};
    # A body up to the limit stays in memory: the workers (`nobody` as root) may not reach var/.
    client_max_body_size 10m;
    client_body_buffer_size 10m;
    server_tokens off;
{"".join(blocks)}    access_log {access_log} upstream;
}}
"""
    )
    return conf


def nginx_server(
    folder: Path,
    listeners: dict[str, tuple[int, Sequence[str]]],
    *,
    log_path: Path | None = None,
    detached: bool = False,
) -> ServiceProcess:
    """nginx with `nginx_config`; ready when the first listener answers its health path."""
    folder.mkdir(parents=True, exist_ok=True)
    conf = nginx_config(folder, listeners, folder / "access.log")
    first_port = next(iter(listeners.values()))[0]
    return ServiceProcess(
        "nginx",
        [NGINX, "-p", str(folder), "-c", str(conf), "-e", str(folder / "error.log")],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        ready_url=f"http://{HOST}:{first_port}{HEALTH_PATH}",
        url=f"http://{HOST}:{first_port}",
        log_path=log_path,
        detached=detached,
    )
