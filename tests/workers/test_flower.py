"""Flower as an operator runs it (docs/operations/by-hand.md): real ``assay worker`` and
``assay flower`` processes on loopback. Flower lists every worker started side by side on one host
and every queue with its depth; it listens on loopback unless told otherwise; its /metrics needs
the login."""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO, TEST_ENV, wait_for, worker_env
from tests.ports import free_port

USER, PASSWORD = "ops", "flower-" + uuid.uuid4().hex


def _listening(port: int) -> set[str]:
    """The addresses a TCP socket listens on at ``port`` (from /proc/net/tcp and tcp6)."""
    found = set()
    for table, size in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if state != "0A" or int(hex_port, 16) != port:  # 0A: LISTEN
                continue
            raw = bytes.fromhex(address)
            # The kernel prints each 32-bit word in host (little-endian) order.
            raw = b"".join(raw[i : i + 4][::-1] for i in range(0, size, 4))
            found.add(str(ipaddress.ip_address(raw)))
    return found


class Process:
    """An ``assay`` subprocess with its output in a log file."""

    def __init__(self, *args: str, env: dict[str, str]) -> None:
        self.log = Path(f"/tmp/assay-test-{args[0]}-{os.getpid()}-{uuid.uuid4().hex[:6]}.log")
        with self.log.open("ab") as handle:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "assay.cli", *args], env=env, cwd=REPO, stdout=handle,
                stderr=subprocess.STDOUT, start_new_session=True,
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for_output(self, text: str, timeout: float = 120) -> None:  # two shared cores: be patient
        def seen() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"exited early:\n{self.output()[-3000:]}")
            return text in self.output()

        wait_for(seen, timeout=timeout, message=f"{text!r} in {self.log}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)


@pytest.fixture
def processes() -> Iterator[list[Process]]:
    started: list[Process] = []
    yield started
    for process in started:
        process.stop()


def _flower(processes: list[Process], *args: str, extra_env: dict[str, str] | None = None) -> tuple[Process, int]:
    port = free_port()
    env = worker_env({"ASSAY_FLOWER_USER": USER, "ASSAY_FLOWER_PASSWORD": PASSWORD, **(extra_env or {})})
    flower = Process("flower", "--port", str(port), *args, env=env)
    processes.append(flower)
    return flower, port


def _get(url: str, **kwargs: object) -> httpx.Response | None:
    try:
        return httpx.get(url, timeout=5, **kwargs)  # type: ignore[arg-type]
    except httpx.HTTPError:
        return None


def test_flower_lists_every_worker_on_one_host_and_every_queue_with_its_depth(processes):
    # The by-hand setup (docs/operations/by-hand.md) with one more judge worker: three workers
    # on this host.
    commands = {"judge-a": ("--queues", "judge"), "judge-b": ("--queues", "judge"),
                "metrics": ("--queues", "metrics,control", "--concurrency", "1")}
    workers = {}
    for label, args in commands.items():
        workers[label] = Process("worker", *args, "--loglevel", "INFO", env=worker_env())
        processes.append(workers[label])
    for worker in workers.values():
        worker.wait_for_output("ready.")
    host = socket.gethostname()
    expected = {
        f"judge-{workers['judge-a'].proc.pid}@{host}",
        f"judge-{workers['judge-b'].proc.pid}@{host}",
        f"metrics-control-{workers['metrics'].proc.pid}@{host}",
    }
    for worker in workers.values():
        assert "DuplicateNodenameWarning" not in worker.output()

    _, port = _flower(processes)
    base, auth = f"http://127.0.0.1:{port}", (USER, PASSWORD)
    wait_for(lambda: _get(f"{base}/healthcheck"), timeout=90, message="Flower to start")

    def listed() -> set[str] | None:
        r = _get(f"{base}/api/workers", params={"refresh": "1"}, auth=auth)
        return set(r.json()) if r is not None and r.status_code == 200 and set(r.json()) >= expected else None

    assert wait_for(listed, timeout=60, message="Flower to list the three workers") == expected

    r = httpx.get(f"{base}/api/queues/length", auth=auth, timeout=5)
    assert r.status_code == 200, r.text
    assert {q["name"]: q["messages"] for q in r.json()["active_queues"]} == {
        "metrics": 0, "judge": 0, "control": 0, "online-metrics": 0, "online-judge": 0
    }

    # The workers stop; work keeps arriving: Flower shows each queue's backlog.
    for worker in workers.values():
        worker.stop()
    from assay.workers.app import app

    backlog = {"judge": 3, "metrics": 2, "control": 1, "online-judge": 0, "online-metrics": 0}
    try:
        for queue, count in backlog.items():
            for _ in range(count):
                app.send_task("assay.test.flower_backlog", queue=queue)

        def depths() -> dict[str, int] | None:
            r = _get(f"{base}/api/queues/length", auth=auth)
            found = {q["name"]: q["messages"] for q in r.json()["active_queues"]} if r is not None else None
            return found if found == backlog else None

        wait_for(depths, timeout=15, message="Flower to show each queue's depth")
    finally:
        import redis

        client = redis.Redis.from_url(TEST_ENV["ASSAY_BROKER_URL"])
        client.delete(*(TEST_ENV["ASSAY_BROKER_KEY_PREFIX"] + queue for queue in backlog))


def test_flower_listens_on_loopback_and_its_metrics_need_the_login(processes):
    flower, port = _flower(processes)
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: _get(f"{base}/healthcheck"), timeout=90, message="Flower to start")
    assert _listening(port) == {"127.0.0.1"}

    assert httpx.get(f"{base}/healthcheck", timeout=5).text == "OK"  # open: a probe carries no login
    anonymous = httpx.get(f"{base}/metrics", timeout=5)
    assert anonymous.status_code == 401 and "flower_" not in anonymous.text
    assert httpx.get(f"{base}/metrics", auth=(USER, "wrong"), timeout=5).status_code == 401
    metrics = httpx.get(f"{base}/metrics", auth=(USER, PASSWORD), timeout=5)
    assert metrics.status_code == 200 and "flower_events_total" in metrics.text
    assert httpx.get(f"{base}/api/workers", timeout=5).status_code == 401
    assert "--basic-auth" not in Path(f"/proc/{flower.proc.pid}/cmdline").read_text()


def test_flower_listens_where_the_setting_says(processes):
    other = "127.0.0.2"  # still loopback: nothing leaves the machine
    _, port = _flower(processes, extra_env={"ASSAY_FLOWER_ADDRESS": other})
    wait_for(lambda: _get(f"http://{other}:{port}/healthcheck"), timeout=90, message="Flower to start")
    assert _listening(port) == {other}
