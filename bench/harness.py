"""Shared pieces of the benchmarks: a scratch database, the API, workers and the fake judge as
subprocesses on loopback, and process measurements read from /proc. Benchmarks print figures; they
assert nothing."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psycopg

from assay.settings import get_settings, judge_task_threads

REPO = Path(__file__).resolve().parent.parent


def _exit_on_sigterm(signum: int, frame: object) -> None:
    # `timeout` and CI send SIGTERM: exit through the finally blocks, which stop every child we started.
    raise SystemExit(128 + signum)


signal.signal(signal.SIGTERM, _exit_on_sigterm)
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# The API key of the scratch API (keys under 32 characters are refused at start-up).
API_KEY = "bench-key-for-loopback-runs-0123456789"


@contextmanager
def scratch_environment(redis_db: int = 10) -> Iterator[dict[str, str]]:
    """A fresh Postgres database (migrated) and a private key namespace on the local Redis."""
    name = f"assay_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("ASSAY_", "ANTHROPIC_"))},
        "ASSAY_DATABASE_URL": f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}",
        "ASSAY_BROKER_URL": f"redis://127.0.0.1:6379/{redis_db}",
        "ASSAY_REDIS_URL": f"redis://127.0.0.1:6379/{redis_db}",
        "ASSAY_BROKER_KEY_PREFIX": f"{name}:",
        "ASSAY_REDIS_KEY_PREFIX": f"{name}:judge",
        "ASSAY_API_KEYS": f'["{API_KEY}"]',
        "ASSAY_CONFIG_DIR": str(REPO / "config"),
        "PYTHONPATH": str(REPO),
    }
    subprocess.run([sys.executable, "-m", "assay.cli", "migrate"], env=env, check=True, capture_output=True)
    try:
        yield env
    finally:
        import redis

        client = redis.Redis(db=redis_db)
        keys = list(client.scan_iter(match=f"{name}:*", count=1000))
        if keys:
            client.delete(*keys)
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class Proc:
    def __init__(self, args: list[str], env: dict[str, str], log: str) -> None:
        self.log = Path(f"/tmp/assay-bench-{log}-{os.getpid()}.log")
        self.popen = subprocess.Popen(
            args, env=env, cwd=REPO, stdout=self.log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def stop(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait()


def wait_http(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer")


def start_api(env: dict[str, str]) -> tuple[Proc, str]:
    port = free_port()
    proc = Proc([sys.executable, "-m", "assay.cli", "api", "--port", str(port)], env, "api")
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/healthz", timeout=180)  # a loaded machine (other benchmarks, tests) starts it slowly
    return proc, url


# Input tokens per minute a lifted rate limit allows per request per minute (configured and reported).
TOKENS_PER_REQUEST = 10_000


def start_fake(latency: float, requests_per_minute: int | None = None) -> tuple[Proc, str]:
    """The fake judge; ``requests_per_minute`` is the limit its ``anthropic-ratelimit-*`` headers report
    (the fake's default is 4,000, which the governor would honour and which a long run would reach)."""
    port = free_port()
    limits = []
    if requests_per_minute is not None:
        tokens = requests_per_minute * TOKENS_PER_REQUEST
        limits = ["--requests-limit", str(requests_per_minute), "--input-tokens-limit", str(tokens)]
    proc = Proc(
        [sys.executable, "-m", "tests.fakes.anthropic_server", "--port", str(port), "--latency", str(latency), *limits],
        dict(os.environ, PYTHONPATH=str(REPO)),
        "fake",
    )
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/_fake/calls")
    return proc, url


def start_worker(
    env: dict[str, str], queues: str, pool: str, concurrency: int, name: str, *, profile: str | None = None
) -> Proc:
    """A Celery worker on ``queues`` as ``assay worker --queues`` takes them (each batch queue preceded by
    its online queue); ``profile``: run it under cProfile, its stats written there when it stops (use the
    solo pool: the tasks then run in the profiled main thread)."""
    from assay.workers.app import consumed_queues

    profiled = ["-m", "cProfile", "-o", profile] if profile else []
    proc = Proc(
        [
            sys.executable, *profiled, "-m", "celery", "-A", "assay.workers.app", "worker", "-Q", ",".join(consumed_queues(queues.split(","))), "-P", pool,
            "-c", str(concurrency), "-l", "WARNING", "--without-mingle", "--without-gossip", "-n", f"{name}@%h",
        ],
        env,
        name,
    )
    time.sleep(0.5)
    return proc


def start_judge_worker(env: dict[str, str], calls_in_flight: int, name: str) -> Proc:
    """A judge worker with ``calls_in_flight`` call threads (``ASSAY_JUDGE_CONCURRENCY``) and the task
    threads ``assay worker --queues judge`` would give it."""
    threads = judge_task_threads(calls_in_flight, get_settings().judge_group_size)
    return start_worker(env | {"ASSAY_JUDGE_CONCURRENCY": str(calls_in_flight)}, "judge", "threads", threads, name)


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(entry.name))
    return out


