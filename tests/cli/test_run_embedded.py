"""``assay run`` (embedded mode) as a user runs it: results arrive as tasks finish, not in one-second
bursts; a pandas suite's sandbox layers are printed; the sandbox's work folder is private and gone
when the run ends — normally, on SIGTERM, or when the run is killed outright."""

from __future__ import annotations

import itertools
import json
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
from datetime import datetime
from pathlib import Path
from typing import Self

import pytest

from tests.conftest import REPO, wait_for

PANDAS_ITEMS = REPO / "examples" / "pandas_dataset_items.jsonl"
HR = REPO / "examples" / "pandas_datasets" / "hr"


def numbered_items(source: Path, count: int, target: Path) -> Path:
    """``count`` items cycled from ``source``, each with its own id."""
    examples = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
    target.write_text(
        "".join(json.dumps({**item, "id": f"{item['id']}-{n}"}) + "\n" for n, item in zip(range(count), itertools.cycle(examples)))
    )
    return target


def embedded_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASSAY_", "ANTHROPIC_"))}
    return env | {"PYTHONPATH": str(REPO), "COLUMNS": "200", **extra}


def run_command(items: Path, suite: str, tmp_path: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "assay.cli", "run", str(items), "--suite", suite, "--db", str(tmp_path / "e.db"), "--no-live", *extra]


class FolderWatch(threading.Thread):
    """Records every entry that appears in ``parent`` and the modes it had, while a run goes on."""

    def __init__(self, parent: Path) -> None:
        super().__init__(daemon=True)
        self.parent = parent
        self.modes: dict[str, set[int]] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.01):
            for entry in list(self.parent.iterdir()):
                try:
                    self.modes.setdefault(entry.name, set()).add(stat.S_IMODE(entry.stat().st_mode))
                except FileNotFoundError:
                    pass

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.join()


def test_results_land_as_tasks_finish_not_in_one_second_bursts(tmp_path):
    # Every component here takes milliseconds. A worker that sleeps a second whenever its two slots
    # are taken lands them in pairs about a second apart: half of the gaps between landings near 1 s.
    items = numbered_items(REPO / "examples" / "kql_items.jsonl", 16, tmp_path / "items.jsonl")
    result = subprocess.run(
        run_command(items, "kql", tmp_path, "--concurrency", "2"),
        env=embedded_env(), cwd=tmp_path, capture_output=True, text=True, timeout=240, check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    with sqlite3.connect(tmp_path / "e.db") as conn:
        landed = sorted(
            datetime.fromisoformat(row[0])
            for row in conn.execute("SELECT landed_at FROM score_components WHERE landed_at IS NOT NULL")
        )
    assert len(landed) >= 40
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(landed)]
    long_gaps = [g for g in gaps if g >= 0.8]
    assert len(long_gaps) <= len(gaps) // 10, f"{len(long_gaps)} of {len(gaps)} gaps ≥ 0.8 s: {sorted(gaps)[-10:]}"


def test_pandas_run_prints_the_sandbox_layers_and_removes_its_private_work_folder(tmp_path):
    workdirs = tmp_path / "sandbox"
    workdirs.mkdir()
    items = numbered_items(PANDAS_ITEMS, 4, tmp_path / "items.jsonl")
    with FolderWatch(workdirs) as watch:
        result = subprocess.run(
            run_command(items, "pandas_codegen", tmp_path, "--dataset", f"hr={HR}"),
            env=embedded_env(ASSAY_SANDBOX_WORKDIR=str(workdirs)), cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    # Printed once, as a distributed worker logs it: the executor and its active layers.
    layers_lines = [line for line in result.stderr.splitlines() if line.startswith("sandbox executor pid ")]
    assert len(layers_lines) == 1, result.stderr[-3000:]
    assert ": layers " in layers_lines[0] and "rlimits" in layers_lines[0]
    # It held copies of the datasets: nobody else could enter it, and it is gone.
    assert len(watch.modes) == 1, watch.modes
    (modes,) = watch.modes.values()
    assert all(mode & 0o007 == 0 for mode in modes), [oct(m) for m in modes]
    if os.geteuid() != 0 or "setuid" not in layers_lines[0]:
        assert modes == {0o700}, [oct(m) for m in modes]
    assert list(workdirs.iterdir()) == []


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_run_stopped_midway_leaves_no_work_folder(tmp_path, how):
    # SIGTERM unwinds the run like Ctrl-C; SIGKILL leaves it no chance, and the executor cleans up
    # after itself when its parent dies.
    workdirs = tmp_path / "sandbox"
    workdirs.mkdir()
    items = numbered_items(PANDAS_ITEMS, 200, tmp_path / "items.jsonl")
    proc = subprocess.Popen(
        run_command(items, "pandas_codegen", tmp_path, "--dataset", f"hr={HR}"),
        env=embedded_env(ASSAY_SANDBOX_WORKDIR=str(workdirs)), cwd=tmp_path,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        wait_for(lambda: any((d / "runs").is_dir() for d in workdirs.iterdir()), timeout=180, message="the sandbox to start")
        proc.send_signal(how)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode in ((128 + how, -how) if how == signal.SIGTERM else (-how,)), stderr[-3000:]
    if how == signal.SIGTERM:
        assert "Traceback" not in stderr, stderr[-3000:]
    try:
        wait_for(lambda: list(workdirs.iterdir()) == [], timeout=30, message="the work folder to be removed")
    except AssertionError:
        raise AssertionError(f"left behind: {sorted(str(p) for p in workdirs.rglob('*'))}") from None
