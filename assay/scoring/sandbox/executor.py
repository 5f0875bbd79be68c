"""The executor: a long-lived, clean process with pandas pre-imported that forks one child per run.

Started by :mod:`assay.scoring.sandbox.client` with an empty environment (a handful of fixed
variables, no API keys, no database URL), no inherited descriptors but its three pipes, its own
session, and a private work directory. At start-up it:

1. asks for SIGTERM when its parent (the worker) dies — it exits through its clean-up, removing its
   work directory — and leaves the network: a fresh network namespace (``unshare(CLONE_NEWNET)``,
   where permitted) has only a loopback that is down;
2. imports pandas and NumPy and warms up the code paths generated code commonly takes;
3. probes every layer by confining a throwaway child (``layers`` below), logs what is active,
   and refuses to run code when a required layer is missing (``ASSAY_SANDBOX_REQUIRE``).

Then it serves JSON frames on stdin/stdout (:mod:`assay.scoring.sandbox.protocol`), one request
at a time: ``hello``, ``load`` (a dataset's tables, kept by key and parsed once, so each run
inherits the frames copy-on-write), ``run`` (fork, confine, execute, measure; best of
``repeat``), ``shutdown``. The child reports over its own pipe; the executor enforces the wall
timeout from outside (SIGKILL to the child's process group), reads at most the output limit, and
measures wall time (from the child's ``ready`` to its ``done``), CPU time and peak memory
(``wait4`` rusage, above the executor's own resident size at the fork).
"""

from __future__ import annotations

import base64
import ctypes
import gc
import io
import json
import logging
import os
import select
import shutil
import signal
import struct
import sys
import sysconfig
import tempfile
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assay.scoring.sandbox import landlock, seccomp
from assay.scoring.sandbox.config import SANDBOX_UID_BASE, SANDBOX_UID_SPAN, SandboxLimits
from assay.scoring.sandbox.protocol import read_frame, write_frame

log = logging.getLogger("assay.sandbox.executor")

_CLONE_NEWNET = 0x40000000
_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)
_PAGE = os.sysconf("SC_PAGE_SIZE")
SETUP_SECONDS = 5.0
MAX_DATASETS = 16
MAX_DATASET_BYTES = 2 * 1024**3


@dataclass
class Dataset:
    key: str
    directory: Path
    frames: dict[str, Any]
    files: dict[str, str]
    info: dict[str, Any]
    size: int


