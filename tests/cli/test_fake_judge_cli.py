"""``assay dev fake-judge`` as a newcomer runs it: it prints what to export, and both provider APIs
answer through the real SDKs with those values, on loopback, until Ctrl-C."""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time

import anthropic
import openai

from tests.conftest import REPO
from tests.dashboard.support import free_port


def start(*args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASSAY_", "ANTHROPIC_", "OPENAI_"))}
    return subprocess.Popen(
        [sys.executable, "-m", "assay.cli", "dev", "fake-judge", *args],
        env=env | {"PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def exports(proc: subprocess.Popen, count: int, timeout: float = 120) -> dict[str, str]:
    """The first ``count`` ``export NAME=VALUE`` lines the command prints, read as they come (by a
    thread: a blocking read must not outlive the deadline)."""
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    found: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    while len(found) < count:
        try:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"no exports within {timeout} s; exit status {proc.poll()}") from None
        name, _, value = line.strip().removeprefix("export ").partition("=")
        found[name] = value
    return found


def test_fake_judge_serves_both_provider_apis_until_ctrl_c():
    port = free_port()
    proc = start("--port", str(port))
    try:
        env = exports(proc, 4)
        assert env["ANTHROPIC_BASE_URL"] == f"http://127.0.0.1:{port}"
        assert env["OPENAI_BASE_URL"].startswith("http://127.0.0.1:") and env["OPENAI_BASE_URL"].endswith("/v1")
        client = anthropic.Anthropic(api_key=env["ANTHROPIC_API_KEY"], base_url=env["ANTHROPIC_BASE_URL"], max_retries=0)
        message = client.messages.create(model="claude-sonnet-5-5", max_tokens=64, messages=[{"role": "user", "content": "Grade this."}])
        assert message.content[0].text and message.usage.input_tokens > 0
        chat = openai.OpenAI(api_key=env["OPENAI_API_KEY"], base_url=env["OPENAI_BASE_URL"], max_retries=0)
        answer = chat.chat.completions.create(model="gpt-5-mini", messages=[{"role": "user", "content": "Grade this."}])
        assert answer.choices[0].message.content
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        assert "fake judge stopped" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_fake_judge_refuses_a_port_in_use_and_an_unknown_provider():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = start("--port", str(taken.getsockname()[1]), "--provider", "anthropic")
        _, err = busy.communicate(timeout=60)
        assert busy.returncode == 2 and "pass another --port" in " ".join(err.split())
    unknown = start("--provider", "gemini")
    _, err = unknown.communicate(timeout=60)
    assert unknown.returncode == 2 and "--provider must be one of anthropic, openai, both" in err
