"""The sandboxed child: confine, run the generated code once, report over the result pipe.

Runs in the child the executor forked for one run, and never returns (``os._exit``). Order:

1. new session (the executor kills the whole group), stdin/stdout/stderr on ``/dev/null``, the
   result pipe on fd 3, every other descriptor closed (the executor's protocol pipes included);
2. resource limits: RLIMIT_AS (the executor's address space + the run's budget), RLIMIT_CPU,
   RLIMIT_FSIZE (SIGXFSZ ignored, so an oversize write raises instead of killing), RLIMIT_NOFILE,
   RLIMIT_CORE 0, and RLIMIT_NPROC (threads) when the child gets its own uid;
3. as root: all groups dropped, gid and uid set to the executor's unprivileged sandbox uid (all
   capabilities go with it; RLIMIT_NPROC binds from then on); parent-death signal SIGKILL;
4. ``no_new_privs``; Landlock (files, TCP, signal and abstract-socket scopes); seccomp deny-list;
5. ``{"phase": "ready"}``, the code, ``{"phase": "done"}``, then the encoded result.

A layer the executor reported active that fails to apply here aborts the run before any code runs
(``{"phase": "setup_error"}``): the sandbox fails closed.

The code's answer is its ``result`` variable; without one, the value of its last expression.
``pd``, ``np``, every table under its name, ``dfs`` (name -> frame) and, with a single table,
``df`` are predefined. ``random`` and NumPy's global generator are seeded with 0.
"""

from __future__ import annotations

import ast
import ctypes
import io
import os
import resource
import signal
import sys
import traceback
from typing import Any

from assay.scoring.sandbox import landlock, seccomp
from assay.scoring.sandbox.encode import OutputTooLarge, UnsupportedResult, encode_result
from assay.scoring.sandbox.protocol import write_frame

RESULT_FD = 3
_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


class OutputLimitExceeded(Exception):
    """The code printed more than the run allows."""


class _BoundedText(io.TextIOBase):
    def __init__(self, limit: int, *, strict: bool) -> None:
        self.limit = limit
        self.strict = strict
        self.size = 0
        self.kept: list[str] = []

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError("write() argument must be str")
        self.size += len(text)
        kept = sum(len(k) for k in self.kept)
        if kept < 4096:
            self.kept.append(text[: 4096 - kept])
        if self.strict and self.size > self.limit:
            raise OutputLimitExceeded(f"printed output exceeds {self.limit} characters")
        return len(text)

    def preview(self) -> str:
        return "".join(self.kept)


def _prepare_fds(result_fd: int) -> None:
    devnull = os.open("/dev/null", os.O_RDWR)
    if result_fd != RESULT_FD:
        os.dup2(result_fd, RESULT_FD)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.closerange(RESULT_FD + 1, max(resource.getrlimit(resource.RLIMIT_NOFILE)[0], 1024))


def _set_limits(limits: dict[str, Any], address_space_base: int, per_uid: bool) -> None:
    mb = 1024 * 1024
    cpu = int(limits["cpu_seconds"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    address_space = address_space_base + int(limits["memory_mb"]) * mb
    resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(limits["file_size_mb"]) * mb,) * 2)
    resource.setrlimit(resource.RLIMIT_NOFILE, (int(limits["open_files"]),) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if per_uid:
        # Counted per uid: meaningful only under the executor's own sandbox uid (as root, where it
        # would not bind anyway, or under a shared service uid, seccomp stops new processes and
        # RLIMIT_AS bounds threads).
        resource.setrlimit(resource.RLIMIT_NPROC, (int(limits["threads"]),) * 2)
    resource.setrlimit(resource.RLIMIT_MSGQUEUE, (0, 0))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def _drop_privileges(uid: int) -> None:
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if os.geteuid() != uid or os.getegid() != uid:
        raise OSError("could not change to the sandbox uid")


def _rss_kb() -> int:
    with open("/proc/self/statm", "rb") as handle:
        return int(handle.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)


def confine(*, layers: dict[str, Any], limits: dict[str, Any], run_dir: str, read_only: list[str], address_space_base: int) -> int:
    """Apply every active layer to the calling (child) process, or raise. Returns the resident
    size (kB) before any generated code runs: the baseline of the run's peak memory."""
    os.chdir(run_dir)
    baseline = _rss_kb()
    if layers.get("rlimits"):
        _set_limits(limits, address_space_base, per_uid=bool(layers.get("setuid")))
    if layers.get("setuid"):
        _drop_privileges(int(layers["setuid"]))
    if _libc.prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() == 1:
        raise OSError("the executor is gone")
    seccomp.set_no_new_privs()
    if layers.get("landlock"):
        landlock.restrict(int(layers["landlock"]), read_only=read_only, read_write_dirs=[run_dir])
    if layers.get("seccomp"):
        seccomp.install()
    return baseline


def _exception_info(exc: BaseException, code: str) -> dict[str, Any]:
    lines = code.splitlines()
    frames = []
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == "<generated>":
            text = lines[frame.lineno - 1].strip() if frame.lineno and 0 < frame.lineno <= len(lines) else ""
            frames.append({"line": frame.lineno, "code": text[:200]})
    info: dict[str, Any] = {
        "category": "exception",
        "type": type(exc).__name__,
        "mro": [c.__name__ for c in type(exc).__mro__ if c.__module__ == "builtins"],
        "message": str(exc)[:2000],
        "traceback": frames[-10:],
    }
    if isinstance(exc, SyntaxError):
        info["line"] = exc.lineno
        info["offset"] = exc.offset
    return info


def _execute(code: str, namespace: dict[str, Any]) -> Any:
    tree = ast.parse(code, "<generated>")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, "<generated>", "exec"), namespace)  # noqa: S102 - the point of the sandbox
    value = eval(compile(last, "<generated>", "eval"), namespace) if last is not None else None  # noqa: S307
    if "result" in namespace:
        return namespace["result"]
    if last is None:
        raise _NoResult("the code defines no `result` and does not end in an expression")
    return value


