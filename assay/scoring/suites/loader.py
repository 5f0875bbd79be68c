"""Suites: YAML files in ``config/suites/`` resolved into hashed *criteria*.

Criteria are what decides a score: prompt text, verdict schema, weights, metric arguments and
versions (and a plug-in metric's distribution and version), judge models, max tokens, field mapping,
threshold, and a judge's provider and the request parameters its model takes (``temperature``,
``seed``, ``reasoning_effort``, ``max_completion_tokens``; the Anthropic API version of the installed
SDK takes none of them).
Operational settings (enabled flags, timeouts, concurrency, keys, URLs, provider limits) live beside
them or in ``config/models.yaml`` but stay out of the hash.

Optional criteria fields added after a suite's hash was first taken (``fields``, a component's
``plugin`` and ``min_score``, a judge's request parameters) are left out of the canonical JSON while unset, so older criteria dump,
and hash, byte for byte as they always did (tests/scoring/test_criteria_pins.py).

A suite has judge components of two forms, any mix of them with metrics:

- ``judge: true`` (at most one): judged with the suite-level ``judge`` section and a verdict a kind
  registered by name (``judge.verdicts``);
- a rubric judge, ``judge: {rubric, verdict, prompt?, model?, ...}``: its own judge call with the
  verdict type written in the suite (``judge.rubrics``).
- a jury, a rubric judge naming ``judges:`` (``suites.jury``): one judge call per member, each a row of
  the score (``component@member``), aggregated into the component once they have landed.

``Criteria.judge_for(component)`` gives either form as one ``ResolvedJudge``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from assay.scoring.errors import CriteriaError, NotFound
from assay.scoring.judge.rubrics import (
    DEFAULT_ITEM_TEMPLATE,
    VerdictSpec,
    compose_template,
    rubric_verdict,
)
from assay.scoring.judge.verdicts import VerdictType, verdict_type
from assay.scoring.kinds import get_kind, known_kinds
from assay.scoring.metrics.catalog import check_component_metric
from assay.scoring.metrics.registry import PluginRef
from assay.scoring.suites.catalog import ModelCatalog, load_model_catalog
from assay.scoring.suites.envsubst import substitute_tree
from assay.scoring.suites.jury import (
    SEPARATOR,
    JuryJudge,
    JuryMember,
    member_row,
    resolve_jury,
)
from assay.scoring.suites.online_rules import OnlineRules
from assay.scoring.suites.pairwise import check_section as check_pairwise
from assay.scoring.suites.providers import (
    JUDGE_PARAMETERS,
    REFUSED_PARAMETERS,
    JudgeParameters,
    ReasoningEffort,
    check_completion_limit,
    without_none,
)
from assay.scoring.suites.yaml_reader import load_suite_yaml

CRITERIA_SCHEMA_VERSION = 1


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RubricJudge(JudgeParameters):
    """A judge component's own judge, resolved: everything its calls depend on (hashed)."""

    provider: str = "anthropic"
    model: str
    max_tokens: int = Field(..., gt=0, le=64_000)
    rubric: str = Field(..., min_length=1)
    prompt: str = Field(..., min_length=1)  # the per-item template actually used
    verdict: VerdictSpec
    template: str = Field(..., min_length=1)  # compose_template(rubric, prompt, verdict)
    verdict_schema: dict[str, Any]


class ComponentSpec(_Strict):
    """One component: a registered metric, the suite-level judge (``judge: true``) or a rubric judge."""

    weight: float = Field(..., gt=0, le=1)
    metric: str | None = None
    version: int | None = None
    args: dict[str, Any] = Field(default_factory=dict)
    judge: bool | RubricJudge | JuryJudge = False
    # The installed distribution a plug-in metric comes from (set when the suite is resolved).
    plugin: PluginRef | None = None
    # A pass blocker: an item whose score of this component is below it cannot pass.
    min_score: float | None = Field(None, ge=0, le=1)

    @model_validator(mode="after")
    def _metric_or_judge(self) -> ComponentSpec:
        if self.is_judge == (self.metric is not None):
            raise ValueError("a component names either a metric (with its version) or a judge")
        if self.metric is not None and self.version is None:
            raise ValueError(f"metric {self.metric!r} needs a version")
        if self.is_judge and (self.version is not None or self.args or self.plugin is not None):
            raise ValueError("a judge component takes no version, args or plugin")
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
        return without_none(handler(self), ("plugin", "min_score"))

    @property
    def is_judge(self) -> bool:
        return self.judge is not False

    @property
    def jury(self) -> JuryJudge | None:
        return self.judge if isinstance(self.judge, JuryJudge) else None


