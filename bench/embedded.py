"""Embedded mode end to end: ``assay run`` on generated items, as a user runs it. Prints figures;
asserts nothing. Goals (issue 18): wall ≤ 1.5 × CPU, and CPU per item no higher than before.

Two workloads, generated in a scratch folder from the shipped examples (their ids numbered, so every
item is a distinct one), scored without a judge (no ANTHROPIC_API_KEY: the judge is skipped):

- ``kql``: 500 items from examples/kql_dataset_items.jsonl, ``--dataset storm=examples/datasets/storm``;
- ``pandas``: 200 items from examples/pandas_dataset_items.jsonl, ``--dataset hr=examples/pandas_datasets/hr``.

For each it prints wall time, CPU time (user + system) of every process involved — the ``assay run``
process, the sandbox executor with the children it forks per run — their total, items/s, CPU per
item, wall / CPU, how long the threads waited for a CPU (other load on the machine inflates the
wall time; the load average is printed too), and the share of the run during which none of its
threads ran or waited for a CPU or the disk: time spent waiting on nothing but the clock — the
figure a polling sleep shows up in whatever the machine's load. The total is exact: this process becomes a child subreaper, reaps every
descendant (orphans included) and reads ``RUSAGE_CHILDREN``. The executor's share is its last
reading from /proc (sampled every 50 ms; its own and its reaped children's time), the rest is the
``assay run`` process's. Also the gaps between consecutive results landing (``completed_at``): the
longest one and how many exceed 0.5 s.

    .venv/bin/python -m bench.embedded [--kind kql pandas] [--kql-items 500] [--pandas-items 200]
                                       [--concurrency 8] [--repo PATH]

``--repo`` scores with another checkout's code (e.g. a copy of the code before a change).
"""

from __future__ import annotations

import argparse
import ctypes
import itertools
import json
import os
import resource
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")
_PR_SET_CHILD_SUBREAPER = 36
EXECUTOR_MARK = b"assay.scoring.sandbox.executor"


@dataclass(frozen=True)
class Workload:
    kind: str
    examples: str
    suite: str
    dataset: str


WORKLOADS = {
    "kql": Workload("kql", "examples/kql_dataset_items.jsonl", "kql", "storm=examples/datasets/storm"),
    "pandas": Workload("pandas", "examples/pandas_dataset_items.jsonl", "pandas_codegen", "hr=examples/pandas_datasets/hr"),
}


def write_items(source: Path, count: int, target: Path) -> None:
    """``count`` items cycled from ``source``, each with its own id."""
    examples = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
    with target.open("w") as handle:
        for n, item in zip(range(count), itertools.cycle(examples)):
            handle.write(json.dumps({**item, "id": f"{item.get('id', 'item')}-{n}"}) + "\n")


def _threads(pid: int) -> list[str]:
    try:
        return os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []


def _children(pid: int) -> list[int]:
    """The children of every thread of ``pid`` (a thread that started a process is its parent)."""
    found = []
    for tid in _threads(pid):
        try:
            found += [int(child) for child in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except OSError:
            pass
    return found


def _states(pid: int) -> str:
    """The scheduler state letter of each thread of ``pid`` (R running or runnable, S sleeping, …)."""
    states = ""
    for tid in _threads(pid):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_bytes()
            states += chr(stat[stat.rindex(b")") + 2])
        except (OSError, IndexError, ValueError):
            pass
    return states


def _cpu_with_reaped_children(pid: int) -> float | None:
    """utime + stime + cutime + cstime of ``pid`` (seconds), or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2 :].split()
    return sum(int(f) for f in fields[11:15]) / CLK_TCK


def _run_queue_wait(pid: int) -> dict[int, float]:
    """Per thread of ``pid``: seconds spent runnable but waiting for a CPU (schedstat)."""
    waits = {}
    for tid in _threads(pid):
        try:
            waits[int(tid)] = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[1]) / 1e9
        except (OSError, ValueError, IndexError):
            pass
    return waits


class ProcessWatch(threading.Thread):
    """Samples the process tree under ``root`` every 20 ms: whether any of its threads is running or
    waiting for a CPU (state R) or for the disk (D) — else the run is idle, waiting on nothing but
    time —, the sandbox executors' CPU (pid -> last reading, with their reaped children; an executor
    is a direct child, and the children it forks per run share its command line), and how long the
    threads waited for a CPU (every 0.5 s)."""

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.cpu: dict[int, float] = {}
        self.cpu_wait: dict[int, float] = {}
        self.samples = 0
        self.idle_samples = 0
        self.stop = threading.Event()

    def run(self) -> None:
        tick = 0
        while not self.stop.wait(0.02):
            tick += 1
            tree, todo = [], [self.root]
            while todo:
                pid = todo.pop()
                tree.append(pid)
                todo += _children(pid)
            if not any(state in "RD" for pid in tree for state in _states(pid)):
                self.idle_samples += 1
            self.samples += 1
            for pid in _children(self.root):
                if pid not in self.cpu:
                    try:
                        if EXECUTOR_MARK not in Path(f"/proc/{pid}/cmdline").read_bytes():
                            continue
                    except OSError:
                        continue
                reading = _cpu_with_reaped_children(pid)
                if reading is not None:
                    self.cpu[pid] = reading
            if tick % 25 == 0:
                for pid in tree:
                    self.cpu_wait.update(_run_queue_wait(pid))


def _reap_all() -> None:
    """Wait for every remaining descendant (we are their subreaper), so RUSAGE_CHILDREN counts them."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.05)


