"""Fault-test fixtures: PRIVATE Redis and PostgreSQL instances on free loopback ports, and the Assay
processes (API, workers, beat) as subprocesses pointed at them.

Nothing here touches the shared services' data: the shared Postgres only hosts this run's own test
database (``tests.conftest.database``); brokers are private ``redis-server`` processes, and the
Postgres-restart test runs its own cluster (``initdb`` as the ``postgres`` OS user). Every process
started here runs in its own process group and is killed at teardown, pass or fail; every directory
made here is removed. When a test fails, the tails of the processes' logs are printed in its report;
set ``ASSAY_FAULTS_KEEP_LOGS=/some/dir`` to keep every process's whole log there.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import API_KEY, REPO, TEST_ENV, wait_for, worker_env
from tests.ports import free_port

EXAMPLES = REPO / "examples" / "kql_items.jsonl"
REDIS_SERVER = shutil.which("redis-server")


def _pg_bindir() -> str | None:
    def version(path: str) -> float:
        try:
            return float(Path(path).parent.name)
        except ValueError:
            return 0.0

    for bindir in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True):
        if os.access(f"{bindir}/initdb", os.X_OK) and os.access(f"{bindir}/pg_ctl", os.X_OK):
            return bindir
    initdb = shutil.which("initdb")
    return os.path.dirname(initdb) if initdb and shutil.which("pg_ctl") else None


PG_BINDIR = _pg_bindir()


def plain_pg_url(sqlalchemy_url: str) -> str:
    """``postgresql+psycopg://...`` → ``postgresql://...`` for psycopg itself."""
    return sqlalchemy_url.replace("postgresql+psycopg://", "postgresql://", 1)


# --- processes --------------------------------------------------------------------------------------