@dataclass(frozen=True)
class ResolvedJudge:
    """What one judge component's call needs, for either form of judge component."""

    component: str
    provider: str
    model: str
    max_tokens: int
    template: str  # what render_prompt fills
    verdict: VerdictType
    parameters: dict[str, Any] = field(default_factory=dict)  # temperature, seed, reasoning_effort, as set


class JudgeCriteria(JudgeParameters):
    """The suite-level judge section, judging the ``judge: true`` component."""

    provider: str = "anthropic"
    model: str
    max_tokens: int = Field(..., gt=0, le=64_000)
    prompt: str = Field(..., min_length=1)
    verdict: str
    verdict_schema: dict[str, Any]


class Criteria(_Strict):
    """The hashed part of a suite. Workers rebuild scoring from this alone."""

    schema_version: int = CRITERIA_SCHEMA_VERSION
    kind: str
    threshold: float = Field(..., ge=0, le=1)
    components: dict[str, ComponentSpec]
    judge: JudgeCriteria | None = None
    # Canonical item field -> dotted path in the uploaded object, applied at ingest (the kind's
    # ``prepare_payload``).
    fields: dict[str, str] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Criteria:
        if not self.components:
            raise ValueError("a suite needs at least one component")
        marked = sorted(name for name in self.components if SEPARATOR in name)
        if marked:
            raise ValueError(f"component names may not contain {SEPARATOR!r} (it names a jury's members): {marked}")
        total = sum(c.weight for c in self.components.values())
        if not math.isclose(total, 1.0, abs_tol=1e-6):
            raise ValueError(f"component weights must add up to 1, they add up to {total:g}")
        judged = [n for n, c in self.components.items() if c.judge is True]
        if len(judged) > 1:
            raise ValueError(f"at most one component with judge: true, found {judged} (give the others their own rubric)")
        if judged and self.judge is None:
            raise ValueError(f"component {judged[0]!r} is judged but the suite has no judge section")
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
        return without_none(handler(self), ("fields",))

    def row_weight(self, row: str) -> float:
        """A row's weight: a component's own; a member's, its share of its jury's weight."""
        found = self._member(row)
        if found is None:
            return self.components[row].weight
        component, jury, member = found
        return self.components[component].weight * member.weight / math.fsum(m.weight for m in jury.judges)

    @property
    def judge_component(self) -> str | None:
        """The component judged with the suite-level judge section (``judge: true``), if any."""
        return next((n for n, c in self.components.items() if c.judge is True), None)

    @property
    def judge_components(self) -> list[str]:
        """Every judge component, in suite order (a jury is one: its members are rows of it)."""
        return [n for n, c in self.components.items() if c.is_judge]

    def members_of(self, component: str) -> list[str]:
        """The rows of a jury component's members (``component@member``); empty for any other."""
        spec = self.components.get(component)
        jury = spec.jury if spec is not None else None
        return [member_row(component, member.name) for member in jury.judges] if jury is not None else []

    @property
    def rows(self) -> list[str]:
        """The component rows every score of these criteria has, in suite order: each component, a
        jury's member rows before the jury itself (which lands when they have)."""
        return [row for name in self.components for row in (*self.members_of(name), name)]

    @property
    def judge_calls(self) -> list[str]:
        """The rows that are one judge call per item: the judge components, a jury's members in its place."""
        return [row for name in self.judge_components for row in (self.members_of(name) or [name])]

    @property
    def judged_rows(self) -> list[str]:
        """Every row with a judge's score: the judge components and the members of each jury."""
        return [row for name in self.judge_components for row in (*self.members_of(name), name)]

    def is_judge_call(self, row: str) -> bool:
        spec = self.components.get(row)
        if spec is not None:
            return spec.is_judge and spec.jury is None
        return self._member(row) is not None

    def _member(self, row: str) -> tuple[str, JuryJudge, JuryMember] | None:
        component, _, name = row.partition(SEPARATOR)
        spec = self.components.get(component)
        jury = spec.jury if spec is not None and name else None
        member = jury.member(name) if jury is not None else None
        return (component, jury, member) if jury is not None and member is not None else None

    def judge_for(self, component: str) -> ResolvedJudge:
        """The judge of ``component`` (a judge component, or a jury member's row); CriteriaError when
        it makes no judge call (a metric, or a jury, whose members do)."""
        found = self._member(component)
        if found is not None:
            _, jury, member = found
            return ResolvedJudge(
                component,
                member.provider,
                member.model,
                jury.max_tokens,
                jury.template,
                rubric_verdict(jury.verdict),
                member.parameters,
            )
        spec = self.components.get(component)
        if spec is None or not spec.is_judge:
            raise CriteriaError(f"component {component!r} is not a judge component of this suite")
        if spec.jury is not None:
            raise CriteriaError(f"component {component!r} is a jury: its members are judged, and it aggregates them")
        if isinstance(spec.judge, RubricJudge):
            rubric = spec.judge
            return ResolvedJudge(
                component,
                rubric.provider,
                rubric.model,
                rubric.max_tokens,
                rubric.template,
                rubric_verdict(rubric.verdict),
                rubric.parameters,
            )
        judge = self.judge
        assert judge is not None  # validated: judge: true needs the judge section
        return ResolvedJudge(
            component,
            judge.provider,
            judge.model,
            judge.max_tokens,
            judge.prompt,
            named_verdict(judge.verdict),
            judge.parameters,
        )

    def component_fingerprint(self, component: str) -> str:
        """SHA-256 of everything ``component``'s result depends on besides the item: equal fingerprints
        and the same item give the same result, so a re-score may carry a landed result over.

        Its weight and min_score are left out: finalizing reads them from the new criteria, so
        re-weighting a suite re-pays no judge call."""
        found = self._member(component)
        if found is not None:
            # A member's: the jury's shared judging and this member's judge (not its name or weight).
            _, jury, member = found
            own = jury.model_dump(mode="json", exclude={"judges", "aggregate", "min_members"})
            own["member"] = member.model_dump(mode="json", exclude={"name", "weight"})
            body: dict[str, Any] = {"kind": self.kind, "fields": self.fields, "jury_member": own}
            return hashlib.sha256(canonical_json(body).encode("utf-8")).hexdigest()
        spec = self.components[component]
        own = spec.model_dump(mode="json", exclude={"weight", "min_score"})
        body = {"kind": self.kind, "fields": self.fields, "component": own}
        if spec.judge is True:
            assert self.judge is not None
            body["judge"] = self.judge.model_dump(mode="json")
        return hashlib.sha256(canonical_json(body).encode("utf-8")).hexdigest()

    def canonical_json(self) -> str:
        return canonical_json(self.model_dump(mode="json"))

    @property
    def criteria_hash(self) -> str:
        return hashlib.sha256(self.canonical_json().encode("utf-8")).hexdigest()


