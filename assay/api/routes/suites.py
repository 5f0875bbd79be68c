"""Suites: the file suites of ``config/suites/`` and the suites registered through the API.

A thin adapter over ``assay.scoring.suites.api_suites``."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from assay.api.auth import Principal, require_principal
from assay.api.body_limit import body_limit
from assay.api.content_type import require_content_type
from assay.api.errors import ProblemText
from assay.api.json_body import StrictJsonRoute, is_json
from assay.api.params import SuiteName
from assay.scoring.store.db import transaction
from assay.scoring.suites import api_suites as svc
from assay.scoring.suites import history
from assay.settings import get_settings

router = APIRouter(prefix="/api/v1/suites", tags=["suites"], route_class=StrictJsonRoute)

YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")
BODY_TYPES = (*YAML_TYPES, "application/json")

BODY_DOC = """The body is a suite exactly as a suite file in `config/suites/` would hold it: **YAML**
(`Content-Type: application/yaml`, `text/yaml`, `application/x-yaml` or `text/x-yaml`; a body without a
declared type is read as YAML) or the same suite as a **JSON object** (`application/json`, the same
keys). Its `name` is the suite's name (1-100 letters, digits, `_`, `-`). Any other declared type is
415; a body over `ASSAY_MAX_SUITE_BYTES` (1 MiB by default) is 413.

An API suite may not use `prompt_file` or `rubric_file` (there is no server file to read), `${VAR}`
substitution (no server environment enters a stored criteria), inline code, YAML aliases, or
`enabled: false` (use the disable route): each is a 422 naming it, as is any other problem of the
suite (unknown metric or kind, bad arguments, weights not adding up to 1, unknown judge model)."""

BODY_OPENAPI = {
    "requestBody": {
        "required": True,
        "content": {
            **{t: {"schema": {"type": "string"}} for t in YAML_TYPES},
            "application/json": {"schema": {"type": "object", "additionalProperties": True}},
        },
    }
}


class SuiteOut(BaseModel):
    name: str
    kind: str
    origin: str = Field(
        ...,
        description="file (config/suites/), api (registered through this API) or path (a suite file run by "
        "path with `assay run`, embedded mode only)",
    )
    state: str = Field(
        ...,
        description="active; disabled (enabled: false in its file, or disabled through the API: no new work); "
        "deleted (API suites: no new work, scores and versions kept); invalid (its file does not load now: "
        "see problem)",
    )
    current_criteria_hash: str = Field(..., description="The criteria hash new scores of this suite are stamped with")
    description: str
    created_by: str | None = Field(..., description="Who registered an API suite's first version (null for a file)")
    owner: str | None = Field(
        ...,
        description="The principal that owns an API suite (`key:NAME` or `proxy:NAME`): it, or an operator "
        "(ASSAY_OPERATOR_KEYS), may post versions, disable, enable or delete it. Null for a file suite, and for "
        "an API suite created before owners were kept (only operators change it)",
    )
    updated_at: datetime
    versions: int = Field(..., description="How many versions were registered through the API under this name")
    shadowed_api_suite: bool = Field(
        ..., description="True when a suite file took the name of an API suite: files win, its versions are unused"
    )
    problem: ProblemText | None = Field(..., description="Why the suite file does not load (state invalid)")
    note: str | None = None


class SuiteList(BaseModel):
    suites: list[SuiteOut]


class VersionOut(BaseModel):
    version: int = Field(..., description="1, 2, …: one per body that changed the criteria or settings")
    criteria_hash: str
    body_format: str = Field(..., description="yaml or json: how the body was sent")
    created_by: str
    created_at: datetime
    current: bool = Field(..., description="Whether this version's criteria are the suite's current ones")
    body: str | None = Field(None, description="The body as it was sent (only when one version is asked for)")


class SuiteDetail(SuiteOut):
    version_list: list[VersionOut] = Field(..., description="The API versions, newest first")


class Registered(BaseModel):
    suite: SuiteOut
    version: VersionOut
    created: bool = Field(
        ..., description="False when the body resolved to the latest version's criteria and settings: no new version"
    )


class ValidationOut(BaseModel):
    valid: bool
    name: str | None = Field(..., description="The suite's name (null when the body could not be read as a suite)")
    criteria_hash: str | None = Field(..., description="The hash its scores would carry")
    criteria: dict[str, Any] | None = Field(..., description="The resolved criteria: exactly what the hash is taken over")
    options: dict[str, Any] | None = Field(..., description="The operational settings (not hashed)")
    problems: list[ProblemText] = Field(
        ...,
        description="Every problem found, each `where: message` (the component and field, or `suite`); empty "
        "when the suite can be registered",
    )


async def _body(request: Request) -> tuple[bytes, svc.BodyFormat]:
    body_format: svc.BodyFormat = "json" if is_json(request.headers.get("content-type")) else "yaml"
    return await request.body(), body_format


@router.post(
    "",
    status_code=201,
    response_model=Registered,
    summary="Register a suite, or a new version of one",
    description=f"""Register a suite through the API: no file, no redeploy. {BODY_DOC}