@dataclass
class Executor:
    limits: SandboxLimits
    required: tuple[str, ...]
    workdir: Path
    layers: dict[str, Any] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    read_only: list[str] = field(default_factory=list)
    datasets: OrderedDict[str, Dataset] = field(default_factory=OrderedDict)
    runs: int = 0
    _zombies: dict[int, str] = field(default_factory=dict)
    _running: int | None = None  # the child of the run in flight

    # --- start-up ---------------------------------------------------------------------------

    def start(self) -> None:
        _libc.prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGTERM), 0, 0, 0)
        self.layers["network_namespace"] = _leave_network()
        _import_pandas()
        for sub in ("runs", "datasets"):
            (self.workdir / sub).mkdir(mode=0o711, exist_ok=True)
        self.read_only = _read_only_paths()
        self._probe()
        gc.freeze()  # children do not walk (and so do not copy) the executor's objects

    def _probe(self) -> None:
        abi = landlock.abi_version()
        self.layers["rlimits"] = True
        self.layers["landlock"] = abi if abi >= 1 else False
        self.layers["landlock_tcp"] = abi >= 4
        self.layers["landlock_scopes"] = abi >= 6
        self.layers["seccomp"] = seccomp.supported()
        if os.geteuid() == 0:
            blocked = _not_world_readable(self.read_only)
            if blocked:
                # The unprivileged uid could not reach the interpreter's own files (e.g. Python
                # installed under /root, mode 0700): imports would fail. The other layers still
                # hold; RLIMIT_NPROC then does not bind (root), seccomp stops new processes.
                self.layers["setuid"] = False
                self.layers.setdefault("probe_errors", []).append(
                    f"setuid: {blocked} is not readable by other users, so an unprivileged uid could not import from it"
                )
                log.warning("sandbox layer setuid off: %s is not readable by other users", blocked)
            else:
                self.layers["setuid"] = SANDBOX_UID_BASE + os.getpid() % SANDBOX_UID_SPAN
        else:
            self.layers["setuid"] = False
        self._admit_sandbox_uid()
        # Confine a throwaway child with every layer; when that fails, keep the layers that work
        # on their own (each failure is logged and reported), then check the combination.
        optional = ("seccomp", "landlock", "setuid")
        outcome = self._run_once("result = 1", None, self.limits)
        if outcome.get("status") != "ok":
            wanted = {name: self.layers[name] for name in optional}
            errors = self.layers.setdefault("probe_errors", [])
            errors.append(f"all layers: {outcome.get('message') or outcome.get('error')}")
            for name in optional:
                self.layers[name] = False
            for name, value in wanted.items():
                if not value:
                    continue
                self.layers[name] = value
                alone = self._run_once("result = 1", None, self.limits)
                if alone.get("status") != "ok":
                    errors.append(f"{name}: {alone.get('message') or alone.get('error')}")
                    log.warning("sandbox layer %s does not apply here: %s", name, errors[-1])
                    self.layers[name] = False
            if self._run_once("result = 1", None, self.limits).get("status") != "ok":
                for name in optional:
                    self.layers[name] = False
                self.layers["rlimits"] = self._run_once("result = 1", None, self.limits).get("status") == "ok"
            self._admit_sandbox_uid()
        if not self.layers["landlock"]:
            self.layers["landlock_tcp"] = self.layers["landlock_scopes"] = False
        root = os.geteuid() == 0
        self.layers["no_network"] = bool(self.layers["network_namespace"] or self.layers["seccomp"])
        self.layers["no_new_processes"] = bool(self.layers["seccomp"] or (not root and self.layers["rlimits"]))
        self.layers["filesystem"] = bool(self.layers["landlock"])
        self.layers["signals"] = bool(self.layers["seccomp"] or self.layers["landlock_scopes"] or self.layers["setuid"])
        self.missing = [name for name in self.required if not self.layers.get(name)]
        active = [k for k, v in self.layers.items() if v and k != "probe_errors"]
        log.info("sandbox layers active: %s", ", ".join(active))
        if self.missing:
            log.error("sandbox layers missing (required): %s — runs are refused", ", ".join(self.missing))

    def _admit_sandbox_uid(self) -> None:
        """The work directory holds copies of the datasets: only this process's uid may enter it and,
        with the setuid layer, the sandbox uid's own group, to reach its run directory (search only,
        no listing). Other users get nothing."""
        uid = self.layers.get("setuid")
        os.chown(self.workdir, -1, uid or os.getegid())
        os.chmod(self.workdir, 0o710 if uid else 0o700)

    # --- datasets ---------------------------------------------------------------------------

    def load(self, key: str, tables: list[dict[str, Any]]) -> dict[str, Any]:
        if key in self.datasets:
            self.datasets.move_to_end(key)
            return self.datasets[key].info
        directory = self.workdir / "datasets" / f"d{os.urandom(6).hex()}"
        directory.mkdir(mode=0o755)
        frames: dict[str, Any] = {}
        files: dict[str, str] = {}
        info: dict[str, Any] = {}
        size = 0
        try:
            for table in tables:
                name, fmt = str(table["name"]), str(table["format"])
                if not name.isidentifier() or fmt not in ("csv", "parquet", "json"):
                    raise ValueError(f"bad table {name!r} ({fmt!r})")
                data = base64.b64decode(table["data"])
                size += len(data)
                filename = f"{name}.{fmt}"
                path = directory / filename
                path.write_bytes(data)
                os.chmod(path, 0o644)
                try:
                    frame = _parse_table(fmt, data)
                except Exception as exc:  # noqa: BLE001 - any parser error means: not readable
                    raise ValueError(f"table {name!r} is not readable as {fmt}: {type(exc).__name__}: {exc}") from None
                frames[name] = frame
                files[name] = filename
                info[name] = {
                    "columns": [str(c) for c in frame.columns],
                    "dtypes": [str(t) for t in frame.dtypes],
                    "rows": int(len(frame)),
                    "file": filename,
                }
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        self.datasets[key] = Dataset(key, directory, frames, files, info, size)
        while len(self.datasets) > MAX_DATASETS or sum(d.size for d in self.datasets.values()) > MAX_DATASET_BYTES:
            if len(self.datasets) == 1:
                break
            _, old = self.datasets.popitem(last=False)
            shutil.rmtree(old.directory, ignore_errors=True)
        gc.freeze()
        return info

    # --- runs -------------------------------------------------------------------------------

    def run(self, code: str, key: str | None, limits: SandboxLimits, repeat: int) -> dict[str, Any]:
        if self.missing:
            return {"status": "sandbox_error", "message": f"sandbox layers missing: {', '.join(self.missing)}"}
        dataset = None
        if key is not None:
            dataset = self.datasets.get(key)
            if dataset is None:
                return {"status": "unknown_dataset", "message": f"dataset {key} is not loaded"}
            self.datasets.move_to_end(key)
        first = self._run_once(code, dataset, limits)
        if first["status"] != "ok" or repeat <= 1:
            first["runs"] = 1
            return first
        walls, memories, cpus = [first["wall_ms"]], [first["peak_memory_kb"]], [first["cpu_ms"]]
        for _ in range(repeat - 1):
            again = self._run_once(code, dataset, limits)
            if again["status"] != "ok":
                first.setdefault("repeat_errors", []).append(again.get("error"))
                continue
            walls.append(again["wall_ms"])
            memories.append(again["peak_memory_kb"])
            cpus.append(again["cpu_ms"])
        first.update(
            wall_ms=min(walls), wall_ms_runs=walls, peak_memory_kb=min(memories), peak_memory_kb_runs=memories,
            cpu_ms=min(cpus), runs=len(walls),
        )
        return first

    def _run_once(self, code: str, dataset: Dataset | None, limits: SandboxLimits) -> dict[str, Any]:
        from assay.scoring.sandbox.runner import child_main

        self.reap()
        self.runs += 1
        run_dir = tempfile.mkdtemp(prefix="run-", dir=self.workdir / "runs")
        uid = self.layers.get("setuid")
        if uid:
            os.chown(run_dir, uid, uid)
        os.chmod(run_dir, 0o700)
        read_only = list(self.read_only)
        frames: dict[str, Any] = {}
        if dataset is not None:
            read_only.append(str(dataset.directory))
            frames = dict(dataset.frames)
            for filename in dataset.files.values():
                os.symlink(dataset.directory / filename, os.path.join(run_dir, filename))
        size_pages = int(Path("/proc/self/statm").read_text().split()[0])
        read_fd, write_fd = os.pipe()
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            try:
                os.close(read_fd)
                for other in list(self.datasets.values()):
                    if other is not dataset:
                        other.frames = {}
                child_main(
                    code=code,
                    frames=frames,
                    result_fd=write_fd,
                    layers=self.layers,
                    limits=limits.to_dict(),
                    run_dir=run_dir,
                    read_only=read_only,
                    address_space_base=size_pages * _PAGE,
                )
            finally:
                os._exit(72)
        self._running = pid
        os.close(write_fd)
        try:
            outcome, exited = self._collect(pid, read_fd, started, limits)
        finally:
            os.close(read_fd)
        # Not in the finally: when the parent-death signal interrupts the run (SystemExit), the child
        # must stay known, so that stop_children kills it before the work folder is removed.
        self._running = None
        if exited:
            shutil.rmtree(run_dir, ignore_errors=True)
        else:
            self._zombies[pid] = run_dir
        return outcome

    def reap(self, block: bool = False) -> None:
        """Reap children killed after they reported (their exit is off the run's critical path)."""
        for pid, run_dir in list(self._zombies.items()):
            try:
                reaped, _ = os.waitpid(pid, 0 if block else os.WNOHANG)
            except ChildProcessError:
                reaped = pid
            if reaped == pid:
                del self._zombies[pid]
                shutil.rmtree(run_dir, ignore_errors=True)

    def stop_children(self) -> None:
        """Kill and reap every child still alive (the run in flight, those killed after they reported):
        one still running would go on writing into the work folder while it is removed."""
        pids = [*self._zombies, *([self._running] if self._running is not None else [])]
        for pid in pids:
            _kill(pid)
        for pid in pids:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        self._zombies.clear()
        self._running = None

    def _collect(self, pid: int, fd: int, started: float, limits: SandboxLimits) -> tuple[dict[str, Any], bool]:
        """Read the child's frames until its result (then measure it from /proc, kill it and leave
        the reaping for later), its exit, a failure or the deadline. Returns (outcome, reaped)."""
        buffer = bytearray()
        cap = limits.output_bytes + 2 * limits.stdout_bytes + 64 * 1024
        frames: list[dict[str, Any]] = []
        deadline = started + SETUP_SECONDS
        ready_at: float | None = None
        done_at: float | None = None
        baseline_kb: int | None = None
        failure: dict[str, Any] | None = None
        result_seen = False
        eof = False
        while not eof and not result_seen and failure is None:
            now = time.monotonic()
            if now >= deadline:
                failure = (
                    {"category": "timeout", "type": "Timeout", "message": f"the code ran past the {limits.wall_seconds:g} s wall timeout"}
                    if ready_at is not None and done_at is None
                    else {"category": "timeout", "type": "Timeout", "message": "the sandboxed child did not report in time"}
                )
                break
            readable, _, _ = select.select([fd], [], [], deadline - now)
            if not readable:
                continue
            chunk = os.read(fd, 1 << 16)
            arrived = time.monotonic()
            if not chunk:
                eof = True
            buffer += chunk
            if len(buffer) > cap:
                failure = {"category": "output_limit", "type": "OutputTooLarge", "message": f"the child wrote more than {cap} bytes"}
                break
            while len(buffer) >= 4 and failure is None and not result_seen:
                (size,) = struct.unpack(">I", buffer[:4])
                if size > cap:
                    failure = {"category": "output_limit", "type": "OutputTooLarge", "message": f"the result is larger than {cap} bytes"}
                    break
                if len(buffer) < 4 + size:
                    break
                try:
                    message = json.loads(bytes(buffer[4 : 4 + size]))
                except ValueError:
                    message = None
                del buffer[: 4 + size]
                if not isinstance(message, dict):
                    failure = {"category": "protocol", "type": "ProtocolError", "message": "the child wrote a malformed frame"}
                    break
                frames.append(message)
                phase = message.get("phase")
                if phase == "ready" and ready_at is None:
                    ready_at = arrived
                    deadline = arrived + limits.wall_seconds
                    rss = message.get("rss_kb")
                    baseline_kb = rss if isinstance(rss, int) else None
                elif phase == "done" and ready_at is not None and done_at is None:
                    done_at = arrived
                    deadline = arrived + max(SETUP_SECONDS, limits.wall_seconds)  # encoding the result
                elif phase in ("result", "setup_error"):
                    result_seen = True
        peak_kb = cpu_ms = None
        exited = False
        usage = status = None
        if result_seen and failure is None:
            # The child waits (paused) after its result: measure it now, then kill it.
            peak_kb, cpu_ms = _proc_usage(pid)
            _kill(pid)
        else:
            if failure is not None or not eof:
                _kill(pid)
            status, usage = _reap(pid, time.monotonic() + 2.0)
            exited = True
            peak_kb = int(usage.ru_maxrss) if usage else None
            cpu_ms = round((usage.ru_utime + usage.ru_stime) * 1000, 3) if usage else None
        outcome = self._outcome(frames, failure, status, usage, limits)
        outcome["wall_ms"] = round((done_at - ready_at) * 1000, 3) if ready_at and done_at else None
        outcome["cpu_ms"] = cpu_ms
        outcome["peak_memory_kb"] = max(0, peak_kb - baseline_kb) if peak_kb is not None and baseline_kb is not None else None
        outcome["exit"] = _describe_status(status) if exited else {"signal": "SIGKILL", "after": "result"}
        return outcome, exited

    def _outcome(self, frames: list, failure: dict | None, status: int | None, usage: Any, limits: SandboxLimits) -> dict[str, Any]:
        messages = frames
        setup = next((m for m in messages if m.get("phase") == "setup_error"), None)
        if setup is not None:
            return {"status": "sandbox_error", "message": f"the sandbox could not be set up: {setup.get('message')}"}
        final = next((m for m in messages if m.get("phase") == "result"), None)
        ready = any(m.get("phase") == "ready" for m in messages)
        if failure is None and final is not None and isinstance(final.get("status"), str):
            out = {"status": "ok" if final["status"] == "ok" else "error"}
            if out["status"] == "ok":
                out["result"] = final.get("result")
            else:
                error = final.get("error") if isinstance(final.get("error"), dict) else {}
                out["error"] = error
            out["stdout"] = str(final.get("stdout", ""))[:4096]
            out["stderr"] = str(final.get("stderr", ""))[:4096]
            return out
        if failure is None:
            failure = _death_reason(status, usage, limits, ready)
        if not ready and failure.get("category") in ("crashed", "timeout"):
            return {"status": "sandbox_error", "message": f"the sandboxed child died during set-up: {failure['message']}"}
        failure.setdefault("mro", [])
        return {"status": "error", "error": failure}