class Service:
    """One subprocess in its own session (process group), logging to a file in the fault directory."""

    def __init__(self, name: str, argv: list[str], *, env: dict[str, str], log_dir: Path, cwd: Path | None = None) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.cwd = cwd or REPO
        self.log = log_dir / f"{name}-{uuid.uuid4().hex[:6]}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Service:
        with self.log.open("ab") as handle:
            self.proc = subprocess.Popen(
                self.argv, env=self.env, cwd=str(self.cwd), stdout=handle, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_log(self, marker: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if marker in self.text():
                return
            if not self.alive():
                raise RuntimeError(f"{self.name} exited early (rc={self.proc.returncode if self.proc else None}):\n{self.tail()}")
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not log {marker!r} within {timeout}s:\n{self.tail()}")

    def _signal_group(self, sig: int) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, sig)  # the whole group, even if its leader is already gone
        except (ProcessLookupError, PermissionError):
            pass

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the process group (SIGKILL by default) and reap the leader."""
        if self.proc is None:
            return
        self._signal_group(sig)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._signal_group(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM the group, then SIGKILL whatever is left."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self._signal_group(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        self._signal_group(signal.SIGKILL)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass

    def tail(self, chars: int = 4000) -> str:
        return self.text()[-chars:]


class Processes:
    """Everything a test started; torn down in reverse order, whatever happened."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.logs = root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.services: list[Service] = []
        self.cleanups: list[Any] = []

    def start(self, name: str, argv: list[str], *, env: dict[str, str], cwd: Path | None = None) -> Service:
        service = Service(name, argv, env=env, log_dir=self.logs, cwd=cwd)
        self.services.append(service)  # registered before it starts, so a failed start is still reaped
        return service.start()

    def worker(self, env: dict[str, str], *, queues: str = "metrics,judge,control", concurrency: int = 4) -> Service:
        worker = self.start(
            "worker",
            [
                sys.executable, "-m", "celery", "-A", "assay.workers.app", "worker", "-Q", queues,
                "-P", "threads", "-c", str(concurrency), "-l", "INFO", "--without-mingle", "--without-gossip",
                "-n", f"fault-{uuid.uuid4().hex[:6]}@%h",
            ],
            env=env,
        )
        worker.wait_log("ready.", timeout=60)
        return worker

    def beat(self, env: dict[str, str]) -> Service:
        """``celery beat``: the real reconciler schedule (every ASSAY_RECONCILE_INTERVAL_SECONDS)."""
        home = self.root / f"beat-{uuid.uuid4().hex[:6]}"
        home.mkdir()
        beat = self.start(
            "beat",
            [sys.executable, "-m", "celery", "-A", "assay.workers.app", "beat", "-l", "INFO", "-s", str(home / "schedule")],
            env=env,
            cwd=home,
        )
        beat.wait_log("beat: Starting", timeout=60)
        return beat

    def close(self, *, dump: bool) -> None:
        for service in reversed(self.services):
            try:
                service.stop()
            except Exception as exc:  # keep tearing down the rest
                print(f"[faults] stopping {service.name} failed: {exc!r}", file=sys.stderr)
        for cleanup in reversed(self.cleanups):
            try:
                cleanup()
            except Exception as exc:
                print(f"[faults] cleanup failed: {exc!r}", file=sys.stderr)
        keep = os.environ.get("ASSAY_FAULTS_KEEP_LOGS")
        if keep:  # debugging aid: keep every log of the test under this directory
            shutil.copytree(self.logs, Path(keep) / f"{self.root.name}", dirs_exist_ok=True)
        if dump:
            for service in self.services:
                print(f"\n===== {service.name} (pid {service.proc.pid if service.proc else '-'}) {service.log.name} =====")
                print(service.tail(6000))


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture
def fault_dir() -> Iterator[Path]:
    """A scratch directory for this test's instances and logs, removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="assay-faults-"))
    root.chmod(0o755)  # the postgres OS user must be able to reach its data directory inside
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def procs(fault_dir: Path, request: pytest.FixtureRequest) -> Iterator[Processes]:
    processes = Processes(fault_dir)
    try:
        yield processes
    finally:
        rep = getattr(request.node, "rep_call", None)
        processes.close(dump=rep is None or rep.failed)


# --- a private Redis --------------------------------------------------------------------------------


class RedisServer:
    """``redis-server`` on a free loopback port: no persistence, so a restart comes back empty."""

    def __init__(self, procs: Processes) -> None:
        assert REDIS_SERVER is not None
        self.procs = procs
        self.port = free_port()
        self.dir = procs.root / f"redis-{self.port}"
        self.dir.mkdir()
        self.service: Service | None = None
        self.restarts = 0

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def client(self, db: int = 0):  # type: ignore[no-untyped-def]
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, db=db, socket_timeout=5, socket_connect_timeout=2)

    def start(self) -> RedisServer:
        argv = [
            REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--daemonize", "no", "--dir", str(self.dir), "--protected-mode", "yes",
        ]
        deadline = time.monotonic() + 30
        while True:  # the port can stay busy for a moment after a SIGKILL
            self.service = self.procs.start("redis", argv, env={"PATH": os.environ.get("PATH", "")}, cwd=self.dir)
            try:
                wait_for(self._ping, timeout=10, interval=0.05, message=f"redis on {self.port}")
                return self
            except AssertionError:
                self.service.kill()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start on {self.port}:\n{self.service.tail()}") from None

    def _ping(self) -> bool:
        if self.service is None or not self.service.alive():
            return False
        try:
            return bool(self.client().ping())
        except Exception:
            return False

    def kill(self) -> None:
        assert self.service is not None
        self.service.kill(signal.SIGKILL)

    def restart_empty(self, down_seconds: float = 0.0) -> None:
        """SIGKILL the server and start a new, empty one on the same port."""
        before = self.client().info("server")["run_id"]
        self.kill()
        time.sleep(down_seconds)
        self.start()
        self.restarts += 1
        assert self.client().info("server")["run_id"] != before, "a new (empty) server must answer"


@pytest.fixture
def private_redis(procs: Processes) -> RedisServer:
    if REDIS_SERVER is None:
        pytest.skip("FAULT TESTS SKIPPED: redis-server is not installed (apt-get install redis-server)")
    return RedisServer(procs).start()


# --- a private PostgreSQL cluster ---------------------------------------------------------------------


class PostgresCluster:
    """A throw-away cluster: ``initdb`` as the ``postgres`` OS user (initdb refuses root), trust auth,
    listening on 127.0.0.1:<free port> with its socket in the cluster's own directory."""

    def __init__(self, root: Path) -> None:
        assert PG_BINDIR is not None
        self.bindir = PG_BINDIR
        self.root = root / "pg"
        self.data = self.root / "data"
        self.logfile = self.root / "server.log"
        self.port = free_port()
        self.root.mkdir()
        self.as_postgres: list[str] = []
        if os.geteuid() == 0:
            import pwd

            pw = pwd.getpwnam("postgres")
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
            self.as_postgres = ["runuser", "-u", "postgres", "--"]
        self.root.chmod(0o700)
        self.initialized = False

    def _run(self, *args: str, timeout: float = 120.0) -> str:
        proc = subprocess.run(
            [*self.as_postgres, *args], capture_output=True, text=True, timeout=timeout, cwd=str(self.root),
            env={"PATH": os.environ.get("PATH", ""), "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"},
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}\n{self.log_tail()}")
        return proc.stdout

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.logfile.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def init(self) -> PostgresCluster:
        self._run(
            f"{self.bindir}/initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
            "--locale=C", "--no-sync",
        )
        self.initialized = True
        return self

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c full_page_writes=off -c max_connections=200"
        )
        self._run(f"{self.bindir}/pg_ctl", "-D", str(self.data), "-l", str(self.logfile), "-w", "-t", "60", "-o", options, "start")

    def stop(self, mode: str = "fast") -> None:
        self._run(f"{self.bindir}/pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def url(self, dbname: str = "assay") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, dbname: str = "assay") -> str:
        import psycopg

        with psycopg.connect(plain_pg_url(self.url("postgres")), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{dbname}"')
        return self.url(dbname)

    def destroy(self) -> None:
        if self.running():
            try:
                self.stop("immediate")
            except Exception:
                pid_file = self.data / "postmaster.pid"
                try:
                    os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)
                except (OSError, ValueError, IndexError):
                    pass
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def private_postgres(procs: Processes) -> PostgresCluster:
    """A private cluster with a migrated ``assay`` database; stopped and removed afterwards."""
    if PG_BINDIR is None:
        pytest.skip("FAULT TESTS SKIPPED: PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        pytest.skip("FAULT TESTS SKIPPED: running as root but runuser is missing (initdb refuses root)")
    cluster = PostgresCluster(procs.root)
    procs.cleanups.append(cluster.destroy)
    cluster.init().start()
    from assay.scoring.store.db import migrate

    migrate(cluster.create_database("assay"))
    return cluster


# --- the API as a subprocess ----------------------------------------------------------------------------


class ApiServer:
    """``uvicorn assay.api.app:create_app --factory`` on a free loopback port; can be killed and restarted."""

    def __init__(self, procs: Processes, env: dict[str, str]) -> None:
        self.procs = procs
        self.env = env
        self.port = free_port()
        self.service: Service | None = None
        self.base_url = f"http://127.0.0.1:{self.port}"

    def start(self) -> ApiServer:
        self.service = self.procs.start(
            "api",
            [
                sys.executable, "-m", "uvicorn", "assay.api.app:create_app", "--factory", "--host", "127.0.0.1",
                "--port", str(self.port), "--log-level", "warning", "--no-access-log",
            ],
            env=self.env,
        )
        deadline = time.monotonic() + 60
        with httpx.Client(trust_env=False, timeout=2) as http:
            while time.monotonic() < deadline:
                if not self.service.alive():
                    raise RuntimeError(f"the API exited early:\n{self.service.tail()}")
                try:
                    if http.get(f"{self.base_url}/healthz").status_code == 200:
                        return self
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
        raise RuntimeError(f"the API did not come up on {self.port}:\n{self.service.tail()}")

    def kill(self) -> None:
        assert self.service is not None
        self.service.kill(signal.SIGKILL)

    def client(self, timeout: float = 30.0) -> httpx.Client:
        # trust_env=False: test traffic stays on loopback whatever proxy the environment names.
        return httpx.Client(
            base_url=self.base_url, headers={"Authorization": f"Bearer {API_KEY}"}, trust_env=False, timeout=timeout
        )


# --- items, batches and the exactly-once checks ----------------------------------------------------------


def kql_items(n: int, tag: str | None = None) -> list[dict[str, Any]]:
    """``n`` KQL items cycled from the shipped examples, each with a unique prompt (so a unique judge
    item key in the fake) and a unique id."""
    tag = tag or uuid.uuid4().hex[:8]
    examples = [json.loads(line) for line in EXAMPLES.read_text().splitlines() if line.strip()]
    items = []
    for i in range(n):
        item = dict(examples[i % len(examples)])
        item["id"] = f"{item['id']}-{tag}-{i}"
        item["prompt"] = f"{item['prompt']} (fault run {tag}, item {i})"
        items.append(item)
    return items


def jsonl(items: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(item).encode() + b"\n" for item in items)


def submit(http: httpx.Client, body: bytes, suite: str = "kql", **headers: str) -> str:
    r = http.post("/api/v1/batches", params={"suite": suite}, content=body, headers=headers)
    assert r.status_code == 202, r.text
    return r.json()["batch_id"]


_BATCH_ROW_SQL = (
    "SELECT b.status, (SELECT count(*) FROM scores s WHERE s.batch_id = b.id"
    " AND s.status NOT IN ('pending', 'in_progress')), b.total_items FROM batches b WHERE b.id = %s"
)


def batch_row(db_url: str, batch_id: str) -> tuple[str, int, int] | None:
    """(status, finished scores, total_items) straight from the store; None while it is unreachable."""
    import psycopg

    try:
        with psycopg.connect(plain_pg_url(db_url), connect_timeout=3) as conn:
            row = conn.execute(
                _BATCH_ROW_SQL, (batch_id,)
            ).fetchone()
    except psycopg.OperationalError:
        return None
    return (row[0], row[1], row[2]) if row else None


def scores_landed(db_url: str, batch_id: str) -> int:
    import psycopg

    try:
        with psycopg.connect(plain_pg_url(db_url), connect_timeout=3) as conn:
            row = conn.execute(
                "SELECT count(*) FROM scores WHERE batch_id = %s AND status = 'completed'", (batch_id,)
            ).fetchone()
    except psycopg.OperationalError:
        return -1
    return int(row[0]) if row else 0


def wait_batch_finished(db_url: str, batch_id: str, timeout: float = 150.0) -> tuple[str, int, int]:
    def finished() -> tuple[str, int, int] | None:
        row = batch_row(db_url, batch_id)
        return row if row and row[0] not in ("planning", "running") else None

    return wait_for(finished, timeout=timeout, interval=0.5, message=f"batch {batch_id} to finish")


def assert_scored_exactly_once(db_url: str, batch_id: str, n: int, components: int = 4) -> None:
    """Every item scored exactly once: completed batch, finished == total == n, one completed score
    per item, every component landed ok exactly once (landed count == total)."""
    import psycopg

    with psycopg.connect(plain_pg_url(db_url)) as conn:
        status, finished, total = conn.execute(
            _BATCH_ROW_SQL, (batch_id,)
        ).fetchone()
        assert (status, finished, total) == ("completed", n, n)
        assert conn.execute("SELECT count(*) FROM items WHERE origin_batch_id = %s", (batch_id,)).fetchone()[0] == n
        per_item = conn.execute(
            "SELECT i.id, count(s.id) FROM items i LEFT JOIN scores s ON s.item_id = i.id "
            "WHERE i.origin_batch_id = %s GROUP BY i.id",
            (batch_id,),
        ).fetchall()
        assert len(per_item) == n and {c for _, c in per_item} == {1}, "every item must have exactly one score row"
        scores = conn.execute(
            "SELECT status, count(*), sum(components_landed), sum(components_total), "
            "count(*) FILTER (WHERE completed_at IS NULL OR total IS NULL) "
            "FROM scores WHERE batch_id = %s GROUP BY status",
            (batch_id,),
        ).fetchall()
        assert [(s, c) for s, c, *_ in scores] == [("completed", n)], scores
        _, _, landed, comps_total, unfinished = scores[0]
        assert landed == comps_total == n * components and unfinished == 0
        comp_status = dict(
            conn.execute(
                "SELECT c.status, count(*) FROM score_components c JOIN scores s ON s.id = c.score_id "
                "WHERE s.batch_id = %s GROUP BY c.status",
                (batch_id,),
            ).fetchall()
        )
        assert comp_status == {"ok": n * components}, comp_status


def judge_counts(fake: Any) -> dict[str, int]:
    return dict(fake.calls()["counts"])


def repeated_calls(fake: Any) -> dict[str, list[str]]:
    """For a failure message: the judge calls of every item key called more than once, with their times."""
    report = fake.calls()
    repeated = {k for k, c in report["counts"].items() if c > 1}
    out: dict[str, list[str]] = {}
    for call in report["calls"]:
        if call["item_key"] in repeated:
            stamp = time.strftime("%H:%M:%S", time.localtime(call["at"])) + f".{int(call['at'] * 1000) % 1000:03d}"
            out.setdefault(call["item_key"][:12], []).append(f"{stamp} status={call['status']} repair={call['repair']}")
    return out


def stack_env(redis: RedisServer, fake_base_url: str | None, **extra: str) -> dict[str, str]:
    """The environment of every process of one stack (API, workers, beat): the private broker and
    breaker store, the fake judge; ``extra`` on top (e.g. a private database URL, short leases)."""
    env = {
        "ASSAY_BROKER_URL": redis.url(0),
        "ASSAY_REDIS_URL": redis.url(1),
        "ASSAY_JUDGE_BACKOFF_BASE_SECONDS": "0.01",
        "ASSAY_REQUEUE_AFTER_SECONDS": TEST_ENV["ASSAY_REQUEUE_AFTER_SECONDS"],
        "ASSAY_RECONCILE_INTERVAL_SECONDS": TEST_ENV["ASSAY_RECONCILE_INTERVAL_SECONDS"],
    }
    if fake_base_url:
        env.update({"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": fake_base_url})
    env.update(extra)
    return worker_env(env)


@pytest.fixture
def fake_judge() -> Iterator[Any]:
    """The loopback Anthropic fake in this process, answering after ~50 ms like a (very fast) judge."""
    from tests.fakes.anthropic_server import FakeAnthropic

    with FakeAnthropic(latency=0.05) as fake:
        yield fake


class judge_calls_in_flight:
    """Make the fake judge slow (``latency`` s per call) and wait until at least ``min_calls`` calls
    are in flight, so the fault that follows lands while paid judge calls are outstanding; the fast
    latency is restored on exit."""

    def __init__(
        self, fake: Any, *, latency: float = 1.0, min_calls: int = 2, fast_latency: float = 0.05, timeout: float = 30.0
    ) -> None:
        self.fake = fake
        self.latency = latency
        self.min_calls = min_calls
        self.fast_latency = fast_latency
        self.timeout = timeout

    def __enter__(self) -> judge_calls_in_flight:
        self.fake.configure(latency=self.latency)
        since = time.time()

        def slow_calls() -> bool:
            return sum(1 for c in self.fake.calls()["calls"] if c["at"] >= since) >= self.min_calls

        wait_for(slow_calls, timeout=self.timeout, interval=0.2, message=f"{self.min_calls} slow judge calls in flight")
        return self

    def __exit__(self, *exc: object) -> None:
        self.fake.configure(latency=self.fast_latency)


# --- long runs: lifted rate limits, the breaker's history, the reconciler's work ----------------------------


def lifted_rate_limits(root: Path) -> Path:
    """A copy of ``config/`` whose judge models allow a million requests (and ten billion input tokens)
    a minute, so a long run measures recovery rather than the rate governor's configured cap (the
    fake's own ``anthropic-ratelimit-*`` headers, 4000 requests a minute, still apply)."""
    import yaml

    target = root / f"config-{uuid.uuid4().hex[:6]}"
    shutil.copytree(REPO / "config", target)
    models = yaml.safe_load((target / "models.yaml").read_text())
    for model in models["models"].values():
        model["requests_per_minute"] = 1_000_000
        model["input_tokens_per_minute"] = 10_000_000_000
    (target / "models.yaml").write_text(yaml.safe_dump(models))
    return target


class BreakerWatch:
    """Samples one model's judge breaker in the private Redis (the stack's ``ASSAY_REDIS_URL``, db 1)
    every ``interval`` s from a thread: every ``opened_at`` it took (its first opening, then one more per
    failed probe) and when it was first seen closed again after opening. Redis server time, the same
    clock as the fake's call records on this host."""

    def __init__(self, redis_server: RedisServer, env: dict[str, str], model: str, interval: float = 0.1) -> None:
        self.key = f"{env['ASSAY_REDIS_KEY_PREFIX']}:breaker:{model}"
        self.client = redis_server.client(db=1)
        self.interval = interval
        self.opened_at: list[float] = []
        self.closed_at: float | None = None
        self.state = "closed"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="breaker-watch", daemon=True)

    def start(self) -> BreakerWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                fields = {k.decode(): v.decode() for k, v in self.client.hgetall(self.key).items()}
            except Exception:  # noqa: BLE001, S112 - a sample missed is a sample missed
                continue
            self.state = fields.get("state", "closed")
            if self.state == "open":
                opened = float(fields["opened_at"])
                if not self.opened_at or opened != self.opened_at[-1]:
                    self.opened_at.append(opened)
            elif self.opened_at and self.closed_at is None:
                self.closed_at = time.time()


_REQUEUED = re.compile(r"reconciler re-enqueued (\d+) component")


def reconciler_requeued(procs: Processes) -> int:
    """Components the reconciler re-enqueued, summed over every worker's log (the reconcile task runs
    on the control queue, in whichever worker took it)."""
    return sum(
        int(n) for service in procs.services if service.name == "worker" for n in _REQUEUED.findall(service.text())
    )