Files and API suites share one namespace and files win: a name that is a suite file is a 409. A new
body under an API suite's name is its next version (201): its criteria hash becomes the suite's
current one, so scores under the old one become stale and the nightly re-scoring picks them up. A
body that resolves to the latest version's criteria and settings adds no version (200,
`created: false`). A version may not change the suite's kind (409). Registering a deleted suite's
name again brings it back as the next version. Every version keeps its body, creator and time.

The principal that creates an API suite owns it (`owner`): only the owner or an operator (a key named
in `ASSAY_OPERATOR_KEYS`) may post its versions; anyone else gets 403 naming the owner. A suite
created before owners were kept has none: only operators post its versions.""",
    openapi_extra=BODY_OPENAPI,
    dependencies=[Depends(require_content_type(*BODY_TYPES))],
    responses={
        200: {"description": "The body matched the latest version: nothing new", "model": Registered},
        403: {"description": "An API suite of another principal: only its owner or an operator posts versions"},
        409: {"description": "A suite file has this name (files win), or the version changes the kind"},
        413: {"description": "Body over ASSAY_MAX_SUITE_BYTES"},
        415: {"description": "A Content-Type other than YAML or JSON"},
        422: {"description": "The suite is not valid, or uses what an API suite may not (the reason is named)"},
    },
)
@body_limit("max_suite_bytes")
async def register_suite(
    request: Request, response: Response, principal: Annotated[Principal, Depends(require_principal)]
) -> Registered:
    body, body_format = await _body(request)

    def register() -> Registered:
        with transaction() as session:
            settings = get_settings()
            done = svc.register(
                session,
                body,
                body_format,
                by=principal.id,
                operator=principal.is_operator(settings),
                config_dir=settings.config_dir,
            )
            return Registered(
                suite=SuiteOut(**svc.suite_view(done.record, svc.version_count(session, done.record.name))),
                version=VersionOut(**svc.version_view(done.version, current=done.record)),
                created=done.created,
            )

    out = await run_in_threadpool(register)
    if not out.created:
        response.status_code = 200
    response.headers["Location"] = f"/api/v1/suites/{out.suite.name}"
    return out


@router.post(
    "/validate",
    response_model=ValidationOut,
    summary="Validate a suite without storing it",
    description=f"""Resolve a suite body as `POST /api/v1/suites` would and answer what it resolves to:
the criteria (exactly what the hash is taken over), the criteria hash, the operational settings, and
every problem found (a suite file's name is one). Always 200 for a body it could read; nothing is
stored.

Every problem is reported at once, as `assay suite validate` reports a suite file's (the same
checks): each a `where: message` text naming the component and field (`components.tone.judge: …`,
`components: the weights add up to 1.1, not 1 …`, `name: …`), in plain words. The parts of the suite
are resolved one by one (the settings, the judge section, each component, the judges' `{{{{...}}}}`
placeholders against the fields the suite's items have, the weights), so a problem in one does not
hide the others; the criteria and hash are given once none is left. A use of what an API suite may not
(below) is reported alone: the body is not resolved further. {BODY_DOC}""",
    openapi_extra=BODY_OPENAPI,
    dependencies=[Depends(require_content_type(*BODY_TYPES))],
    responses={413: {"description": "Body over ASSAY_MAX_SUITE_BYTES"}, 415: {"description": "Not YAML or JSON"}},
)
@body_limit("max_suite_bytes")
async def validate_suite(
    request: Request, principal: Annotated[Principal, Depends(require_principal)]
) -> ValidationOut:
    body, body_format = await _body(request)

    def validate() -> ValidationOut:
        settings = get_settings()
        with transaction() as session:
            return ValidationOut(
                **svc.validate(
                    session,
                    body,
                    body_format,
                    settings.config_dir,
                    by=principal.id,
                    operator=principal.is_operator(settings),
                )
            )

    return await run_in_threadpool(validate)


@router.get("", response_model=SuiteList, summary="List the suites, file and API")
def list_suites(
    _: Annotated[Principal, Depends(require_principal)],
    deleted: Annotated[bool, Query(description="Also list deleted API suites.")] = False,
) -> SuiteList:
    with transaction() as session:
        return SuiteList(suites=[SuiteOut(**v) for v in svc.list_suites(session, include_deleted=deleted)])


@router.get(
    "/{name}",
    response_model=SuiteDetail,
    summary="One suite with its API versions",
    description="A suite (file or API, deleted ones too) with every version registered through the API, "
    "newest first: number, criteria hash, creator, time, and which one is current.",
)
def show_suite(name: SuiteName, _: Annotated[Principal, Depends(require_principal)]) -> SuiteDetail:
    with transaction() as session:
        return SuiteDetail(**svc.show_suite(session, name))


@router.get("/{name}/versions/{version}", response_model=VersionOut, summary="One API version, with its body as sent")
def show_version(
    name: SuiteName,
    version: Annotated[int, Path(ge=1, le=2_147_483_647)],
    _: Annotated[Principal, Depends(require_principal)],
) -> VersionOut:
    with transaction() as session:
        return VersionOut(**svc.get_version(session, name, version))


class CriteriaVersionOut(BaseModel):
    version: int = Field(..., description="1, 2, …: oldest first")
    criteria_hash: str
    since: datetime | None = Field(..., description="When it was registered (API suites) or first scored (file suites)")
    batches: int = Field(..., description="Batches scored under this criteria hash")
    current: bool = Field(..., description="Whether new scores of the suite are stamped with it")


class CriteriaVersionsOut(BaseModel):
    name: str
    kind: str
    origin: str
    current_criteria_hash: str
    numbered: str = Field(..., description="How the versions are numbered (API versions, or hashes by first use)")
    versions: list[CriteriaVersionOut]


class CriteriaVersionDetail(CriteriaVersionOut):
    name: str
    criteria: dict[str, Any] = Field(..., description="The resolved criteria: exactly what the hash is taken over")


CRITERIA_VERSIONS_DOC = """A suite's criteria versions, oldest first. An API suite's are the versions
registered through the API; a file suite (or one run by path) has none of those, so its versions are
the criteria hashes its batches were scored under, numbered by first use, then its current hash when no
batch used it yet. `GET .../criteria/{version}` gives one with its resolved criteria; two versions are
compared with `assay diff --suite S --versions A B` (`GET /api/v1/criteria/diff`)."""


@router.get(
    "/{name}/criteria",
    response_model=CriteriaVersionsOut,
    summary="A suite's criteria versions and their hashes",
    description=CRITERIA_VERSIONS_DOC,
)
def criteria_versions(name: SuiteName, _: Annotated[Principal, Depends(require_principal)]) -> CriteriaVersionsOut:
    with transaction() as session:
        return CriteriaVersionsOut(**history.criteria_versions(session, name))


@router.get(
    "/{name}/criteria/{version}",
    response_model=CriteriaVersionDetail,
    summary="One criteria version of a suite, with its resolved criteria",
    description=CRITERIA_VERSIONS_DOC,
)
def criteria_version(
    name: SuiteName,
    version: Annotated[int, Path(ge=1, le=2_147_483_647)],
    _: Annotated[Principal, Depends(require_principal)],
) -> CriteriaVersionDetail:
    with transaction() as session:
        return CriteriaVersionDetail(**history.criteria_version(session, name, version))


def _set_state(name: str, state: Any, principal: Principal) -> SuiteOut:
    operator = principal.is_operator(get_settings())
    with transaction() as session:
        record = svc.set_state(session, name, state, by=principal.id, operator=operator)
        return SuiteOut(**svc.suite_view(record, svc.version_count(session, name)))


STATE_DOC = (
    "API suites only (a file suite is changed in its file: 409), by the suite's owner or an operator "
    "(ASSAY_OPERATOR_KEYS; 403 for anyone else). Work already queued finishes."
)
STATE_RESPONSES: dict[int | str, dict[str, Any]] = {
    403: {"description": "Not the suite's owner, nor an operator"},
    404: {"description": "No such suite (or it was deleted)"},
    409: {"description": "A file suite"},
}


@router.post(
    "/{name}/disable",
    response_model=SuiteOut,
    summary="Disable an API suite: it takes no new work (409) until enabled",
    description=STATE_DOC,
    responses=STATE_RESPONSES,
)
def disable_suite(name: SuiteName, principal: Annotated[Principal, Depends(require_principal)]) -> SuiteOut:
    return _set_state(name, "disabled", principal)


@router.post(
    "/{name}/enable",
    response_model=SuiteOut,
    summary="Enable a disabled API suite",
    description=STATE_DOC,
    responses=STATE_RESPONSES,
)
def enable_suite(name: SuiteName, principal: Annotated[Principal, Depends(require_principal)]) -> SuiteOut:
    return _set_state(name, "active", principal)


@router.delete(
    "/{name}",
    response_model=SuiteOut,
    summary="Delete an API suite: no new work; its scores and versions stay readable",
    description=f"{STATE_DOC} The name stays taken by the deleted suite: registering it again brings the "
    "suite back as its next version (by its owner or an operator). Deleted suites are listed with `deleted=true`.",
    responses=STATE_RESPONSES,
)
def delete_suite(name: SuiteName, principal: Annotated[Principal, Depends(require_principal)]) -> SuiteOut:
    return _set_state(name, "deleted", principal)