def _death_reason(status: int | None, usage: Any, limits: SandboxLimits, ready: bool) -> dict[str, Any]:
    if status is not None and os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        cpu = (usage.ru_utime + usage.ru_stime) if usage else 0.0
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu >= limits.cpu_seconds):
            return {"category": "cpu_limit", "type": "CpuLimit", "message": f"the code used more than {limits.cpu_seconds} s of CPU"}
        if sig == signal.SIGSYS:
            return {"category": "crashed", "type": "Killed", "message": "killed by the seccomp filter (forbidden system call)"}
        return {"category": "crashed", "type": "Killed", "message": f"the code was killed by signal {signal.Signals(sig).name}"}
    return {"category": "crashed", "type": "NoResult", "message": "the code exited without a result" if ready else "the child exited during set-up"}


def _describe_status(status: int | None) -> dict[str, Any]:
    if status is None:
        return {}
    if os.WIFSIGNALED(status):
        return {"signal": signal.Signals(os.WTERMSIG(status)).name}
    return {"code": os.WEXITSTATUS(status)}


def _kill(pid: int) -> None:
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except (ProcessLookupError, PermissionError):
            pass


def _reap(pid: int, deadline: float) -> tuple[int | None, Any]:
    while True:
        reaped, status, usage = os.wait4(pid, os.WNOHANG)
        if reaped == pid:
            return status, usage
        if time.monotonic() >= deadline:
            _kill(pid)
            _, status, usage = os.wait4(pid, 0)
            return status, usage
        time.sleep(0.0005)


