"""Starting the services: ``migrate``, ``api``, ``worker``, ``beat``, ``flower``."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from assay.cli.common import EXIT_API, console, fail


def _wait_for_database(role: str, *, migrated: bool = True, interval: float = 2.0, timeout: float | None = None) -> None:
    """Block until the store accepts connections (and, with ``migrated``, is at the migrations' head).

    A service started before Postgres is ready or before `assay migrate` ran (not every compose
    implementation honours depends_on conditions) waits here with a log line instead of crashing on a
    refused connection or a missing table. SQLite (embedded mode) has nothing to wait for.
    """
    from sqlalchemy import create_engine
    from sqlalchemy.exc import SQLAlchemyError
    from sqlalchemy.pool import NullPool

    from assay.settings import get_settings

    url = get_settings().database_url
    if not url.startswith("postgresql"):
        return
    heads: set[str] = set()
    if migrated:
        from alembic.script import ScriptDirectory

        from assay.scoring.store.db import alembic_config

        heads = set(ScriptDirectory.from_config(alembic_config(url)).get_heads())
    engine = create_engine(url, poolclass=NullPool, connect_args={"connect_timeout": 5})
    started = time.monotonic()
    last_said = ("", 0.0)
    try:
        while True:
            try:
                with engine.connect() as conn:
                    if not migrated:
                        return
                    from alembic.runtime.migration import MigrationContext

                    current = set(MigrationContext.configure(conn).get_current_heads())
                if current == heads:
                    if last_said[0]:
                        console.print(f"{role}: the database is ready and migrated")
                    return
                reason = f"not migrated yet (at {', '.join(sorted(current)) or 'no revision'}, want {', '.join(sorted(heads))}; run `assay migrate`)"
            except SQLAlchemyError as exc:
                first = str(getattr(exc, "orig", None) or exc).strip().splitlines()
                reason = f"not reachable ({first[0] if first else type(exc).__name__})"
            waited = time.monotonic() - started
            if timeout is not None and waited >= timeout:
                fail(f"{role}: gave up waiting for the database after {waited:.0f}s: {reason}", EXIT_API)
            # Say it when the reason changes, and every 30 s while it does not.
            if reason != last_said[0] or time.monotonic() - last_said[1] >= 30:
                console.print(f"{role}: waiting for the database: {reason}; retrying every {interval:g}s")
                last_said = (reason, time.monotonic())
            time.sleep(interval)
    finally:
        engine.dispose()


def migrate() -> None:
    """Apply the database migrations (ASSAY_DATABASE_URL)."""
    from assay.scoring.store.db import migrate as apply

    _wait_for_database("migrate", migrated=False)
    before, after = apply()
    console.print(migration_outcome(before, after))


def migration_outcome(before: str | None, after: str | None) -> str:
    """What `assay migrate` did, in words (None: an empty store)."""
    if before == after:
        return f"already at the latest revision {after}: nothing to do"
    if before is None:
        return f"created the schema at revision {after} (from empty)"
    return f"upgraded the schema from revision {before} to {after}"


def api(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option()] = 8000,
    workers: Annotated[int, typer.Option(min=1)] = 1,
) -> None:
    """Serve the API (uvicorn, its proxy headers off: the API judges the socket peer itself, trusting
    X-Forwarded-* only from ASSAY_TRUSTED_PROXIES)."""
    import uvicorn
    from pydantic import ValidationError

    from assay.settings import get_settings

    try:
        settings = get_settings()
    except ValidationError as exc:
        problems = "; ".join(f"ASSAY_{'_'.join(map(str, e['loc'])).upper()}: {e['msg']}" for e in exc.errors())
        fail(f"the settings are not valid: {problems}")
    _wait_for_database("api")
    if not settings.api_keys and not settings.trusted_proxies:
        console.print("[yellow]warning:[/yellow] no ASSAY_API_KEYS and no ASSAY_TRUSTED_PROXIES: every request will get 401")
    elif not settings.api_keys and not (settings.session_secret and settings.session_secret.get_secret_value()):
        console.print(
            "[yellow]warning:[/yellow] no ASSAY_SESSION_SECRET (nor ASSAY_API_KEYS to derive one): the proxy's "
            "users get no CSRF token, and their changes are taken only with a same-origin Origin header"
        )
    # proxy_headers=False: uvicorn would otherwise rewrite the client address from X-Forwarded-For for
    # loopback connections, and a local process could then pass for a trusted proxy.
    uvicorn.run(
        "assay.api.app:create_app", factory=True, host=host, port=port, workers=workers, proxy_headers=False
    )


def worker(
    queues: Annotated[
        str,
        typer.Option(
            help="Comma-separated: metrics, judge, control. A metrics or judge worker also consumes online-metrics "
            "or online-judge (online scores), ahead of the batch queue."
        ),
    ] = "metrics,judge,control",
    pool: Annotated[Optional[str], typer.Option(help="prefork or threads (default: threads when judge is the only queue)")] = None,
    concurrency: Annotated[
        Optional[int],
        typer.Option(
            min=1,
            help="Task threads or processes. Default: for a threads pool ceil(ASSAY_JUDGE_CONCURRENCY / "
            "ASSAY_JUDGE_GROUP_SIZE) + 1 (their judge calls, at most ASSAY_JUDGE_CONCURRENCY in flight, run on the "
            "process's one judge event loop); else the CPU count.",
        ),
    ] = None,
    loglevel: Annotated[str, typer.Option()] = "INFO",
    name: Annotated[
        Optional[str],
        typer.Option(
            help="Celery node name (NAME@HOST; %h is the host name). Default: the queues and this process's "
            "id, e.g. judge-4242@%h, so workers started side by side on one host are told apart (in Flower too).",
        ),
    ] = None,
    metrics_port: Annotated[
        Optional[int],
        typer.Option(
            envvar="ASSAY_WORKER_METRICS_PORT",
            min=1,
            max=65535,
            help="Serve this worker's Prometheus /metrics on this port (its pool processes added up), for a "
            "worker whose host or container shares no PROMETHEUS_MULTIPROC_DIR with the API.",
        ),
    ] = None,
) -> None:
    """Start a Celery worker on the given queues (task events on, for Flower)."""
    from assay.settings import get_settings, judge_task_threads

    _wait_for_database("worker")

    if metrics_port is not None:
        # Multiprocess mode must be on before prometheus_client is first imported: the pool's
        # processes count into files there, which the exporter in this process adds up.
        if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            import tempfile

            os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="assay-metrics-")
        from assay.observability import start_worker_exporter

        start_worker_exporter(metrics_port)
        console.print(f"worker metrics on http://0.0.0.0:{metrics_port}/metrics")

    names = [q.strip() for q in queues.split(",") if q.strip()]
    unknown = set(names) - {"metrics", "judge", "control", "online-metrics", "online-judge"}
    if unknown:
        fail(f"unknown queue(s): {', '.join(sorted(unknown))}")
    from assay.workers.app import app, consumed_queues

    chosen_pool = pool or ("threads" if names == ["judge"] else "prefork")
    settings = get_settings()
    judge_threads = judge_task_threads(settings.judge_concurrency, settings.judge_group_size)
    threads = concurrency or (judge_threads if chosen_pool == "threads" else os.cpu_count() or 2)

    # Two workers with one node name (Celery's default is celery@HOST) are one worker to Flower and to
    # inspect/ping: Flower would list one of them and only its queues.
    node_name = name or f"{'-'.join(names)}-{os.getpid()}@%h"
    app.worker_main(
        ["worker", "-Q", ",".join(consumed_queues(names)), "-P", chosen_pool, "-c", str(threads), "-E", "-l", loglevel, "-n", node_name]
    )


def beat(loglevel: Annotated[str, typer.Option()] = "INFO") -> None:
    """Start Celery beat (the reconciler's schedule)."""
    _wait_for_database("beat")
    from assay.workers.app import app

    Path(".assay").mkdir(exist_ok=True)
    app.start(["beat", "-l", loglevel, "--schedule", os.environ.get("ASSAY_BEAT_SCHEDULE_FILE", ".assay/celerybeat-schedule")])


def flower(
    port: Annotated[Optional[int], typer.Option(help="Default: ASSAY_FLOWER_PORT (5555).")] = None,
    address: Annotated[
        Optional[str], typer.Option(help="Interface to listen on. Default: ASSAY_FLOWER_ADDRESS (127.0.0.1).")
    ] = None,
) -> None:
    """Start Flower with basic auth from ASSAY_FLOWER_USER / ASSAY_FLOWER_PASSWORD on every page, its API
    and its /metrics (/healthcheck stays open: it says only OK)."""
    from assay.settings import get_settings

    settings = get_settings()
    if settings.flower_password is None:
        # Empty or blank counts as unset (assay.settings): the same refusal.
        fail(
            f"set ASSAY_FLOWER_PASSWORD (not empty or blank), the password of Flower's user {settings.flower_user!r} "
            "(ASSAY_FLOWER_USER): Flower is never started without basic auth"
        )
    from assay.workers.app import app
    from assay.workers.flower import require_login_for_metrics

    require_login_for_metrics()
    app.start(
        [
            "flower",
            f"--address={address if address is not None else settings.flower_address}",
            f"--port={port or settings.flower_port}",
            f"--basic-auth={settings.flower_user}:{settings.flower_password.get_secret_value()}",
        ]
    )
