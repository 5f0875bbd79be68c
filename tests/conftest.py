"""Test fixtures: a real PostgreSQL database, a real Redis, a live Celery worker, the loopback judge fake.

The environment is set at import, before any test imports the Celery app (which reads the broker URL
when it is created). Each run gets its own database and its own Redis database number.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PG_ADMIN_URL = os.environ.get("ASSAY_TEST_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_HOST = "127.0.0.1"
REDIS_PORT = int(os.environ.get("ASSAY_TEST_REDIS_PORT", "6379"))
REDIS_DB = int(os.environ.get("ASSAY_TEST_REDIS_DB", "12"))
TEST_DB = f"assay_test_{os.getpid()}_{uuid.uuid4().hex[:6]}"
API_KEY = "test-key-" + uuid.uuid4().hex  # 41 characters: keys under 32 are refused
API_KEY_NAME = "ci-tester"  # the principal a bearer request with API_KEY acts as (ASSAY_API_KEYS: name:key)

TEST_ENV = {
    "ASSAY_DATABASE_URL": f"postgresql+psycopg://postgres@127.0.0.1:5432/{TEST_DB}",
    "ASSAY_BROKER_URL": f"redis://{REDIS_HOST}:{REDIS_PORT}/{REDIS_DB}",
    "ASSAY_REDIS_URL": f"redis://{REDIS_HOST}:{REDIS_PORT}/{REDIS_DB}",
    # Per-run key namespaces: two test runs sharing one Redis never consume each other's messages.
    "ASSAY_BROKER_KEY_PREFIX": f"{TEST_DB}:",
    "ASSAY_REDIS_KEY_PREFIX": f"{TEST_DB}:judge",
    "ASSAY_API_KEYS": f'["{API_KEY_NAME}:{API_KEY}"]',
    "ASSAY_TRUSTED_PROXIES": '["10.255.255.254/32"]',
    "ASSAY_CONFIG_DIR": str(REPO / "config"),
    # Short timings so recovery paths run inside a test's time.
    "ASSAY_REQUEUE_AFTER_SECONDS": "5",
    "ASSAY_RECONCILE_INTERVAL_SECONDS": "5",
    "ASSAY_MAX_QUEUE_DEPTH": "20000",
    # The live workers' thread count: a publish of 8+ judge components travels in groups.
    "ASSAY_JUDGE_CONCURRENCY": "4",
}
os.environ.update(TEST_ENV)
os.environ.pop("ANTHROPIC_API_KEY", None)
os.environ.pop("ANTHROPIC_BASE_URL", None)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook turns the marks into node id suffixes
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under ``--dist loadgroup`` (pytest-xdist), the tests of a module that use a module-scoped fixture
    of ours (a sandbox executor, a scored validity set, a fake server) run on one worker, so the
    fixture is built once rather than once on every worker that gets some of them."""
    for item in items:
        fixtures = getattr(item, "_fixtureinfo", None)
        if fixtures is None or item.get_closest_marker("xdist_group"):
            continue
        shares_a_module_fixture = any(
            definition.scope == "module" and definition.baseid  # baseid "": a plug-in's fixture
            for definitions in fixtures.name2fixturedefs.values()
            for definition in definitions
        )
        if shares_a_module_fixture:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


def _admin_exec(sql: str) -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(sql)


@pytest.fixture(scope="session", autouse=True)
def database() -> Iterator[str]:
    """A fresh database for this run, migrated to head; dropped at the end."""
    import redis

    from assay.scoring.store.db import migrate, reset_engine
    from assay.settings import get_settings

    _admin_exec(f'CREATE DATABASE "{TEST_DB}"')
    get_settings.cache_clear()
    reset_engine()
    migrate()
    yield TEST_ENV["ASSAY_DATABASE_URL"]
    reset_engine()
    client = redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=REDIS_DB)
    keys = list(client.scan_iter(match=f"{TEST_DB}:*", count=1000))
    if keys:
        client.delete(*keys)
    _admin_exec(f'DROP DATABASE IF EXISTS "{TEST_DB}" WITH (FORCE)')


# The tables every test starts without; with every table that references them (found in the catalog).
CLEARED_TABLES = ("score_components", "scores", "items", "batches", "datasets", "suites", "scoring_criteria_definitions")
_clear_order: list[str] = []