def tree(pid: int) -> list[int]:
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        todo.extend(_children(p))
    return pids


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its live descendants."""
    total = 0
    for p in tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / CLK_TCK


def peak_rss_mb(pid: int) -> float:
    """Peak resident set (VmHWM) summed over a process and its descendants, in MiB."""
    total = 0
    for p in tree(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def redis_memory_mb(db: int = 10) -> float:
    import redis

    return redis.Redis(db=db).info("memory")["used_memory"] / 1024**2


def redis_prefix_memory_mb(prefix: str, db: int = 10) -> float:
    """Memory of the keys under ``prefix`` (queues, unacked messages, breaker and governor): this run's
    share of a Redis that other things use too."""
    import redis

    client = redis.Redis(db=db)
    return sum(client.memory_usage(key) or 0 for key in client.scan_iter(match=f"{prefix}*", count=1000)) / 1024**2


class PeakSampler:
    """Samples ``measure()`` every ``interval`` seconds in a thread; ``peak`` is the largest value seen."""

    def __init__(self, measure: Callable[[], float], interval: float = 1.0) -> None:
        self.measure, self.interval, self.peak = measure, interval, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, self.measure())
            except Exception:  # a sample missed is no reason to stop the benchmark
                pass
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def database_size_mb(env: dict[str, str]) -> float:
    url = env["ASSAY_DATABASE_URL"].replace("+psycopg", "")
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT pg_database_size(current_database())").fetchone()[0] / 1024**2


def relation_report(env: dict[str, str], min_kib: int = 256) -> str:
    """Each table of the scratch database at least ``min_kib`` in all: heap, indexes and TOAST sizes;
    of the heap, the bytes in dead row versions and the free bytes (``pgstattuple``, installed into the
    scratch database for this); live and dead row versions, updates and how many were HOT. Read after
    the run's processes have stopped (a backend reports its row counts when idle or at exit)."""
    url = env["ASSAY_DATABASE_URL"].replace("+psycopg", "")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
        conn.execute("SELECT pg_stat_force_next_flush()")
        rows = conn.execute(
            """SELECT relname, pg_relation_size(relid), pg_indexes_size(relid),
                      pg_table_size(relid) - pg_relation_size(relid), dead_tuple_len, free_space,
                      n_live_tup, n_dead_tup, n_tup_upd, n_tup_hot_upd
               FROM pg_stat_user_tables, pgstattuple(relid)
               WHERE pg_total_relation_size(relid) >= %s * 1024
               ORDER BY pg_total_relation_size(relid) DESC""",
            (min_kib,),
        ).fetchall()
    mib = 1024**2
    lines = [
        (
            f"{'table':<18} {'heap MiB':>8} {'(dead':>6} {'free)':>6} {'index MiB':>9} {'toast MiB':>9} "
            f"{'live rows':>9} {'dead rows':>9} {'updates':>8} {'HOT':>8}"
        )
    ]
    for name, heap, index, toast, dead_bytes, free_bytes, live, dead, updates, hot in rows:
        lines.append(
            f"{name:<18} {heap / mib:>8.2f} {dead_bytes / mib:>6.2f} {free_bytes / mib:>6.2f} {index / mib:>9.2f} "
            f"{toast / mib:>9.2f} {live:>9} {dead:>9} {updates:>8} {hot:>8}"
        )
    return "\n".join(lines)