def completion_gaps(db: Path) -> list[float]:
    """Seconds between consecutive results landing, in order."""
    with sqlite3.connect(db) as conn:
        stamps = sorted(datetime.fromisoformat(row[0]) for row in conn.execute(
            "SELECT completed_at FROM scores WHERE completed_at IS NOT NULL"
        ))
    return [(b - a).total_seconds() for a, b in itertools.pairwise(stamps)]


def run_workload(workload: Workload, count: int, concurrency: int, repo: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="assay-bench-embedded-") as scratch:
        folder = Path(scratch)
        items = folder / f"{workload.kind}.jsonl"
        write_items(REPO / workload.examples, count, items)
        name, _, path = workload.dataset.partition("=")
        db = folder / "embedded.db"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ASSAY_", "ANTHROPIC_"))}
        env |= {"PYTHONPATH": str(repo), "ASSAY_CONFIG_DIR": str(repo / "config"), "COLUMNS": "120"}
        command = [
            sys.executable, "-m", "assay.cli", "run", str(items), "--suite", workload.suite,
            "--dataset", f"{name}={REPO / path}", "--db", str(db), "--concurrency", str(concurrency), "--no-live",
        ]
        load_before = os.getloadavg()[0]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        proc = subprocess.Popen(command, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        watch = ProcessWatch(proc.pid)
        watch.start()
        output, _ = proc.communicate()
        wall = time.monotonic() - started
        watch.stop.set()
        watch.join()
        _reap_all()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            raise SystemExit(f"assay run failed ({proc.returncode}):\n{output.decode(errors='replace')[-3000:]}")
        total = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        executor = sum(watch.cpu.values())
        gaps = completion_gaps(db)
        print(
            f"{workload.kind}: {count} items, --concurrency {concurrency}, code from {repo}; "
            f"load average {load_before:.1f} → {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
        )
        print(f"  wall                         {wall:8.1f} s")
        print(f"  CPU assay run process        {total - executor:8.1f} s")
        print(f"  CPU sandbox executor(s)      {executor:8.1f} s   ({len(watch.cpu)} started, with their run children)")
        print(f"  CPU total                    {total:8.1f} s   ({total / count * 1000:.0f} ms per item)")
        print(f"  items/s                      {count / wall:8.1f}")
        print(f"  wall / CPU                   {wall / total:8.2f}")
        print(f"  waited for a CPU             {sum(watch.cpu_wait.values()):8.1f} s   (runnable, all threads summed: other load)")
        if watch.samples:
            idle = watch.idle_samples / watch.samples
            print(f"  idle (no thread running, runnable or in disk I/O) {idle * wall:6.1f} s   ({100 * idle:.1f} % of {watch.samples} samples)")
        if gaps:
            print(f"  gaps between results         longest {max(gaps):.2f} s, {sum(g > 0.5 for g in gaps)} over 0.5 s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", nargs="+", choices=sorted(WORKLOADS), default=["kql", "pandas"])
    parser.add_argument("--kql-items", type=int, default=500)
    parser.add_argument("--pandas-items", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8, help="assay run --concurrency (its default: 8)")
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout whose code scores (default: this one)")
    args = parser.parse_args()
    if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise SystemExit("cannot become a child subreaper; the executor's CPU time would be missed")
    counts = {"kql": args.kql_items, "pandas": args.pandas_items}
    for kind in args.kind:
        run_workload(WORKLOADS[kind], counts[kind], args.concurrency, args.repo.resolve())


if __name__ == "__main__":
    main()