def _tables_to_clear(session) -> list[str]:  # type: ignore[no-untyped-def]
    """CLEARED_TABLES and, transitively, every table with a foreign key to one of them, referencing
    tables first: the order in which DELETE empties them without breaking a foreign key."""
    from sqlalchemy import text

    if not _clear_order:
        edges = session.execute(
            text(
                "SELECT conrelid::regclass::text, confrelid::regclass::text FROM pg_constraint "
                "WHERE contype = 'f' AND conrelid <> confrelid"
            )
        ).all()
        tables = set(CLEARED_TABLES)
        while extra := {child for child, parent in edges if parent in tables} - tables:
            tables |= extra
        while tables:  # a table goes once nothing left to clear references it
            free = sorted(t for t in tables if not any(parent == t and child in tables for child, parent in edges))
            assert free, f"a foreign-key cycle among {sorted(tables)}"
            _clear_order.extend(free)
            tables -= set(free)
    return _clear_order


@pytest.fixture
def clean_db(database: str) -> Iterator[None]:
    """Empty every table and register the shipped suites again."""
    from sqlalchemy import text

    from assay.scoring.store.db import transaction
    from assay.scoring.suites.criteria import register_all_suites
    from assay.settings import get_settings

    # DELETE, not TRUNCATE: on a test's few rows it takes a quarter of the time (TRUNCATE CASCADE swaps
    # the files of some 20 tables and their indexes: about 1 s a test on a loaded machine).
    with transaction() as session:
        for table in _tables_to_clear(session):
            session.execute(text(f'DELETE FROM "{table}"'))
    with transaction() as session:
        register_all_suites(session, get_settings().config_dir)
    yield


@pytest.fixture
def api_client(clean_db: None) -> Iterator[object]:
    from fastapi.testclient import TestClient

    from assay.api.app import create_app

    with TestClient(create_app(), headers={"Authorization": f"Bearer {API_KEY}"}) as client:
        yield client


@pytest.fixture
def fake_judge() -> Iterator[object]:
    """The loopback fake of the Anthropic Messages API, zero latency unless a test configures it."""
    from tests.fakes.anthropic_server import FakeAnthropic

    with FakeAnthropic() as fake:
        yield fake


def worker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    env.update(TEST_ENV)
    # Each worker gets its own judge breaker and rate window, so one test's judgments never hold up
    # another's; a test that needs workers to share them passes the same prefix explicitly.
    env["ASSAY_REDIS_KEY_PREFIX"] = f"{TEST_DB}:judge-{uuid.uuid4().hex[:8]}"
    env.update(extra or {})
    env["PYTHONPATH"] = str(REPO)
    return env


class LiveWorker:
    """A real ``celery worker`` subprocess on the test broker and database."""

    def __init__(self, env: dict[str, str], queues: str = "metrics,judge,control", concurrency: int = 4) -> None:
        self.env = env
        self.queues = queues
        self.concurrency = concurrency
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = Path(f"/tmp/assay-test-worker-{os.getpid()}-{uuid.uuid4().hex[:6]}.log")

    def start(self) -> LiveWorker:
        from assay.workers.app import consumed_queues  # as `assay worker` does: online queues first

        handle = self.log.open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "celery", "-A", "assay.workers.app", "worker",
                "-Q", ",".join(consumed_queues(self.queues.split(","))), "-P", "threads", "-c", str(self.concurrency),
                "-l", "INFO", "--without-mingle", "--without-gossip", "-n", f"test-{uuid.uuid4().hex[:6]}@%h",
            ],
            env=self.env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            cwd=str(REPO),
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if "ready." in self.log.read_text(errors="replace"):
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited early:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.2)
        raise RuntimeError(f"worker did not become ready:\n{self.log.read_text()[-3000:]}")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def live_worker_factory() -> Iterator[object]:
    workers: list[LiveWorker] = []

    def start(extra_env: dict[str, str] | None = None, **kwargs: object) -> LiveWorker:
        worker = LiveWorker(worker_env(extra_env), **kwargs).start()  # type: ignore[arg-type]
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        worker.stop()


def wait_for(predicate, timeout: float = 60.0, interval: float = 0.2, message: str = "condition"):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {message}; last value: {last!r}")


def which(binary: str) -> str | None:
    return shutil.which(binary)
