"""Suites registered through the API (``POST /api/v1/suites``): stored in the store with every version.

Files and API suites share one namespace and files win: a name that is a file in ``config/suites/``
(or was registered from one) is refused here, and a file that appears later with an API suite's name
takes it over (``criteria.register_all_suites``; the API suite's versions are kept and reported as
shadowed). A body is parsed with ``origin="api"``: no ``prompt_file``/``rubric_file``, no ``${VAR}``,
no inline code, so nothing from the server's files, environment or code enters a stored criteria.

A new body under an API suite's name is a new version and its criteria hash becomes the suite's
current one: older scores become stale, and the nightly re-scoring picks them up as for a file
suite. So an API suite has an owner, the principal that created it (``key:NAME`` or ``proxy:NAME``):
only the owner or an operator (a key named in ``ASSAY_OPERATOR_KEYS``) posts versions of it,
disables, enables or deletes it; anyone else gets 403. A suite created before owners were kept has
none: only operators change it. A deleted suite keeps its owner, so its name stays theirs. A body that resolves to the latest version's criteria and settings adds no version (a retried
POST is harmless). Disabling and deleting refuse new work; deleting keeps the suite's row and
versions, so its scores stay readable and its history stays shown. Services flush; callers commit.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from assay.scoring.errors import Conflict, CriteriaError, Forbidden, NotFound
from assay.scoring.intake import strict_json
from assay.scoring.store.db import dialect_insert
from assay.scoring.store.models import SuiteRecord, SuiteVersion, utcnow
from assay.scoring.suites.criteria import (
    SUITE_NAME,
    SUITE_NAME_RULE,
    invalid_suites,
    register_criteria,
)
from assay.scoring.suites.loader import Suite, list_suite_names, parse_suite, read_api_suite
from assay.scoring.suites.validation import Problem, validate_suite

BodyFormat = Literal["yaml", "json"]
SOURCE = "request body"


@dataclass(frozen=True)
class Registered:
    record: SuiteRecord
    version: SuiteVersion
    created: bool  # False: the body matched the latest version (no new version)


# --- parsing a body ----------------------------------------------------------------------------------


def parse_body(body: bytes, body_format: BodyFormat, config_dir: Path) -> Suite:
    """The suite a request body describes, resolved as an API suite; CriteriaError says what is wrong."""
    suite = parse_suite(_body_text(body, body_format), config_dir=config_dir, env={}, source=SOURCE, origin="api")
    if not SUITE_NAME.fullmatch(suite.name):
        raise CriteriaError(f"{SOURCE}: name {suite.name!r}: {SUITE_NAME_RULE}")
    if not suite.options.enabled:
        raise CriteriaError(
            f"{SOURCE}: enabled: false: an API suite is disabled with POST /api/v1/suites/{suite.name}/disable"
        )
    # Read before JSON serialisation, which would turn a NaN into null (the hash over another suite).
    problem = _unstorable(suite.criteria.model_dump()) or _unstorable(suite.options.model_dump())
    if problem is not None:
        raise CriteriaError(f"{SOURCE}: {problem} cannot be stored; remove it")
    return suite


def _body_text(body: bytes, body_format: BodyFormat) -> str:
    """A request body as suite text (YAML; a JSON object as the same YAML)."""
    if body_format == "json":
        try:
            value = strict_json.loads(body)
        except strict_json.JsonRejected as exc:
            raise CriteriaError(f"{SOURCE}: not valid JSON: {exc.message}") from None
        if not isinstance(value, dict):
            raise CriteriaError(f"{SOURCE}: a suite is a JSON object (the same keys as a suite file)")
        # JSON text is YAML, and ASCII-escaped it reads back exactly: the one suite parser reads it.
        return json.dumps(value, ensure_ascii=True)
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CriteriaError(f"{SOURCE}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _unstorable(value: Any) -> str | None:
    """What in a resolved value the store cannot keep as sent (YAML has .nan, .inf and "\\0")."""
    if isinstance(value, str):
        return "a NUL character (\\u0000)" if "\x00" in value else None
    if isinstance(value, float):
        return None if math.isfinite(value) else "NaN or infinity"
    if isinstance(value, dict):
        parts = [*value.keys(), *value.values()]
    elif isinstance(value, list):
        parts = value
    else:
        return None
    return next((problem for problem in map(_unstorable, parts) if problem is not None), None)


def file_owner(session: Session, name: str, config_dir: Path) -> str | None:
    """Why ``name`` belongs to the suite files (files win), or None when it is free for the API."""
    if name in list_suite_names(config_dir):
        return f"suite {name!r} is a suite file (config/suites/{name}.yaml); files win: pick another name"
    record = session.get(SuiteRecord, name)
    if record is not None and record.origin != "api":
        return f"suite {name!r} was registered from a suite file ({record.origin}); files win: pick another name"
    return None


# --- who may change a suite ----------------------------------------------------------------------------


def change_refusal(record: SuiteRecord, by: str, *, operator: bool, doing: str) -> str | None:
    """Why the principal ``by`` may not ``doing`` (post a version of, disable, …) the API suite, or
    None when it is the owner or an operator."""
    if operator or (record.owner is not None and record.owner == by):
        return None
    if record.owner is None:
        return (
            f"suite {record.name!r} was registered before suites had owners: only an operator "
            f"(ASSAY_OPERATOR_KEYS) may {doing} it"
        )
    return f"suite {record.name!r} belongs to {record.owner}: only its owner or an operator (ASSAY_OPERATOR_KEYS) may {doing} it"


def _require_may_change(record: SuiteRecord, by: str, *, operator: bool, doing: str) -> None:
    refusal = change_refusal(record, by, operator=operator, doing=doing)
    if refusal is not None:
        raise Forbidden(refusal, owner=record.owner, you=by)


# --- registering ---------------------------------------------------------------------------------------


def register(
    session: Session, body: bytes, body_format: BodyFormat, *, by: str, operator: bool, config_dir: Path
) -> Registered:
    """Create an API suite owned by the principal ``by``, or add a version to one (see the module).
    422 for a bad body, 409 for a file suite's name or a version that changes the kind, 403 for a
    suite ``by`` does not own unless ``operator``."""
    suite = parse_body(body, body_format, config_dir)
    owner = file_owner(session, suite.name, config_dir)
    if owner is not None:
        raise Conflict(owner)
    register_criteria(session, suite.criteria)
    options = suite.options.model_dump(mode="json")
    now = utcnow()
    # Insert-or-nothing, then lock: two first POSTs of one name never both create it.
    session.execute(
        dialect_insert(session)(SuiteRecord)
        .values(
            name=suite.name,
            kind=suite.criteria.kind,
            current_criteria_hash=suite.criteria_hash,
            options=options,
            origin="api",
            state="active",
            created_by=by,
            owner=by,
            updated_at=now,
        )
        .on_conflict_do_nothing(index_elements=["name"])
    )
    record = session.get(SuiteRecord, suite.name, with_for_update=True, populate_existing=True)
    assert record is not None  # inserted above, or there already
    if record.origin != "api":  # a file registered it between the check and the insert
        raise Conflict(f"suite {suite.name!r} was registered from a suite file ({record.origin}); files win")
    _require_may_change(record, by, operator=operator, doing="post versions of")
    latest = _latest_version(session, suite.name)
    if latest is not None:
        if record.kind != suite.criteria.kind:
            raise Conflict(
                f"suite {suite.name!r} scores {record.kind} items; a version cannot change the kind to "
                f"{suite.criteria.kind} (register it under another name)"
            )
        same = latest.criteria_hash == suite.criteria_hash and latest.options == options
        if same and record.state != "deleted":
            return Registered(record, latest, created=False)
    version = SuiteVersion(
        suite_name=suite.name,
        version=(latest.version + 1) if latest is not None else 1,
        body=body.decode("utf-8"),
        body_format=body_format,
        criteria_hash=suite.criteria_hash,
        options=options,
        created_by=by,
        created_at=now,
    )
    session.add(version)
    record.current_criteria_hash = suite.criteria_hash
    record.options = options
    if record.state == "deleted":  # a deleted name registered again: the suite comes back, history kept
        record.state = "active"
    record.updated_at = now
    session.flush()
    return Registered(record, version, created=True)


def _latest_version(session: Session, name: str) -> SuiteVersion | None:
    return session.scalars(
        select(SuiteVersion).where(SuiteVersion.suite_name == name).order_by(SuiteVersion.version.desc()).limit(1)
    ).first()


STATE_CHANGES = {"active": "enable", "disabled": "disable", "deleted": "delete"}


def set_state(
    session: Session, name: str, state: Literal["active", "disabled", "deleted"], *, by: str, operator: bool
) -> SuiteRecord:
    """Enable, disable or delete an API suite (idempotent) as the principal ``by``: its owner or an
    operator (403 otherwise). A file suite is changed in its file."""
    record = session.get(SuiteRecord, name, with_for_update=True)
    if record is None or record.state == "deleted":
        raise NotFound(f"no suite named {name!r}" + (" (it was deleted)" if record is not None else ""))
    if record.origin != "api":
        raise Conflict(
            f"suite {name!r} is a suite file: enable, disable or remove it in config/suites/{name}.yaml "
            "(enabled: true/false)"
        )
    _require_may_change(record, by, operator=operator, doing=STATE_CHANGES[state])
    if record.state != state:
        record.state = state
        record.updated_at = utcnow()
        session.flush()
    return record


# --- reading -------------------------------------------------------------------------------------------


def _state(record: SuiteRecord) -> str:
    if record.name in invalid_suites and record.origin == "file":
        return "invalid"
    if record.state == "active" and not (record.options or {}).get("enabled", True):
        return "disabled"
    return record.state


def suite_view(record: SuiteRecord, version_count: int) -> dict[str, Any]:
    options = record.options or {}
    shadowed = record.origin != "api" and version_count > 0
    view: dict[str, Any] = {
        "name": record.name,
        "kind": record.kind,
        "origin": record.origin,
        "state": _state(record),
        "current_criteria_hash": record.current_criteria_hash,
        "description": options.get("description", ""),
        "created_by": record.created_by,
        "owner": record.owner,
        "updated_at": record.updated_at,
        "versions": version_count,
        "shadowed_api_suite": shadowed,
        "problem": invalid_suites.get(record.name) if record.origin == "file" else None,
    }
    if shadowed:
        view["note"] = (
            f"a suite file has this name and files win: the {version_count} version(s) registered through "
            "the API are kept but not used"
        )
    return view


def version_count(session: Session, name: str) -> int:
    return session.scalar(select(func.count()).where(SuiteVersion.suite_name == name)) or 0


def _version_counts(session: Session) -> dict[str, int]:
    rows = session.execute(select(SuiteVersion.suite_name, func.count()).group_by(SuiteVersion.suite_name))
    return {name: count for name, count in rows}


def list_suites(session: Session, *, include_deleted: bool = False) -> list[dict[str, Any]]:
    """Every registered suite, file and API, by name (deleted ones only when asked)."""
    query = select(SuiteRecord).order_by(SuiteRecord.name)
    if not include_deleted:
        query = query.where(SuiteRecord.state != "deleted")
    counts = _version_counts(session)
    return [suite_view(r, counts.get(r.name, 0)) for r in session.scalars(query)]


def show_suite(session: Session, name: str) -> dict[str, Any]:
    """One suite with its API versions, newest first (a deleted one too: its history stays shown)."""
    record = session.get(SuiteRecord, name)
    if record is None:
        raise NotFound(f"no suite named {name!r}")
    versions = session.scalars(
        select(SuiteVersion).where(SuiteVersion.suite_name == name).order_by(SuiteVersion.version.desc())
    ).all()
    view = suite_view(record, len(versions))
    view["version_list"] = [version_view(v, current=record) for v in versions]
    return view


def version_view(version: SuiteVersion, *, current: SuiteRecord, body: bool = False) -> dict[str, Any]:
    view: dict[str, Any] = {
        "version": version.version,
        "criteria_hash": version.criteria_hash,
        "body_format": version.body_format,
        "created_by": version.created_by,
        "created_at": version.created_at,
        "current": current.origin == "api" and current.current_criteria_hash == version.criteria_hash,
    }
    if body:
        view["body"] = version.body
    return view


def get_version(session: Session, name: str, number: int) -> dict[str, Any]:
    """One version with the body as it was sent."""
    version = session.get(SuiteVersion, (name, number))
    record = session.get(SuiteRecord, name)
    if version is None or record is None:
        raise NotFound(f"suite {name!r} has no version {number}")
    return version_view(version, current=record, body=True)


# --- validating ----------------------------------------------------------------------------------------


def validate(
    session: Session, body: bytes, body_format: BodyFormat, config_dir: Path, *, by: str, operator: bool
) -> dict[str, Any]:
    """What registering the body as the principal ``by`` would do, without storing anything: the
    resolved criteria and its hash, or every problem found, each with its component and field, as
    ``assay suite validate`` finds them (a file suite's name is one, another principal's API suite
    another)."""
    result = validate_suite(
        lambda: read_api_suite(_body_text(body, body_format), SOURCE),
        lambda: parse_body(body, body_format, config_dir),
        config_dir,
        files=None,  # an API suite reads no server file
        source=SOURCE,
    )
    problems = list(result.problems)
    suite = result.suite
    if suite is not None:
        owner = file_owner(session, suite.name, config_dir)
        if owner is not None:
            problems.append(Problem("name", f"{owner} (POST /api/v1/suites would answer 409)"))
        record = session.get(SuiteRecord, suite.name)
        if owner is None and record is not None:
            refusal = change_refusal(record, by, operator=operator, doing="post versions of")
            if refusal is not None:
                problems.append(Problem("name", f"{refusal} (POST /api/v1/suites would answer 403)"))
    return {
        "valid": not problems,
        "name": suite.name if suite else None,
        "criteria_hash": suite.criteria_hash if suite else None,
        "criteria": json.loads(suite.criteria.canonical_json()) if suite else None,  # exactly what the hash is taken over
        "options": suite.options.model_dump(mode="json") if suite else None,
        "problems": [str(p) for p in problems],
    }