def _not_world_readable(paths: list[str]) -> str | None:
    """The first directory on the way to ``paths`` that other users cannot enter or list."""
    for path in paths:
        current = Path(path)
        for directory in [*reversed(current.parents), current]:
            try:
                mode = directory.stat().st_mode
            except OSError:
                break
            if not mode & 0o001 or (directory == current and not mode & 0o004):
                return str(directory)
    return None


def _proc_usage(pid: int) -> tuple[int | None, float | None]:
    """Peak resident size (kB, VmHWM) and CPU time (ms) of a live child, read by the parent."""
    peak = cpu = None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                peak = int(line.split()[1])
                break
        cpu = round(int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e6, 3)
    except (OSError, ValueError, IndexError):
        pass
    return peak, cpu


def _leave_network() -> bool:
    if _libc.unshare(_CLONE_NEWNET) != 0:
        log.info("no network namespace (unshare: %s); relying on seccomp and Landlock", os.strerror(ctypes.get_errno()))
        return False
    return True


def _parse_table(fmt: str, data: bytes) -> Any:
    import pandas as pd

    if fmt == "csv":
        return pd.read_csv(io.BytesIO(data))
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return pq.read_table(io.BytesIO(data), use_threads=False).to_pandas(use_threads=False)
    records = json.loads(data)
    if not isinstance(records, list):
        raise ValueError("a JSON table is a list of records")
    return pd.DataFrame.from_records(records) if records else pd.DataFrame()