class JudgeOptions(_Strict):
    timeout_seconds: float = Field(60.0, gt=0)
    # A rubric judge component's own timeout, where it sets one (others use timeout_seconds).
    component_timeouts: dict[str, float] = Field(default_factory=dict)

    def timeout_for(self, component: str) -> float:
        return self.component_timeouts.get(component, self.timeout_seconds)


class RescoreOptions(_Strict):
    """How the nightly re-scoring treats the suite."""

    nightly: bool = True  # false: only manual runs (assay rescore) re-score it
    # `batch`: the judge calls of scheduled runs go through the Message Batches API (half price).
    lane: Literal["realtime", "batch"] = "realtime"
    budget_usd: float | None = Field(None, gt=0)  # per nightly run; judge calls stop when it is spent


class RetentionPolicy(_Strict):
    """How much score history the suite keeps (``assay.scoring.store.retention``). Operational: not
    hashed. Unset, nothing is pruned; with both set, a batch is kept when either keeps it."""

    keep_criteria: int | None = Field(None, ge=1)  # the batches of the suite's latest N criteria hashes
    keep_days: int | None = Field(None, ge=1)  # the batches created in the last D days

    @property
    def active(self) -> bool:
        return self.keep_criteria is not None or self.keep_days is not None


class DisagreementRule(_Strict):
    """Named components whose scores differ by more than ``more_than`` (highest minus lowest)."""

    components: list[str] = Field(..., min_length=2)
    more_than: float = Field(..., ge=0, lt=1)


