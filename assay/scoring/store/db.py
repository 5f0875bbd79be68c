"""Engine and sessions. Created lazily, per process: a forked worker builds its own after fork."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from assay.settings import REPO_ROOT, get_settings

log = logging.getLogger(__name__)

_lock = threading.Lock()
_engine: Engine | None = None
_engine_pid: int | None = None
_sessions: sessionmaker[Session] | None = None
# Connections this process may need at once (a threads worker: one per thread), beyond the settings.
_reserved_connections = 0


def reserve_connections(n: int) -> None:
    """Keep ``n`` connections in the pool: a threads worker whose threads outnumber the pool would have
    them queue for a connection (applies to engines made from now on)."""
    global _reserved_connections
    _reserved_connections = max(_reserved_connections, n)


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record):  # type: ignore[no-untyped-def]
            cur = dbapi_conn.cursor()
            # WAL lets readers (progress polling) run beside the writer; FKs are off by default in SQLite.
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        return engine
    settings = get_settings()
    # Kept open, not only allowed: a threads worker would otherwise close and reopen its overflow
    # connections all the time (a new backend per transaction at worst). LIFO: a quiet moment reuses
    # the few most recent connections rather than cycling through every one.
    pool_size = max(settings.db_pool_size, _reserved_connections)
    return create_engine(
        url, pool_pre_ping=True, pool_size=pool_size, max_overflow=settings.db_max_overflow, pool_use_lifo=True
    )


def get_engine() -> Engine:
    """The process's engine; a new one after fork, so no connection is shared across processes."""
    global _engine, _engine_pid, _sessions
    with _lock:
        if _engine is None or _engine_pid != os.getpid():
            if _engine is not None:
                _engine.dispose(close=False)
            _engine = make_engine(get_settings().database_url)
            _engine_pid = os.getpid()
            _sessions = sessionmaker(_engine, expire_on_commit=False)
        return _engine


def reset_engine() -> None:
    global _engine, _engine_pid, _sessions
    with _lock:
        if _engine is not None:
            _engine.dispose()
        _engine = _engine_pid = _sessions = None


def new_session() -> Session:
    get_engine()
    assert _sessions is not None
    return _sessions()


@contextmanager
def transaction() -> Iterator[Session]:
    """The unit of work at a boundary (request, task): commits on success, rolls back on error, then
    runs what was registered with ``after_commit`` (each in its own transaction, if it needs one), or
    hands it to the enclosing ``after_commits_gathered``."""
    session = new_session()
    try:
        with session.begin():
            yield session
        actions = session.info.pop(_AFTER_COMMIT, {})
    finally:
        session.close()
    gathered = _gathered.get()
    if gathered is not None:
        gathered.update(actions)
    else:
        _run_after_commit(actions)


_AFTER_COMMIT = "assay_after_commit"
_gathered: ContextVar[dict[Hashable, Callable[[], None]] | None] = ContextVar("assay_after_commits", default=None)


def after_commit(session: Session, key: Hashable, action: Callable[[], None]) -> None:
    """Run ``action`` once the session's transaction has committed (once per ``key``); never if it
    rolls back. A crash in between loses it: it must be something a later sweep also does."""
    session.info.setdefault(_AFTER_COMMIT, {})[key] = action


@contextmanager
def after_commits_gathered() -> Iterator[None]:
    """Hold the after-commit actions of every transaction inside until the block ends, then run each
    key's once: a task landing several components of one batch checks the batch once, not per commit."""
    gathered: dict[Hashable, Callable[[], None]] = {}
    token = _gathered.set(gathered)
    try:
        yield
    finally:
        _gathered.reset(token)
        _run_after_commit(gathered)


def _run_after_commit(actions: dict[Hashable, Callable[[], None]]) -> None:
    for key, action in actions.items():
        try:
            action()
        except Exception:  # the commit stands; what the action was for is left to the reconciler
            log.exception("after-commit action %s failed", key)


def dialect_insert(session: Session):  # type: ignore[no-untyped-def]
    """The dialect's INSERT construct (PostgreSQL's and SQLite's both offer ON CONFLICT)."""
    from sqlalchemy.dialects.postgresql import insert as pg_insert
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert


def alembic_config(url: str | None = None):  # type: ignore[no-untyped-def]
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(REPO_ROOT) / "migrations"))
    cfg.set_main_option("sqlalchemy.url", (url or get_settings().database_url).replace("%", "%%"))
    return cfg


def current_revision(url: str | None = None) -> str | None:
    """The store's Alembic revision; None for a store no migration has touched (empty)."""
    from alembic.runtime.migration import MigrationContext
    from sqlalchemy.pool import NullPool

    engine = create_engine(url or get_settings().database_url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()


def migrate(url: str | None = None, revision: str = "head") -> tuple[str | None, str | None]:
    """Upgrade the store to ``revision``; returns its revision before and after (None: empty)."""
    from alembic import command

    before = current_revision(url)
    command.upgrade(alembic_config(url), revision)
    return before, current_revision(url)