def round_trips(env: dict[str, str]) -> tuple[int, int]:
    """(Redis commands the server has run, PostgreSQL transactions of the scratch database) so far: the
    difference over a run, per judgment, is a cost figure the machine's noise does not move. Redis
    counts are server-wide (everything else on the local Redis too); PostgreSQL's are this database's."""
    import redis

    commands = sum(stats["calls"] for name, stats in redis.Redis().info("commandstats").items() if name.startswith("cmdstat_"))
    url = env["ASSAY_DATABASE_URL"].replace("+psycopg", "")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_force_next_flush()")
        (transactions,) = conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    return commands, transactions


def config_with_rate_limit(target: Path, requests_per_minute: int) -> Path:
    """A copy of config/ whose models allow ``requests_per_minute`` (and tokens to match)."""
    import shutil

    import yaml

    shutil.copytree(REPO / "config", target)
    models = yaml.safe_load((target / "models.yaml").read_text())
    for model in models["models"].values():
        model["requests_per_minute"] = requests_per_minute
        model["input_tokens_per_minute"] = requests_per_minute * TOKENS_PER_REQUEST
    (target / "models.yaml").write_text(yaml.safe_dump(models))
    return target


def judge_only_suite(config: Path, base: str) -> str:
    """A copy of suite ``base`` in ``config`` whose only component is its judge (weight 1)."""
    import yaml

    spec = yaml.safe_load((config / "suites" / f"{base}.yaml").read_text())
    spec["name"] = f"{base}_judge_only"
    spec["components"] = {name: {**c, "weight": 1.0} for name, c in spec["components"].items() if c.get("judge")}
    (config / "suites" / f"{spec['name']}.yaml").write_text(yaml.safe_dump(spec))
    return spec["name"]


def write_items(path: Path, n: int) -> Path:
    """N distinct KQL items made from the shipped examples (distinct prompts: distinct judge calls)."""
    examples = [json.loads(line) for line in (REPO / "examples" / "kql_items.jsonl").read_text().splitlines()]
    with path.open("w") as handle:
        for i in range(n):
            item = dict(examples[i % len(examples)])
            item["id"] = f"bench-{i}"
            item["prompt"] = f"{item['prompt']} (#{i})"
            handle.write(json.dumps(item) + "\n")
    return path


def upload(url: str, path: Path, suite: str = "kql") -> tuple[str, float]:
    started = time.perf_counter()
    with path.open("rb") as handle:
        response = httpx.post(
            f"{url}/api/v1/batches",
            params={"suite": suite},
            content=handle,
            headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/x-ndjson"},
            timeout=httpx.Timeout(30, read=1800),
        )
    response.raise_for_status()
    return response.json()["batch_id"], time.perf_counter() - started


def wait_batch(url: str, batch_id: str, timeout: float = 7200) -> tuple[dict, float]:
    started = time.perf_counter()
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60) as client:
        while time.monotonic() < deadline:
            view = client.get(f"/api/v1/batches/{batch_id}").json()
            if view["status"] not in ("planning", "running"):
                return view, time.perf_counter() - started
            time.sleep(0.5)
    raise RuntimeError(f"batch {batch_id} did not finish in {timeout}s")


# --- CPU of every process of a run --------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _own_ticks(pid: int, *, reaped: bool = False) -> int:
    """utime + stime of one process (``reaped``: plus its waited-for children's, cutime + cstime)."""
    fields = _stat_fields(pid)
    if fields is None:
        return 0
    ticks = int(fields[11]) + int(fields[12])
    return ticks + int(fields[13]) + int(fields[14]) if reaped else ticks