class ReviewRules(_Strict):
    """Which finalized scores enter the review queue (``assay.scoring.trust.review``). Operational: changing
    them restales nothing. A score matching any rule enters."""

    near_threshold: float | None = Field(None, gt=0, le=1)  # |total - threshold| <= this
    disagreement: list[DisagreementRule] = Field(default_factory=list)
    repaired: bool = False  # a judge answer that needed a repair request
    random_share: float = Field(0.0, ge=0, le=1)  # drawn from the score id: a redelivery draws the same

    @property
    def active(self) -> bool:
        return self.near_threshold is not None or bool(self.disagreement) or self.repaired or self.random_share > 0


class SuiteOptions(_Strict):
    """Operational settings: not criteria, not hashed."""

    enabled: bool = True
    judge: JudgeOptions = Field(default_factory=JudgeOptions)
    rescore: RescoreOptions = Field(default_factory=RescoreOptions)
    review: ReviewRules = Field(default_factory=ReviewRules)
    retention: RetentionPolicy = Field(default_factory=RetentionPolicy)
    online: OnlineRules = Field(default_factory=OnlineRules)
    description: str = ""
    # The pairwise rubric as written (``suites.pairwise`` resolves it): a run hashes it on its own, so
    # editing it leaves the suite's criteria, and its absolute scores, as they are.
    pairwise: dict[str, Any] | None = None

    @model_serializer(mode="wrap")
    def _dump(self, handler: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
        return without_none(handler(self), ("pairwise",))


class Suite(BaseModel):
    name: str
    criteria: Criteria
    options: SuiteOptions
    source: str

    @property
    def criteria_hash(self) -> str:
        return self.criteria.criteria_hash


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, UTF-8 kept: the byte string the criteria hash is taken over."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


# --- loading suite files -------------------------------------------------------------------------


def _no_sampling(data: Any) -> Any:
    sampling = sorted(REFUSED_PARAMETERS & set(data)) if isinstance(data, dict) else []
    if sampling:
        raise ValueError(
            f"{', '.join(sampling)}: the judge sends no sampling parameters but temperature, seed, "
            "reasoning_effort and max_completion_tokens (where the model takes them); remove the key"
        )
    return data


class _JudgeFileBase(_Strict):
    """What every judge written in a suite file has: a provider and a model (empty: its default), and
    the request parameters its model takes (checked against the catalog when resolved)."""

    provider: str = "anthropic"
    model: str = ""
    temperature: float | None = Field(None, ge=0, le=2)
    seed: int | None = None
    reasoning_effort: ReasoningEffort | None = None
    max_completion_tokens: int | None = Field(None, gt=0, le=200_000)

    @property
    def parameters(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in JUDGE_PARAMETERS if getattr(self, name) is not None}

    @field_validator("model", mode="before")
    @classmethod
    def _none_is_empty(cls, v: Any) -> Any:
        return "" if v is None else v

    @model_validator(mode="before")
    @classmethod
    def _no_sampling(cls, data: Any) -> Any:
        return _no_sampling(data)


class _JudgeFile(_JudgeFileBase):
    max_tokens: int
    verdict: str
    prompt: str | None = None
    prompt_file: str | None = None
    timeout_seconds: float = 60.0


DEFAULT_RUBRIC_MAX_TOKENS = 1024


class _RubricJudgeFile(_JudgeFileBase):
    """A rubric judge as written in a suite file: ``judge: {rubric | rubric_file, verdict, ...}``."""

    max_tokens: int = Field(DEFAULT_RUBRIC_MAX_TOKENS, gt=0, le=64_000)
    rubric: str | None = None
    rubric_file: str | None = None
    prompt: str | None = None  # the per-item template; None: judge.rubrics.DEFAULT_ITEM_TEMPLATE
    verdict: VerdictSpec
    timeout_seconds: float | None = Field(None, gt=0)  # operational: never hashed
    # A jury (``assay.scoring.suites.jury``): its members, and how their verdicts are aggregated.
    judges: list[Any] | None = None
    aggregate: str | None = None
    min_members: int | None = None


class _ComponentFile(_Strict):
    weight: float
    metric: str | None = None
    version: int | None = None
    args: dict[str, Any] = Field(default_factory=dict)
    judge: bool | dict[str, Any] = False  # a mapping is a rubric judge (_RubricJudgeFile)
    min_score: float | None = None


class _SuiteFile(_Strict):
    name: str
    kind: str
    description: str = ""
    enabled: bool = True
    threshold: float
    fields: dict[str, str] | None = None
    components: dict[str, _ComponentFile]
    judge: _JudgeFile | None = None
    rescore: RescoreOptions = Field(default_factory=RescoreOptions)
    review: ReviewRules = Field(default_factory=ReviewRules)
    retention: RetentionPolicy = Field(default_factory=RetentionPolicy)
    pairwise: dict[str, Any] | None = None
    online: OnlineRules = Field(default_factory=OnlineRules)


def suite_path(config_dir: Path, name: str) -> Path:
    return config_dir / "suites" / f"{name}.yaml"


def list_suite_names(config_dir: Path) -> list[str]:
    return sorted(p.stem for p in (config_dir / "suites").glob("*.yaml"))


def load_suite(config_dir: Path, name: str, env: Mapping[str, str] | None = None) -> Suite:
    path = suite_path(config_dir, name)
    if not name.replace("_", "").replace("-", "").isalnum() or not path.is_file():
        raise NotFound(f"no suite named {name!r}; available: {', '.join(list_suite_names(config_dir)) or 'none'}")
    return parse_suite(path.read_text(), config_dir=config_dir, env=os.environ if env is None else env, source=str(path))


SuiteOrigin = Literal["file", "api", "path"]

# Keys that would carry code into a suite. No suite key runs code today; an API suite refuses them
# anyway, so no future evaluator form can bring code in through the API unreviewed.
CODE_KEYS = frozenset({"code", "python", "javascript", "js", "script", "exec", "eval", "lambda", "callable"})
FILE_KEYS = ("prompt_file", "rubric_file")


def parse_suite(
    text: str,
    *,
    config_dir: Path,
    env: Mapping[str, str],
    source: str = "<string>",
    origin: SuiteOrigin = "file",
    files_dir: Path | None = None,
) -> Suite:
    """Resolve a suite's text into criteria and options.

    ``origin``: ``file`` (config/suites/: ``${VAR}`` substituted, ``prompt_file``/``rubric_file``
    inside ``config_dir``); ``path`` (a suite file run where it is: substituted, files inside
    ``files_dir``, by default the suite file's directory); ``api`` (a body sent to the API: no
    substitution, and any ``${``, file reference or code-carrying key is refused, so no server file,
    environment value or code can enter a stored criteria). The model catalog always comes from
    ``config_dir``."""
    # Read once, within the limits of yaml_reader.
    raw = read_api_suite(text, source) if origin == "api" else load_suite_yaml(text, source=source)
    if not isinstance(raw, dict):
        raise CriteriaError(f"{source}: a suite file is a YAML mapping")
    if origin == "api":
        resolved = raw
        files = None
    else:
        resolved = substitute_tree(raw, env, where=Path(source).name)
        files = config_dir if origin == "file" else (files_dir or Path(source).resolve().parent)
    try:
        spec = _SuiteFile.model_validate(resolved)
    except ValidationError as exc:
        raise CriteriaError(f"{source}: {_first_errors(exc)}") from exc

    kind = get_kind(spec.kind)
    if kind.internal:
        raise CriteriaError(f"{source}: kind {kind.name!r} is built by Assay itself; a suite may not name it")
    options_judge = JudgeOptions()
    try:
        _check_fields(spec, kind)
        catalog = load_model_catalog(config_dir)
        judge = None
        if spec.judge is not None:
            judge = _resolve_judge(spec.judge, catalog, files)
            options_judge = JudgeOptions(timeout_seconds=spec.judge.timeout_seconds)
        components: dict[str, ComponentSpec] = {}
        for name, comp in spec.components.items():
            components[name], timeout = _resolve_component(name, comp, spec.kind, catalog, files)
            if timeout is not None:
                options_judge.component_timeouts[name] = timeout
        if spec.pairwise is not None:
            check_pairwise(spec.pairwise, catalog)
    except CriteriaError as exc:
        raise CriteriaError(f"{source}: {exc.message}") from exc
    try:
        criteria = Criteria(
            kind=kind.name, threshold=spec.threshold, components=components, judge=judge, fields=spec.fields
        )
    except ValidationError as exc:
        raise CriteriaError(f"{source}: {_first_errors(exc)}") from exc
    if spec.rescore.lane == "batch":
        try:  # refused now, not at 2 a.m. when the nightly run would need the provider's batch API
            catalog.check_batch_lane(criteria)
        except CriteriaError as exc:
            raise CriteriaError(f"{source}: rescore.lane: batch, but {exc.message}") from exc
    for rule in spec.review.disagreement:
        unknown = [name for name in rule.components if name not in criteria.components]
        if unknown:
            raise CriteriaError(
                f"{source}: review.disagreement names {unknown}, not components of this suite "
                f"({', '.join(criteria.components)})"
            )
    if spec.online.active and kind.prepare_payload is None:
        raise CriteriaError(f"{source}: online rules build items through a fields mapping; kind {kind.name!r} takes none")
    options = SuiteOptions(
        enabled=spec.enabled,
        judge=options_judge,
        description=spec.description,
        rescore=spec.rescore,
        review=spec.review,
        retention=spec.retention,
        pairwise=spec.pairwise,
        online=spec.online,
    )
    return Suite(name=spec.name, criteria=criteria, options=options, source=source)


def read_api_suite(text: str, source: str) -> Any:
    """A suite sent to the API, read but not resolved: without YAML aliases, and refused (CriteriaError)
    when it names a server input (``${VAR}``, a file, code)."""
    raw = load_suite_yaml(text, source=source, allow_aliases=False)
    if isinstance(raw, dict):
        _refuse_server_inputs(text, raw, source)
    return raw


def _refuse_server_inputs(text: str, raw: dict[str, Any], source: str) -> None:
    if "${" in text:
        raise CriteriaError(f"{source}: a suite registered through the API may not use ${{VAR}} substitution")
    for path, key in _setting_keys(raw):
        if key in FILE_KEYS:
            raise CriteriaError(
                f"{source}: {path}: a suite registered through the API may not use {key}; put the text in the "
                f"suite ({key.removesuffix('_file')}: ...)"
            )
        if key.lower() in CODE_KEYS:
            raise CriteriaError(f"{source}: {path}: a suite registered through the API may not carry code ({key!r})")


def _setting_keys(raw: dict[str, Any]) -> list[tuple[str, str]]:
    """(dotted location, key) of the keys that are settings: the suite's, its judge section's, each
    component's, its judge's and its metric's arguments. Deeper values are data (a JSON Schema's
    property names, a label's name), where a key named ``code`` is no code."""

    def keys(value: Any, where: str) -> list[tuple[str, str]]:
        if not isinstance(value, dict):
            return []
        return [(f"{where}.{key}" if where else str(key), str(key)) for key in value]

    found = keys(raw, "") + keys(raw.get("judge"), "judge")
    components = raw.get("components")
    for name, comp in (components.items() if isinstance(components, dict) else []):
        where = f"components.{name}"
        found += keys(comp, where)
        if isinstance(comp, dict):
            found += keys(comp.get("judge"), f"{where}.judge") + keys(comp.get("args"), f"{where}.args")
    return found


def _check_fields(spec: _SuiteFile, kind: Any) -> None:
    if spec.fields is None:
        return
    if kind.check_fields is None:
        raise CriteriaError(f"fields: items of kind {spec.kind!r} take no field mapping")
    kind.check_fields(spec.fields)


def _read_file(name: str, files: Path | None, key: str) -> str:
    if files is None:  # API suites refused the key before: no server file may enter their criteria
        raise CriteriaError(f"{key}: a suite registered through the API may not read files")
    path = (files / name).resolve()
    if not path.is_relative_to(files.resolve()) or not path.is_file():
        raise CriteriaError(f"{key} {name!r} is not a file inside {files}")
    return path.read_text()


_every_kind_loaded = False


def named_verdict(name: str) -> VerdictType:
    """A verdict a kind registered by name. Every kind is loaded first (once per process: a judge call
    resolves its verdict, and the import lock is contended by a judge worker's task threads), so
    whether a name resolves never depends on which kinds this process happened to import."""
    global _every_kind_loaded
    if not _every_kind_loaded:
        for kind in known_kinds():
            get_kind(kind)
        _every_kind_loaded = True
    return verdict_type(name)


def _resolve_judge(spec: _JudgeFile, catalog: ModelCatalog, files: Path | None) -> JudgeCriteria:
    if (spec.prompt is None) == (spec.prompt_file is None):
        raise CriteriaError("the judge needs exactly one of prompt or prompt_file")
    if spec.prompt_file is not None:
        prompt = _read_file(spec.prompt_file, files, "prompt_file")
    else:
        prompt = spec.prompt or ""
    model = catalog.resolve(spec.provider, spec.model)
    catalog.check_parameters(spec.provider, model, spec.parameters)
    check_completion_limit(spec.max_tokens, spec.parameters)
    return JudgeCriteria(
        **spec.parameters,
        provider=spec.provider,
        model=model,
        max_tokens=spec.max_tokens,
        prompt=prompt,
        verdict=spec.verdict,
        verdict_schema=named_verdict(spec.verdict).model.model_json_schema(),
    )


def _resolve_component(
    name: str, comp: _ComponentFile, kind: str, catalog: ModelCatalog, files: Path | None
) -> tuple[ComponentSpec, float | None]:
    """The component's resolved spec, and a rubric judge's own timeout (operational, not hashed)."""
    fields = comp.model_dump(exclude={"judge"}, exclude_none=True)
    where = f"components.{name}"
    try:
        if isinstance(comp.judge, dict):
            rubric = _RubricJudgeFile.model_validate(comp.judge)
            judge = _resolve_rubric(name, rubric, catalog, files, written=comp.judge)
            return ComponentSpec(**fields, judge=judge), rubric.timeout_seconds
        plugin = None
        if comp.metric is not None and comp.version is not None:
            plugin = check_component_metric(name, comp.metric, comp.version, comp.args, kind)
        return ComponentSpec(**fields, judge=comp.judge, plugin=plugin), None
    except ValidationError as exc:
        prefix = f"{where}.judge" if isinstance(comp.judge, dict) and exc.title == _RubricJudgeFile.__name__ else where
        raise CriteriaError(_first_errors(exc, prefix=prefix)) from exc


def _resolve_rubric(
    name: str, spec: _RubricJudgeFile, catalog: ModelCatalog, files: Path | None, *, written: dict[str, Any]
) -> RubricJudge | JuryJudge:
    where = f"components.{name}.judge"
    if (spec.rubric is None) == (spec.rubric_file is None):
        raise CriteriaError(f"{where}: give exactly one of rubric or rubric_file")
    rubric = spec.rubric if spec.rubric is not None else _read_file(spec.rubric_file or "", files, f"{where}.rubric_file")
    prompt = DEFAULT_ITEM_TEMPLATE if spec.prompt is None else spec.prompt
    jury_keys = {"judges", "aggregate", "min_members"} & set(written)
    if jury_keys:
        if "judges" not in jury_keys:
            raise CriteriaError(f"{where}: {', '.join(sorted(jury_keys))} belong to a jury; name its members under judges:")
        try:
            template = compose_template(rubric, prompt, spec.verdict)
        except CriteriaError as exc:
            raise CriteriaError(f"{where}: {exc.message}") from exc
        return resolve_jury(
            name,
            {key: written[key] for key in (*jury_keys, *JUDGE_PARAMETERS, "provider", "model") if key in written},
            rubric=rubric,
            prompt=prompt,
            template=template,
            verdict=spec.verdict,
            verdict_schema=rubric_verdict(spec.verdict).model.model_json_schema(),
            max_tokens=spec.max_tokens,
            catalog=catalog,
        )
    try:
        model = catalog.resolve(spec.provider, spec.model)
        catalog.check_parameters(spec.provider, model, spec.parameters)
        check_completion_limit(spec.max_tokens, spec.parameters)
        template = compose_template(rubric, prompt, spec.verdict)
    except CriteriaError as exc:
        raise CriteriaError(f"{where}: {exc.message}") from exc
    return RubricJudge(
        **spec.parameters,
        provider=spec.provider,
        model=model,
        max_tokens=spec.max_tokens,
        rubric=rubric,
        prompt=prompt,
        verdict=spec.verdict,
        template=template,
        verdict_schema=rubric_verdict(spec.verdict).model.model_json_schema(),
    )


def _first_errors(exc: ValidationError, limit: int = 5, prefix: str = "") -> str:
    parts = []
    for err in exc.errors()[:limit]:
        loc = ".".join([*([prefix] if prefix else []), *(str(p) for p in err["loc"])]) or "suite"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)
