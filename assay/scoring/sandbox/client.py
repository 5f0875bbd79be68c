"""The worker's side of the sandbox: one executor per worker process, started lazily after fork.

>>> from assay.scoring.sandbox import sandbox_client
>>> outcome = sandbox_client().run("result = df.a.sum()", dataset=DatasetRef(key, tables))

:func:`sandbox_client` is the module-level accessor metrics use. It builds the client on first use
*in the calling process* (a forked worker never reuses its parent's executor: the pid is checked)
and the client starts the executor on its first request. The executor is a separate process:
``python -s -P -c <boot>`` with an environment of fixed values only (no API keys, no database URL,
no proxies), no inherited descriptors but its stdin/stdout/stderr pipes, its own session and a
private work directory. It dies with the worker (parent-death signal, and EOF on its stdin).

Requests are serialised per client (one run at a time per worker process); an executor that
crashed or stopped answering is killed and restarted on the next request, and the request that
saw it fails with :class:`SandboxError`.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assay.scoring.sandbox.config import SandboxLimits, limits_from_env, required_layers_from_env
from assay.scoring.sandbox.protocol import encode_frame, read_frame

log = logging.getLogger("assay.sandbox")

START_TIMEOUT = 120.0
_BOOT = (
    "import sys; sys.path[:0] = [sys.argv[1]]; "
    "from assay.scoring.sandbox.executor import main; main()"
)
_CLEAN_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TZ": "UTC",
    "HOME": "/nonexistent",
    "PYTHONHASHSEED": "0",
    "PYTHONDONTWRITEBYTECODE": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "NUMEXPR_MAX_THREADS": "1",
    "ARROW_DEFAULT_MEMORY_POOL": "system",
}


class SandboxError(Exception):
    """The sandbox itself failed (not the code it ran): the executor crashed, timed out or refused."""


class SandboxUnavailable(SandboxError):
    """The executor cannot start, or runs nothing because a required layer is missing."""


@dataclass(frozen=True)
class DatasetRef:
    """A dataset the executor keeps by ``key``; ``tables`` (objects with ``name``, ``format``,
    ``data``, or a callable returning them) is sent once per executor, when it first needs it."""

    key: str
    tables: Iterable[Any] | Callable[[], Iterable[Any]]


@dataclass
class RunResult:
    """What one run (best of ``runs``) produced. ``status`` is ``ok`` or ``error``; an error's
    ``error`` has ``category`` (exception, timeout, cpu_limit, output_limit, no_result,
    unsupported_result, crashed, protocol), ``type``, ``mro`` (builtin classes), ``message``."""

    status: str
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    wall_ms: float | None = None
    wall_ms_runs: list[float] = field(default_factory=list)
    cpu_ms: float | None = None
    peak_memory_kb: int | None = None
    peak_memory_kb_runs: list[int] = field(default_factory=list)
    runs: int = 1
    stdout: str = ""
    exit: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status, "result": self.result, "error": self.error, "wall_ms": self.wall_ms,
            "wall_ms_runs": self.wall_ms_runs, "cpu_ms": self.cpu_ms, "peak_memory_kb": self.peak_memory_kb,
            "peak_memory_kb_runs": self.peak_memory_kb_runs, "runs": self.runs, "stdout": self.stdout, "exit": self.exit,
        }

    @classmethod
    def from_reply(cls, reply: dict[str, Any]) -> RunResult:
        error = reply.get("error") if isinstance(reply.get("error"), dict) else None
        wall = reply.get("wall_ms")
        memory = reply.get("peak_memory_kb")
        return cls(
            status="ok" if reply.get("status") == "ok" else "error",
            result=reply.get("result") if reply.get("status") == "ok" else None,
            error=error,
            wall_ms=wall,
            wall_ms_runs=list(reply.get("wall_ms_runs") or ([wall] if wall is not None else [])),
            cpu_ms=reply.get("cpu_ms"),
            peak_memory_kb=memory,
            peak_memory_kb_runs=list(reply.get("peak_memory_kb_runs") or ([memory] if memory is not None else [])),
            runs=int(reply.get("runs") or 1),
            stdout=str(reply.get("stdout") or ""),
            exit=dict(reply.get("exit") or {}),
        )


def _assay_root() -> str:
    import assay

    return str(Path(assay.__file__).resolve().parent.parent)


class SandboxClient:
    def __init__(
        self,
        limits: SandboxLimits | None = None,
        required: tuple[str, ...] | None = None,
        python: str = sys.executable,
        workdir_parent: str | None = None,
    ) -> None:
        self.limits = limits or limits_from_env()
        self.required = required_layers_from_env() if required is None else required
        self.python = python
        self.workdir_parent = workdir_parent or os.environ.get("ASSAY_SANDBOX_WORKDIR") or None
        self._lock = threading.RLock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._workdir: str | None = None
        self._hello: dict[str, Any] | None = None
        self._loaded: set[str] = set()
        self._owner = os.getpid()
        self.starts = 0

    # --- lifecycle --------------------------------------------------------------------------

    def _start(self) -> None:
        self._workdir = tempfile.mkdtemp(prefix="assay-sandbox-", dir=self.workdir_parent)
        config = json.dumps({"limits": self.limits.to_dict(), "required": list(self.required), "workdir": self._workdir})
        flags = ["-s", "-P"] if sys.version_info >= (3, 11) else ["-s"]
        self._proc = subprocess.Popen(
            [self.python, *flags, "-c", _BOOT, _assay_root(), config],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(_CLEAN_ENV),
            cwd=self._workdir,
            close_fds=True,
            start_new_session=True,
        )
        self.starts += 1
        self._loaded = set()
        threading.Thread(target=self._forward_log, args=(self._proc,), name="sandbox-log", daemon=True).start()
        try:
            self._hello = self._request({"op": "hello"}, timeout=START_TIMEOUT)
        except SandboxError as exc:
            self._stop(kill=True)
            raise SandboxUnavailable(f"the sandbox executor did not start: {exc}") from None
        layers = self._hello.get("layers", {})
        # ``sandbox_layers`` marks the record for whoever shows it to a person (``assay run`` prints it).
        log.info(
            "sandbox executor pid %s: layers %s%s",
            self._hello.get("pid"),
            ", ".join(k for k, v in layers.items() if v and k != "probe_errors"),
            f"; MISSING (runs refused): {', '.join(self._hello['missing'])}" if self._hello.get("missing") else "",
            extra={"sandbox_layers": layers},
        )

    def _forward_log(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stderr is not None
        for line in iter(proc.stderr.readline, b""):
            log.info("executor: %s", line.decode(errors="replace").rstrip()[:2000])

    def _ensure(self) -> None:
        if self._owner != os.getpid():
            raise SandboxError("this sandbox client belongs to another process; use sandbox_client()")
        if self._proc is None or self._proc.poll() is not None:
            if self._proc is not None:
                log.warning("sandbox executor exited (%s); restarting", self._proc.returncode)
                self._stop(kill=True)
            self._start()

    def _stop(self, *, kill: bool) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                if not kill:
                    try:
                        assert proc.stdin is not None
                        proc.stdin.write(encode_frame({"op": "shutdown"}))
                        proc.stdin.flush()
                        proc.wait(timeout=5)
                    except Exception:  # noqa: BLE001 - fall through to the kill
                        pass
                if proc.poll() is None:
                    # Mid-run, the executor reads no request until its run ends: SIGTERM stops the run
                    # and lets it kill its child and remove its work folder; SIGKILL only if that hangs
                    # (its child, killed with it, could still be writing while the folder is removed).
                    proc.terminate()
                    try:
                        proc.wait(timeout=5)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait(timeout=10)
            for stream in (proc.stdin, proc.stdout):
                try:
                    if stream is not None:
                        stream.close()
                except OSError:
                    pass
        if self._workdir:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
        self._hello = None
        self._loaded = set()

    def close(self) -> None:
        with self._lock:
            if self._owner == os.getpid():
                self._stop(kill=False)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    # --- requests ---------------------------------------------------------------------------

    def _request(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        proc = self._proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(encode_frame(message))
            proc.stdin.flush()
            fd = proc.stdout.fileno()
            readable, _, _ = select.select([fd], [], [], timeout)
            if not readable:
                raise TimeoutError(f"no answer to {message.get('op')!r} within {timeout:g} s")
            reply = read_frame(fd)
        except (OSError, EOFError, ValueError, TimeoutError) as exc:
            self._stop(kill=True)
            raise SandboxError(f"sandbox executor failed: {type(exc).__name__}: {exc}") from None
        return reply

    def hello(self) -> dict[str, Any]:
        """The executor's start-up report: pid, layers, missing layers, limits, versions."""
        with self._lock:
            self._ensure()
            assert self._hello is not None
            return dict(self._hello)

    def layers(self) -> dict[str, Any]:
        return dict(self.hello().get("layers", {}))

    def load(self, dataset: DatasetRef) -> dict[str, Any]:
        """Send a dataset's tables to the executor (once per executor); its frames' columns, dtypes, rows."""
        with self._lock:
            self._ensure()
            tables = dataset.tables() if callable(dataset.tables) else dataset.tables
            payload = [
                {"name": t.name, "format": t.format, "data": base64.b64encode(t.data).decode()}
                for t in tables
            ]
            size = sum(len(t["data"]) for t in payload)
            reply = self._request({"op": "load", "key": dataset.key, "tables": payload}, timeout=60 + size / 5e6)
            if not reply.get("ok"):
                raise SandboxError(f"the dataset could not be loaded: {reply.get('error')}")
            self._loaded.add(dataset.key)
            return dict(reply.get("frames") or {})

    def run(
        self,
        code: str,
        *,
        dataset: DatasetRef | None = None,
        limits: SandboxLimits | dict[str, Any] | None = None,
        repeat: int = 1,
    ) -> RunResult:
        """Run ``code`` once per ``repeat`` (each in a fresh child); the first run's result, the best times."""
        wanted = limits.to_dict() if isinstance(limits, SandboxLimits) else (limits or {})
        effective = self.limits.clamp(wanted)
        timeout = repeat * (effective.wall_seconds + 12.0) + 30.0
        with self._lock:
            self._ensure()
            assert self._hello is not None
            if self._hello.get("missing"):
                raise SandboxUnavailable(f"sandbox layers missing: {', '.join(self._hello['missing'])}")
            for attempt in range(2):
                if dataset is not None and dataset.key not in self._loaded:
                    self.load(dataset)
                reply = self._request(
                    {"op": "run", "code": code, "key": dataset.key if dataset else None, "limits": wanted, "repeat": repeat},
                    timeout=timeout,
                )
                if reply.get("status") == "unknown_dataset" and attempt == 0 and dataset is not None:
                    self._loaded.discard(dataset.key)
                    continue
                break
            if not reply.get("ok"):
                raise SandboxError(str(reply.get("error")))
            if reply.get("status") not in ("ok", "error"):
                raise SandboxError(str(reply.get("message") or reply.get("status")))
            return RunResult.from_reply(reply)