def _import_pandas() -> None:
    """Import and exercise what generated code commonly uses, so no child has to."""
    import numpy as np
    import pandas as pd

    frame = pd.DataFrame({"a": [1, 2, 2], "b": ["x", "y", "y"], "c": [1.5, None, 3.0], "d": ["2024-01-01", "2024-02-01", "2024-03-01"]})
    frame.groupby("b").agg(total=("a", "sum"), mean=("c", "mean")).reset_index()
    frame.groupby(["b", "a"]).size().unstack(fill_value=0)
    frame.pivot_table(index="b", values="a", aggfunc="sum")
    frame.merge(frame, on="a").sort_values("a", ascending=False).head(2)
    frame.query("a > 1 and b == 'y'")
    frame.assign(e=lambda f: f.a * 2).nlargest(2, "a").nsmallest(1, "a")
    frame["b"].str.contains("x").sum()
    frame["b"].str.upper().value_counts()
    pd.to_datetime(frame["d"]).dt.year.value_counts()
    frame.set_index("b").loc["y"]
    frame.describe()
    frame.apply(lambda row: row["a"], axis=1)
    frame.rolling(2).mean(numeric_only=True)
    frame["a"].rank()
    pd.concat([frame, frame]).drop_duplicates()
    pd.crosstab(frame["a"], frame["b"])
    frame.isna().any()
    np.where(frame["a"] > 1, 1, 0)
    pd.read_csv(io.StringIO("x,y\n1,2\n"))
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401

        # Arrow's thread pools (parquet, CSV engine='pyarrow') stay small, within a child's thread budget.
        pyarrow.set_cpu_count(4)
        pyarrow.set_io_thread_count(4)
    except ImportError:
        pass
    import datetime  # noqa: F401
    import math  # noqa: F401
    import re  # noqa: F401
    import statistics  # noqa: F401