class _NoResult(Exception):
    pass


def child_main(
    *,
    code: str,
    frames: dict[str, Any],
    result_fd: int,
    layers: dict[str, Any],
    limits: dict[str, Any],
    run_dir: str,
    read_only: list[str],
    address_space_base: int,
) -> None:
    """Never returns."""
    status = 0
    try:
        os.setsid()
        _prepare_fds(result_fd)
        try:
            baseline = confine(layers=layers, limits=limits, run_dir=run_dir, read_only=read_only, address_space_base=address_space_base)
        except BaseException as exc:  # noqa: BLE001 - any failure means: do not run the code
            write_frame(RESULT_FD, {"phase": "setup_error", "message": f"{type(exc).__name__}: {exc}"[:1000]})
            os._exit(70)
        _run(code, frames, limits, run_dir, baseline)
        # Wait to be measured and killed by the executor (which is gone if we are orphaned).
        while os.getppid() != 1:
            signal.pause()
    except BaseException:  # noqa: BLE001
        status = 71
    finally:
        os._exit(status)


def _run(code: str, frames: dict[str, Any], limits: dict[str, Any], run_dir: str, baseline_kb: int) -> None:
    import random
    import tempfile

    import numpy as np
    import pandas as pd

    os.environ.clear()
    os.environ.update({"HOME": run_dir, "TMPDIR": run_dir, "LANG": "C.UTF-8", "TZ": "UTC"})
    tempfile.tempdir = run_dir
    random.seed(0)
    np.random.seed(0)
    out = _BoundedText(int(limits["stdout_bytes"]), strict=True)
    err = _BoundedText(int(limits["stdout_bytes"]), strict=False)
    sys.stdout, sys.stderr = out, err
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__, "pd": pd, "np": np}
    namespace.update(frames)
    namespace["dfs"] = dict(frames)
    if len(frames) == 1:
        namespace.setdefault("df", next(iter(frames.values())))
    write_frame(RESULT_FD, {"phase": "ready", "rss_kb": baseline_kb})
    message: dict[str, Any]
    try:
        value = _execute(code, namespace)
    except _NoResult as exc:
        write_frame(RESULT_FD, {"phase": "done"})
        message = {"phase": "result", "status": "error", "error": {"category": "no_result", "type": "NoResult", "mro": [], "message": str(exc)}}
    except BaseException as exc:  # noqa: BLE001 - SystemExit, KeyboardInterrupt included: all are the code's errors
        write_frame(RESULT_FD, {"phase": "done"})
        message = {"phase": "result", "status": "error", "error": _exception_info(exc, code)}
    else:
        write_frame(RESULT_FD, {"phase": "done"})
        try:
            encoded = encode_result(value, max_rows=int(limits["max_rows"]), max_bytes=int(limits["output_bytes"]))
            message = {"phase": "result", "status": "ok", "result": encoded}
        except OutputTooLarge as exc:
            message = {"phase": "result", "status": "error", "error": {"category": "output_limit", "type": "OutputTooLarge", "mro": [], "message": str(exc)}}
        except UnsupportedResult as exc:
            message = {"phase": "result", "status": "error", "error": {"category": "unsupported_result", "type": "UnsupportedResult", "mro": [], "message": str(exc)}}
        except BaseException as exc:  # noqa: BLE001 - a hostile __repr__ and the like
            info = _exception_info(exc, code)
            info["category"] = "unsupported_result"
            message = {"phase": "result", "status": "error", "error": info}
    message["stdout"] = out.preview()
    message["stderr"] = err.preview()
    write_frame(RESULT_FD, message)