# --- the per-process accessor ---------------------------------------------------------------------

_client: SandboxClient | None = None
_client_pid: int | None = None
_client_lock = threading.Lock()


def sandbox_client() -> SandboxClient:
    """This process's client (built on first use; a forked child builds its own)."""
    global _client, _client_pid
    with _client_lock:
        if _client is None or _client_pid != os.getpid():
            _client = SandboxClient()
            _client_pid = os.getpid()
        return _client


def set_sandbox_client(client: SandboxClient | None) -> None:
    """Install a client (tests, benchmarks); ``None`` drops the current one without stopping it."""
    global _client, _client_pid
    with _client_lock:
        _client = client
        _client_pid = os.getpid() if client is not None else None


def reset_after_fork() -> None:
    """In a freshly forked worker: forget the parent's client (its executor stays the parent's)."""
    global _client, _client_pid
    with _client_lock:
        _client = None
        _client_pid = None


def shutdown_sandbox() -> None:
    """Stop this process's executor, if it started one (worker shutdown)."""
    global _client, _client_pid
    with _client_lock:
        client, _client, _client_pid = _client, None, None
    if client is not None:
        client.close()


def sandbox_layers() -> dict[str, Any]:
    """Which sandbox layers are active in this process's executor (starting it if needed)."""
    return sandbox_client().layers()