def _pids_named(comm: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == comm:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _postmaster() -> int | None:
    """The PostgreSQL cluster's main process: a ``postgres`` process whose parent is not one."""
    pids = set(_pids_named("postgres"))
    for pid in pids:
        fields = _stat_fields(pid)
        if fields is not None and int(fields[1]) not in pids:
            return pid
    return None


def _cluster_ticks(postmaster: int | None) -> int:
    """Every PostgreSQL process's CPU, exited backends included (the postmaster reaps them: their CPU
    is in its cutime + cstime)."""
    if postmaster is None:
        return 0
    return _own_ticks(postmaster, reaped=True) + sum(_own_ticks(pid) for pid in _children(postmaster))


class SystemCpu:
    """CPU seconds each process of a run spent between ``start()`` and ``stop()``, read from
    /proc/<pid>/stat (utime + stime): the named process trees (API, workers, ...), the Redis server,
    the PostgreSQL backends of the scratch database (sampled every ``interval`` while the run goes, so
    backends that come and go count too) and the whole PostgreSQL cluster (every backend of every
    database and the background processes: an upper bound when other work shares the machine).

    Redis and the PostgreSQL cluster are the machine's shared servers: their figures include whatever
    else ran meanwhile."""

    def __init__(self, env: dict[str, str], procs: dict[str, int], interval: float = 0.5) -> None:
        self.procs = procs
        self.database = env["ASSAY_DATABASE_URL"].rsplit("/", 1)[1]
        self.interval = interval
        self.redis = _pids_named("redis-server")
        self.postmaster = _postmaster()
        self._backends: dict[int, list[int]] = {}  # pid -> [ticks at first sight, ticks last seen]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample_backends, daemon=True)
        self.seconds: dict[str, float] = {}

    def _backend_pids(self, conn: psycopg.Connection) -> list[int]:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", (self.database,)
        ).fetchall()
        return [pid for (pid,) in rows]

    def _sample(self, conn: psycopg.Connection, first: bool) -> None:
        for pid in self._backend_pids(conn):
            ticks = _own_ticks(pid)
            seen = self._backends.get(pid)
            if seen is None:
                # A backend that started during the run counts from zero; one there before, from now.
                self._backends[pid] = [ticks if first else 0, ticks]
            else:
                seen[1] = max(seen[1], ticks)

    def _sample_backends(self) -> None:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:  # the admin database: not counted
            while not self._stop.wait(self.interval):
                try:
                    self._sample(conn, first=False)
                except psycopg.Error:
                    pass

    def _totals(self) -> dict[str, int]:
        ticks = {name: sum(_own_ticks(p) for p in tree(pid)) for name, pid in self.procs.items()}
        ticks["Redis server"] = sum(_own_ticks(pid) for pid in self.redis)
        ticks["PostgreSQL cluster"] = _cluster_ticks(self.postmaster)
        return ticks

    def start(self) -> SystemCpu:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            self._sample(conn, first=True)
        self._before = self._totals()
        self._thread.start()
        return self

    def stop(self) -> dict[str, float]:
        # The process trees first (a worker's children exit when it is stopped), then the last sample.
        after = self._totals()
        self._stop.set()
        self._thread.join(timeout=10)
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            self._sample(conn, first=False)
        self.seconds = {name: (after[name] - self._before[name]) / CLK_TCK for name in after}
        backends = sum(last - first for first, last in self._backends.values()) / CLK_TCK
        self.seconds["PostgreSQL backends (this database)"] = backends
        return self.seconds

    def table(self, items: int, elapsed: float) -> str:
        """One line per process: CPU seconds, ms per item and share of one core over ``elapsed``."""
        lines = [f"{'CPU per process':38} {'seconds':>8} {'ms/item':>8} {'cores':>6}"]
        system = 0.0
        for name, seconds in self.seconds.items():
            lines.append(f"  {name:36} {seconds:8.1f} {1000 * seconds / items:8.2f} {seconds / elapsed:6.2f}")
            if name not in ("PostgreSQL cluster", "fake judge (not Assay)"):
                system += seconds
        lines.append(
            f"  {'all Assay processes + Redis + PG db':36} {system:8.1f} {1000 * system / items:8.2f} {system / elapsed:6.2f}"
        )
        return "\n".join(lines)