def _read_only_paths() -> list[str]:
    """What a child may read: the interpreter's library trees, the directories of every shared
    object loaded, and the time-zone database. Not the repository, /etc, /proc or /home."""
    paths: set[str] = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        value = sysconfig.get_paths().get(key)
        if value:
            paths.add(os.path.realpath(value))
    for module in list(sys.modules.values()):
        origin = getattr(module, "__file__", None)
        if origin and ("site-packages" in origin or "dist-packages" in origin or origin.startswith(sys.base_prefix)):
            parts = Path(os.path.realpath(origin)).parts
            for marker in ("site-packages", "dist-packages"):
                if marker in parts:
                    paths.add(str(Path(*parts[: parts.index(marker) + 1])))
    try:
        for line in Path("/proc/self/maps").read_text().splitlines():
            fields = line.split(None, 5)
            if len(fields) == 6 and fields[5].startswith("/") and ".so" in fields[5]:
                paths.add(os.path.dirname(os.path.realpath(fields[5])))
    except OSError:
        pass
    for extra in ("/usr/share/zoneinfo",):
        if os.path.isdir(extra):
            paths.add(extra)
    # Never a tree that holds everything.
    return sorted(p for p in paths if p not in ("/", "/usr", "/tmp", "/home", "/root", "/etc", "/var"))


# --- the serving loop ---------------------------------------------------------------------------


def serve(executor: Executor, in_fd: int, out_fd: int) -> None:
    while True:
        try:
            request = read_frame(in_fd)
        except EOFError:
            return
        op = request.get("op")
        try:
            if op == "hello":
                reply = {"ok": True, "pid": os.getpid(), "layers": executor.layers, "missing": executor.missing,
                         "limits": executor.limits.to_dict(), "pandas": _pandas_version(), "python": sys.version.split()[0],
                         "read_only": executor.read_only}
            elif op == "load":
                reply = {"ok": True, "frames": executor.load(str(request["key"]), list(request["tables"]))}
            elif op == "run":
                limits = executor.limits.clamp(request.get("limits"))
                repeat = max(1, min(int(request.get("repeat", 1)), 5))
                reply = {"ok": True, **executor.run(str(request["code"]), request.get("key"), limits, repeat)}
            elif op == "shutdown":
                write_frame(out_fd, {"ok": True})
                return
            else:
                reply = {"ok": False, "error": f"unknown op {op!r}"}
        except Exception as exc:  # noqa: BLE001 - a bad request must not take the executor down
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]}
        write_frame(out_fd, reply)


def _pandas_version() -> str:
    import pandas as pd

    return str(pd.__version__)


def _exit_once(*_: Any) -> None:
    # The parent-death signal comes once per parent thread that exits (a killed multi-threaded
    # worker hands this process from thread to thread as they die): only the first may interrupt;
    # a second one, even before the clean-up has begun, must not cut it short.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.exit(0)


def main() -> None:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
    config = json.loads(sys.argv[-1])
    limits = SandboxLimits(**config["limits"])
    workdir = Path(config["workdir"])
    # The protocol owns fds 0 and 1; nothing else may print to stdout.
    in_fd, out_fd = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    executor = Executor(limits=limits, required=tuple(config["required"]), workdir=workdir)
    signal.signal(signal.SIGTERM, _exit_once)
    try:
        executor.start()
        serve(executor, in_fd, out_fd)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        executor.stop_children()
        shutil.rmtree(workdir, ignore_errors=True)
