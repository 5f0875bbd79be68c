"""Criteria definitions in the store: registered idempotently, read back by hash."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from assay.scoring.errors import Conflict, CriteriaError, NotFound
from assay.scoring.hashcache import HashCache
from assay.scoring.store.db import dialect_insert
from assay.scoring.store.models import CriteriaDefinition, SuiteRecord, utcnow
from assay.scoring.suites.loader import (
    Criteria,
    Suite,
    list_suite_names,
    load_suite,
    parse_suite,
)

log = logging.getLogger(__name__)

# What a suite registered through the API or run by path may be called (it is the suites table's key).
SUITE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")
SUITE_NAME_RULE = "a suite name is 1-100 letters, digits, '_' or '-', starting with a letter or digit"


def register_criteria(session: Session, criteria: Criteria) -> str:
    """Store a criteria definition once per hash (idempotent); returns the hash."""
    criteria_hash = criteria.criteria_hash
    session.execute(
        dialect_insert(session)(CriteriaDefinition)
        .values(criteria_hash=criteria_hash, criteria_content=criteria.model_dump(mode="json"), created_at=utcnow())
        .on_conflict_do_nothing(index_elements=["criteria_hash"])
    )
    return criteria_hash


def register_suite(session: Session, suite: Suite, *, origin: str = "file", created_by: str | None = None) -> str:
    """Store the suite's criteria (once per hash) and make its hash the suite's current one, active.

    ``origin`` is where the suite came from: ``file`` (config/suites/), ``api`` (see
    ``assay.scoring.suites.api_suites``, which keeps the versions) or ``path`` (a suite file run by path)."""
    register_criteria(session, suite.criteria)
    insert = dialect_insert(session)
    values = dict(
        name=suite.name,
        kind=suite.criteria.kind,
        current_criteria_hash=suite.criteria_hash,
        options=suite.options.model_dump(mode="json"),
        origin=origin,
        state="active",
        created_by=created_by,
        updated_at=utcnow(),
    )
    session.execute(
        insert(SuiteRecord)
        .values(**values)
        .on_conflict_do_update(index_elements=["name"], set_={k: v for k, v in values.items() if k != "name"})
    )
    return suite.criteria_hash


# Suite files that failed to load in this process, with why: one bad file must not stop the others
# (nor the API, nor the reconciler), and a request for it gets the reason rather than "no such suite".
invalid_suites: dict[str, str] = {}


def register_all_suites(session: Session, config_dir: Path) -> dict[str, str]:
    """Load every suite file and register its current hash. Returns name -> hash of the valid ones;
    an invalid file is logged and remembered in ``invalid_suites``.

    Suites registered through the API are never touched, except that files win: a file with an API
    suite's name takes the name over (logged; the API suite's versions are kept, shadowed)."""
    hashes = {}
    origins = {name: origin for name, origin in session.execute(select(SuiteRecord.name, SuiteRecord.origin))}
    for name in list_suite_names(config_dir):
        try:
            suite = load_suite(config_dir, name)
        except CriteriaError as exc:
            log.error("suite %s is invalid and was not registered: %s", name, exc.message)
            invalid_suites[name] = exc.message
            continue
        invalid_suites.pop(name, None)
        if origins.get(name) == "api":
            log.warning(
                "suite file %s.yaml takes the name of the suite registered through the API: files win; "
                "the API suite's versions are kept but no longer used",
                name,
            )
        hashes[name] = register_suite(session, suite)
    return hashes


def load_suite_file(path: Path, config_dir: Path) -> Suite:
    """A suite file given by path. One that is not installed: files it names resolve beside it,
    ``${VAR}`` from the environment, the judge model through ``config_dir``'s catalog. One of
    ``config_dir/suites/`` is read as installed (its files resolve inside ``config_dir``)."""
    if _installed(path, config_dir):
        return load_suite(config_dir, path.stem)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CriteriaError(f"cannot read suite file {path}: {exc}") from None
    suite = parse_suite(
        text, config_dir=config_dir, env=os.environ, source=str(path), origin="path", files_dir=path.resolve().parent
    )
    if not SUITE_NAME.fullmatch(suite.name):
        raise CriteriaError(f"{path}: name {suite.name!r}: {SUITE_NAME_RULE}")
    return suite


def _installed(path: Path, config_dir: Path) -> bool:
    return path.suffix == ".yaml" and path.resolve().parent == (config_dir / "suites").resolve()


def register_suite_file(session: Session, path: Path, config_dir: Path) -> str:
    """Register a suite file given by path (``assay run --suite path/to/suite.yaml``, embedded mode)
    after the installed ones, so for this run it is the suite of its name; returns that name."""
    suite = load_suite_file(path, config_dir)
    installed = _installed(path, config_dir)
    if not installed and suite.name in list_suite_names(config_dir):
        log.warning("suite file %s has the name of an installed suite (%s): this run uses %s", path, suite.name, path)
    register_suite(session, suite, origin="file" if installed else "path")
    return suite.name


def current_suite(session: Session, name: str) -> SuiteRecord:
    """The suite's registered record; new work is refused while it is disabled (``enabled: false`` in
    its file, or through the API) and after it was deleted."""
    if name in invalid_suites:
        raise CriteriaError(f"suite {name!r} cannot be used: {invalid_suites[name]}")
    record = session.get(SuiteRecord, name)
    if record is None or record.state == "deleted":
        known = session.scalars(
            select(SuiteRecord.name).where(SuiteRecord.state != "deleted").order_by(SuiteRecord.name)
        ).all()
        gone = " was deleted (its scores stay readable)" if record is not None else ""
        raise NotFound(f"no suite named {name!r}{gone}; available: {', '.join(known) or 'none'}")
    if record.state == "disabled":
        raise Conflict(
            f"suite {name!r} is disabled (through the API); it takes no new work until "
            f"POST /api/v1/suites/{name}/enable"
        )
    if not record.options.get("enabled", True):
        raise Conflict(f"suite {name!r} is disabled (enabled: false in its file); it takes no new work")
    return record


_criteria_cache: HashCache[Criteria] = HashCache(max_entries=256)


def load_criteria(session: Session, criteria_hash: str) -> Criteria:
    """Criteria by hash, from the store (never from local YAML), cached per process."""

    def load() -> Criteria:
        row = session.get(CriteriaDefinition, criteria_hash)
        if row is None:
            raise NotFound(f"no criteria with hash {criteria_hash}")
        return Criteria.model_validate(row.criteria_content)

    return _criteria_cache.get(criteria_hash, load)
