"""Shared by the dashboard, report and metrics tests: in-process scoring of a batch, and the API as an
``assay api`` subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import API_KEY, REPO, wait_for, worker_env
from tests.dashboard.app_factory import make_app  # noqa: F401
from tests.ports import free_port


def site_origin(client: Any) -> str:
    """The Origin a browser sends with a form of the site ``client`` talks to."""
    return f"{client.base_url.scheme}://{client.base_url.netloc.decode()}"


def post_sign_in(client: Any, key: str = API_KEY, next_path: str = "/dashboard/") -> httpx.Response:
    """Post the dashboard's sign-in form as its own page does: with this site's Origin (assay.api.csrf)."""
    return client.post(
        "/dashboard/sign-in", data={"api_key": key, "next": next_path}, headers={"Origin": site_origin(client)}
    )


# --- scoring a batch in this process (no worker) --------------------------------------------------------


def judge_runtime(base_url: str) -> Any:
    from assay.scoring.judge.retry import RetryPolicy
    from assay.scoring.judge.providers.anthropic_messages import AnthropicProvider, make_client
    from assay.scoring.judge.providers.registry import ProviderRegistry
    from assay.scoring.judge.wiring import build_breaker, build_governor
    from assay.scoring.pipeline.scorer import JudgeRuntime
    from assay.scoring.suites.loader import load_model_catalog
    from assay.settings import get_settings

    settings = get_settings()
    catalog = load_model_catalog(settings.config_dir)
    providers = ProviderRegistry({"anthropic": AnthropicProvider("anthropic", make_client("test-key", base_url, timeout=30.0))})
    return JudgeRuntime(
        providers=providers,
        breaker=build_breaker(settings),
        governor=build_governor(settings, catalog, providers),
        catalog=catalog,
        policy=RetryPolicy(backoff_base_seconds=0.01),
    )


def score_in_process(batch_id: str | uuid.UUID, judge: Any = None) -> None:
    """Plan and score every component of a batch here, the way a worker would (judge skipped without
    a runtime)."""
    from assay.scoring.pipeline.planning import plan_chunk
    from assay.scoring.store.db import transaction

    batch_id = uuid.UUID(str(batch_id))
    refs = []
    while True:
        with transaction() as session:
            step = plan_chunk(session, batch_id, 500)
        refs += step.refs
        if step.finished:
            break
    score_refs(refs, judge)


def score_refs(refs: list[Any], judge: Any = None) -> None:
    """Compute and land components (``ComponentRef``s), the way a worker would."""
    from assay.scoring.pipeline.claims import claim as pipeline_claim
    from assay.scoring.pipeline.landing import land
    from assay.scoring.pipeline.scorer import compute, load_work
    from assay.scoring.store.db import transaction

    for ref in refs:
        with transaction() as session:
            claim = pipeline_claim(session, ref, "test-owner", 60)
        if claim.state != "claimed":
            continue
        with transaction() as session:
            work = load_work(session, ref)
        assert work is not None
        result = compute(work, judge)
        with transaction() as session:
            land(session, ref, result, claim=claim)


# --- the API as a subprocess ------------------------------------------------------------------------------


@contextmanager
def api_process(env: dict[str, str] | None = None, log: Path | None = None) -> Iterator[str]:
    """A real ``assay api`` process (the command an operator runs) on a free loopback port; yields its
    base URL."""
    port = free_port()
    handle = log.open("ab") if log else subprocess.DEVNULL
    proc = subprocess.Popen(
        [sys.executable, "-m", "assay.cli", "api", "--host", "127.0.0.1", "--port", str(port)],
        env=env or worker_env(),
        cwd=REPO,
        stdout=handle,
        stderr=subprocess.STDOUT if log else subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"the API exited early ({proc.returncode})" + (f":\n{log.read_text()[-3000:]}" if log else ""))
        try:
            return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(up, timeout=60, message="the API to start")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait(timeout=10)
        if log and hasattr(handle, "close"):
            handle.close()
