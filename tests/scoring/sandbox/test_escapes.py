"""Generated code is hostile: every escape is blocked, reported as the run's error, and the same
executor serves the next run. Network tests only ever touch a listener this test opened on
127.0.0.1."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import pytest

from tests.scoring.sandbox.conftest import TIGHT, still_serving

REPO = Path(__file__).resolve().parents[3]


def _error(outcome) -> dict:
    assert outcome.status == "error", f"expected the run to fail, got {outcome.result!r}"
    assert outcome.error is not None
    return outcome.error


def test_connect_to_a_listener_on_loopback_is_blocked(sandbox):
    pid = sandbox.pid
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(0.5)
        port = listener.getsockname()[1]
        code = f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=2)\ns.sendall(b'escaped')\nresult = 1"
        error = _error(sandbox.run(code))
        assert error["type"] in ("PermissionError", "OSError", "ConnectionRefusedError")
        with pytest.raises(socket.timeout):
            listener.accept()  # nothing ever reached the listener
    # Other socket routes fail the same way: UDP, a unix socket, a raw socket.
    for code in (
        f"import socket\nsocket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', {port}))",
        "import socket\nsocket.socket(socket.AF_UNIX, socket.SOCK_STREAM)",
        "import socket\nsocket.socketpair()",
    ):
        assert _error(sandbox.run(code))["type"] == "PermissionError"
    still_serving(sandbox, pid)


def test_write_outside_its_temp_dir_is_blocked(sandbox, tmp_path):
    pid = sandbox.pid
    targets = [tmp_path / "escaped.txt", Path("/tmp") / f"assay-escape-{os.getpid()}.txt", REPO / "escaped.txt"]
    for target in targets:
        error = _error(sandbox.run(f"open({str(target)!r}, 'w').write('escaped')\nresult = 1"))
        assert error["type"] == "PermissionError", error
        assert not target.exists()
    # Its own temp dir is writable (and removed after the run).
    outcome = sandbox.run("open('scratch.txt', 'w').write('ok')\nresult = open('scratch.txt').read()")
    assert outcome.ok and outcome.result["rows"] == [["ok"]]
    still_serving(sandbox, pid)


def test_read_outside_the_dataset_is_blocked(sandbox, employees, tmp_path):
    pid = sandbox.pid
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    for path in (secret, REPO / "pyproject.toml", Path("/etc/passwd"), Path(f"/proc/{os.getpid()}/environ")):
        error = _error(sandbox.run(f"result = open({str(path)!r}).read()", dataset=employees))
        assert error["type"] == "PermissionError", (path, error)
    listing = _error(sandbox.run("import os\nresult = os.listdir('/root')"))
    assert listing["type"] == "PermissionError"
    # The dataset itself is readable, by its file name, as pandas reads it.
    outcome = sandbox.run("result = pd.read_csv('employees.csv').salary.sum()", dataset=employees)
    assert outcome.ok and outcome.result["rows"] == [[240]]
    still_serving(sandbox, pid)


def test_fork_bomb_and_new_processes_are_blocked(sandbox):
    pid = sandbox.pid
    for code in (
        "import os\nwhile True:\n    os.fork()",
        "import subprocess\nsubprocess.run(['id'])",
        "import os\nos.posix_spawn('/bin/true', ['true'], {})",
        "import multiprocessing\np = multiprocessing.Process(target=print)\np.start()",
        "import os\nos.execv('/bin/sh', ['sh', '-c', 'id'])",
    ):
        error = _error(sandbox.run(code))
        assert error["type"] in ("PermissionError", "OSError") or error["category"] == "exception", (code, error)
    # os.system reports failure through its return value: the C library could not start the
    # shell, which it reports as exit status 127.
    outcome = sandbox.run("import os\nresult = os.system('id')")
    assert outcome.ok and outcome.result["rows"] == [[127 << 8]]
    still_serving(sandbox, pid)


def test_thread_bomb_is_bounded(sandbox):
    pid = sandbox.pid
    code = "import threading, time\nwhile True:\n    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()"
    error = _error(sandbox.run(code))
    assert error["type"] in ("RuntimeError", "MemoryError") or error["category"] in ("timeout", "cpu_limit"), error
    still_serving(sandbox, pid)


def test_memory_bomb_is_stopped(sandbox):
    pid = sandbox.pid
    for code in (
        "x = bytearray(8 * 1024 ** 3)",
        "chunks = []\nwhile True:\n    chunks.append(bytearray(10 ** 7))",
        "result = np.ones(10 ** 10)",
    ):
        started = time.monotonic()
        error = _error(sandbox.run(code))
        assert error["type"] == "MemoryError" or error["category"] in ("crashed", "cpu_limit"), error
        assert time.monotonic() - started < TIGHT.wall_seconds + 10  # slack for a loaded machine; unstopped: never
    still_serving(sandbox, pid)


def test_infinite_loop_is_stopped(sandbox):
    pid = sandbox.pid
    started = time.monotonic()
    error = _error(sandbox.run("while True:\n    pass"))
    assert error["category"] in ("cpu_limit", "timeout"), error
    assert time.monotonic() - started < TIGHT.wall_seconds + 10  # slack for a loaded machine; unstopped: never
    still_serving(sandbox, pid)


def test_sleep_past_the_timeout_is_killed(sandbox):
    pid = sandbox.pid
    started = time.monotonic()
    error = _error(sandbox.run("import time\ntime.sleep(60)\nresult = 1"))
    elapsed = time.monotonic() - started
    assert error["category"] == "timeout", error
    assert TIGHT.wall_seconds <= elapsed < TIGHT.wall_seconds + 10  # slack for a loaded machine; unkilled: 60 s
    # A tighter per-run timeout is honoured; a looser one is clamped to the executor's.
    started = time.monotonic()
    assert _error(sandbox.run("import time\ntime.sleep(60)", limits={"wall_seconds": 0.5}))["category"] == "timeout"
    assert time.monotonic() - started < TIGHT.wall_seconds  # clamped to the executor's 3 s, it would take longer
    still_serving(sandbox, pid)


def test_signalling_the_parent_is_blocked(sandbox):
    pid = sandbox.pid
    for code in (
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)",
        "import os, signal\nos.kill(-1, signal.SIGKILL)",
        "import os, signal\nos.killpg(os.getpgid(os.getppid()), signal.SIGKILL)",
        f"import os, signal\nos.kill({os.getpid()}, signal.SIGTERM)",
        "import os, signal\nos.kill(1, signal.SIGTERM)",
    ):
        error = _error(sandbox.run(code))
        assert error["category"] == "exception", (code, error)
    assert sandbox.pid == pid
    os.kill(pid, 0)  # still alive
    # Signalling itself is allowed, and reported as the run's death.
    crashed = _error(sandbox.run("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"))
    assert crashed["category"] == "crashed" and "SIGKILL" in crashed["message"]
    still_serving(sandbox, pid)


def test_huge_output_is_refused(sandbox):
    pid = sandbox.pid
    for code in (
        "result = 'x' * (50 * 1024 ** 2)",
        "result = pd.DataFrame({'a': range(10 ** 6)})",
        "result = pd.DataFrame({'a': ['y' * 1000] * 20_000})",
    ):
        error = _error(sandbox.run(code))
        assert error["category"] == "output_limit", (code, error)
    flood = _error(sandbox.run("while True:\n    print('x' * 1000)"))
    assert flood["type"] == "OutputLimitExceeded"
    # Writing straight to the result pipe cannot smuggle a result in either.
    forged = sandbox.run("import os\nos.write(3, b'\\xff\\xff\\xff\\xff' + b'x' * 100)\nresult = 1")
    assert not forged.ok and forged.error["category"] in ("output_limit", "protocol")
    still_serving(sandbox, pid)


def test_exiting_early_is_an_error_not_a_result(sandbox):
    pid = sandbox.pid
    assert _error(sandbox.run("import os\nos._exit(0)"))["category"] == "crashed"
    assert _error(sandbox.run("import sys\nsys.exit(0)"))["type"] == "SystemExit"
    assert _error(sandbox.run("x = 1"))["category"] == "no_result"
    still_serving(sandbox, pid)


def test_generated_code_does_not_run_in_the_caller(sandbox, tmp_path):
    marker = tmp_path / "marker"
    outcome = sandbox.run("import os\nresult = os.getpid()")
    assert outcome.ok and outcome.result["rows"][0][0] not in (os.getpid(), sandbox.pid)
    assert not marker.exists()


def test_killing_the_executor_restarts_it_for_the_next_run(sandbox):
    old = sandbox.pid
    starts = sandbox.starts
    os.kill(old, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while sandbox._proc is not None and sandbox._proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    still_serving(sandbox)
    assert sandbox.pid != old and sandbox.starts == starts + 1
