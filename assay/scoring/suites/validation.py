"""``assay suite validate``: every problem of a suite file at once, in plain words, and what a sample of
real items would do under it.

``parse_suite`` stops at the first problem (a run needs one reason to refuse a suite). Here each part
is resolved on its own with the loader's own steps (the judge section, each component, the field
mapping, the weights), so one report names every problem with its component and field. The judge's
``{{...}}`` placeholders are checked against the fields the suite's items have (a kind that declares
them), and with sample items each line goes through the field mapping, the item model, the metrics'
``{from: …}`` arguments and the judge's placeholders, as an upload and the workers would take it.
When every part resolves, the whole suite is resolved once more exactly as ``assay run`` does, so a
suite this module passes is one a run accepts.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from assay.scoring.errors import AssayError, CriteriaError
from assay.scoring.judge.prompt import OUTPUT_SCHEMA, template_placeholders
from assay.scoring.kinds import Kind, get_kind
from assay.scoring.metrics.registry import ItemRef, MissingItemValue, resolve_arg
from assay.scoring.suites import loader
from assay.scoring.suites.criteria import load_suite_file
from assay.scoring.suites.envsubst import substitute_tree
from assay.scoring.suites.yaml_reader import load_suite_yaml

# Sample lines read with --items: a sample, not a dataset.
MAX_SAMPLE_ITEMS = 10_000


@dataclass(frozen=True)
class Problem:
    where: str  # the component and field (``components.tone.weight``), or ``suite``
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


@dataclass(frozen=True)
class ItemFinding:
    line: int
    outcome: str  # rejected (the upload refuses the line), fail or skip (a component of the item)
    component: str | None
    reason: str

    def __str__(self) -> str:
        what = "the line would be rejected" if self.component is None else f"{self.component} would {self.outcome}"
        return f"line {self.line}: {what}: {self.reason}"


@dataclass
class Validation:
    suite: loader.Suite | None = None
    problems: list[Problem] = field(default_factory=list)
    items_checked: int = 0
    findings: list[ItemFinding] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        """No problem in the suite, and no sample line rejected or failing (skips are reported only)."""
        return not self.problems and not any(f.outcome != "skip" for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        import json

        suite = self.suite
        return {
            "valid": self.valid,
            "name": suite.name if suite else None,
            "criteria_hash": suite.criteria_hash if suite else None,
            "criteria": json.loads(suite.criteria.canonical_json()) if suite else None,
            "options": suite.options.model_dump(mode="json") if suite else None,
            "problems": [{"where": p.where, "message": p.message} for p in self.problems],
            "items_checked": self.items_checked,
            "items": [
                {"line": f.line, "outcome": f.outcome, "component": f.component, "reason": f.reason} for f in self.findings
            ],
        }


# --- plain words -------------------------------------------------------------------------------------

# pydantic's wording, as a suite's author should read it.
_PLAIN = (
    (re.compile(r"\b(Value|Assertion) error, "), ""),
    (re.compile(r"\bField required\b"), "is required"),
    (re.compile(r"\bExtra inputs are not permitted\b"), "is not a setting here"),
    (re.compile(r"\bInput should be\b"), "should be"),
    (re.compile(r"\bunable to parse string as an? "), "not a "),
    (re.compile(r"\bvalid dictionary\b"), "mapping (key: value lines)"),
)


def plain(message: str) -> str:
    for pattern, words in _PLAIN:
        message = pattern.sub(words, message)
    return message


def _errors(exc: ValidationError, prefix: str = "", model: type[BaseModel] | None = None) -> list[Problem]:
    problems = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        where = ".".join([*([prefix] if prefix else []), *loc]) or prefix or "suite"
        message = plain(err["msg"])
        if err["type"] == "extra_forbidden" and model is not None and len(loc) == 1:
            close = difflib.get_close_matches(loc[0], list(model.model_fields), n=1)
            message += f" (did you mean {close[0]}?)" if close else ""
        problems.append(Problem(where, message))
    return problems


def _split_where(message: str, default: str = "suite") -> list[Problem]:
    """A loader message (``components.x.judge: …``, several joined by ``; ``) as problems with their place."""
    problems = []
    for part in re.split(f"; (?={_PLACE.pattern}: )", message):
        head, sep, rest = part.partition(": ")
        if sep and _PLACE.fullmatch(head):
            problems.append(Problem(head, plain(rest)))
        else:
            problems.append(Problem(default, plain(part)))
    return problems


# Where in a suite file a loader message points: a top-level key, or a dotted path under one.
_PLACE = re.compile(r"(?:" + "|".join(loader._SuiteFile.model_fields) + r")(?:\.[A-Za-z0-9_\-]+)*")


# --- the suite ---------------------------------------------------------------------------------------


def validate_suite_file(
    path: Path, config_dir: Path, *, items: Path | None = None, env: Mapping[str, str] | None = None
) -> Validation:
    """Every problem of the suite file at ``path`` (resolved as ``assay run --suite PATH`` would), and,
    with ``items``, what each sample line would do under it."""
    env = os.environ if env is None else env
    installed = path.suffix == ".yaml" and path.resolve().parent == (config_dir / "suites").resolve()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return Validation(problems=[Problem("suite", f"cannot read the file: {exc}")])
    result = validate_suite(
        lambda: substitute_tree(load_suite_yaml(text, source=str(path)), env, where=path.name),
        lambda: load_suite_file(path, config_dir),
        config_dir,
        files=config_dir if installed else path.resolve().parent,
        source=str(path),
    )
    if items is not None and result.suite is not None and not result.problems:
        _check_items(result, items)
    return result


def validate_suite(
    read: Callable[[], Any], resolve: Callable[[], loader.Suite], config_dir: Path, *, files: Path | None, source: str
) -> Validation:
    """Every problem of a suite, whatever it came from (a file, an API body): ``read`` gives its raw
    mapping (after substitution, or the API's refusal of server inputs), its parts are resolved one by
    one (``files``: where file references resolve, None for none), and when none has a problem
    ``resolve`` resolves the whole suite as its run or registration would. ``source`` is the prefix
    the loader puts before its messages."""
    result = Validation()
    try:
        raw = read()
    except CriteriaError as exc:
        result.problems.extend(_split_where(exc.message.removeprefix(f"{source}: ")))
        return result
    if not isinstance(raw, dict):
        result.problems.append(Problem("suite", "a suite file is a YAML mapping (key: value lines)"))
        return result
    result.problems.extend(_check_parts(raw, config_dir, files))
    if result.problems:
        return result
    try:
        result.suite = resolve()
    except CriteriaError as exc:
        result.problems.extend(_split_where(exc.message.removeprefix(f"{source}: ")))
    return result


def _check_parts(raw: dict[str, Any], config_dir: Path, files: Path | None) -> list[Problem]:
    """Each part resolved on its own (the top-level settings, the judge section, each component), so
    a problem in one does not hide those of the others."""
    problems: list[Problem] = []
    # The components and the judge section are read one by one below.
    spec = _parsed(loader._SuiteFile, {**raw, "components": {}, "judge": None}, "", problems)
    if spec is not None and not 0 <= spec.threshold <= 1:
        problems.append(Problem("threshold", f"should be between 0 and 1 (a total's range), not {spec.threshold:g}"))
    components_raw = raw.get("components")
    if not isinstance(components_raw, dict) or not components_raw:
        problems.append(Problem("components", "a suite needs at least one component (name: {weight, metric or judge})"))
        components_raw = {}
    components = {}
    for name, comp_raw in components_raw.items():
        comp = _parsed(loader._ComponentFile, comp_raw, f"components.{name}", problems)
        if comp is not None:
            components[str(name)] = comp
    judge = None if raw.get("judge") is None else _parsed(loader._JudgeFile, raw["judge"], "judge", problems)
    kind_name = spec.kind if spec is not None else raw.get("kind")
    kind: Kind | None = None
    if isinstance(kind_name, str):
        try:
            kind = get_kind(kind_name)
        except CriteriaError as exc:
            problems.append(Problem("kind", exc.message))
    if kind is not None and kind.internal:
        problems.append(Problem("kind", f"{kind.name!r} is built by Assay itself; a suite may not name it"))
    if kind is not None and spec is not None:
        try:
            loader._check_fields(spec, kind)
        except CriteriaError as exc:
            problems.extend(_split_where(exc.message, "fields"))
    try:
        catalog = loader.load_model_catalog(config_dir)
    except CriteriaError as exc:
        return [*problems, Problem("judge models", exc.message)]
    templates: list[tuple[str, str]] = []  # (where, template) of the judges that resolved
    if judge is not None:
        try:
            templates.append(("judge.prompt", loader._resolve_judge(judge, catalog, files).prompt))
        except CriteriaError as exc:
            problems.extend(_split_where(exc.message, "judge"))
    for name, comp in components.items():
        if kind is None:
            break
        try:
            resolved, _ = loader._resolve_component(name, comp, kind.name, catalog, files)
            if isinstance(resolved.judge, (loader.RubricJudge, loader.JuryJudge)):  # a jury's members share one
                templates.append((f"components.{name}.judge", resolved.judge.template))
        except CriteriaError as exc:
            problems.extend(
                p if p.where.startswith(f"components.{name}") else Problem(f"components.{name}", str(p))
                for p in _split_where(exc.message, f"components.{name}")
            )
    fields = raw.get("fields")  # as written: checked above, and still known when other settings are not
    if kind is not None and (fields is None or isinstance(fields, dict)):
        problems += _placeholder_problems(kind, fields, templates)
    weights = {n: c.weight for n, c in components.items()} if len(components) == len(components_raw) else _raw_weights(raw)
    problems += _weight_problem(weights)
    judged = [n for n, c in components.items() if c.judge is True]
    if len(judged) > 1:
        problems.append(Problem("components", f"{', '.join(judged)} all say judge: true; at most one may (give the others their own rubric)"))
    if judged and raw.get("judge") is None:
        problems.append(Problem(f"components.{judged[0]}.judge", "judge: true needs the suite's judge section, which is missing"))
    return problems


def _parsed(model: type[BaseModel], value: Any, where: str, problems: list[Problem]) -> Any:
    """``value`` read as ``model``; None, with its problems added, when it is not one."""
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        problems.extend(_errors(exc, where, model))
        return None


def _raw_weights(raw: dict[str, Any]) -> dict[str, float]:
    components = raw.get("components")
    weights = {}
    for name, comp in (components.items() if isinstance(components, dict) else []):
        weight = comp.get("weight") if isinstance(comp, dict) else None
        if isinstance(weight, (int, float)) and not isinstance(weight, bool):
            weights[str(name)] = float(weight)
    return weights if isinstance(components, dict) and len(weights) == len(components) else {}


def _weight_problem(weights: dict[str, float]) -> list[Problem]:
    """Weights that do not add up to 1, in plain words: their sum, and which to change by how much."""
    if not weights:
        return []
    total = sum(weights.values())
    if math.isclose(total, 1.0, abs_tol=1e-6):
        return []
    gap = round(1.0 - total, 6)
    listed = " + ".join(f"{name} {w:g}" for name, w in weights.items())
    # The largest weight can always absorb an excess; any weight that stays within 1 a shortfall.
    candidate = max(weights, key=lambda n: weights[n] if gap < 0 else -weights[n])
    new = round(weights[candidate] + gap, 6)
    hint = f", e.g. {candidate} {weights[candidate]:g} → {new:g}" if 0 < new <= 1 else ""
    verb = "raise" if gap > 0 else "lower"
    return [
        Problem(
            "components",
            f"the weights add up to {total:g}, not 1 ({listed}): {verb} them by {abs(gap):g} in all{hint}",
        )
    ]


# --- placeholders ------------------------------------------------------------------------------------


def _templates(suite: loader.Suite) -> Iterator[tuple[str, str]]:
    """(component, template) of every judge component; a jury's is the one its members share (a jury
    makes no judge call of its own: ``judge_for`` has none for it)."""
    for name in suite.criteria.judge_components:
        jury = suite.criteria.components[name].jury
        yield name, jury.template if jury is not None else suite.criteria.judge_for(name).template


def _placeholder_problems(kind: Kind, fields: dict[str, str] | None, templates: list[tuple[str, str]]) -> list[Problem]:
    """A placeholder the suite's items cannot have (a typo of a field): every item would fail on it."""
    if kind.placeholders is None:
        return []
    known, open_prefix = kind.placeholders(fields)
    have = ", ".join("{{" + n + "}}" for n in sorted(known)) + (f", {{{{{open_prefix}KEY}}}}" if open_prefix else "")
    problems = []
    for where, template in templates:
        for name in template_placeholders(template):
            if name == OUTPUT_SCHEMA or name in known or (open_prefix and name.startswith(open_prefix)):
                continue
            close = difflib.get_close_matches(name, sorted(known), n=1)
            hint = f" (did you mean {{{{{close[0]}}}}}?)" if close else ""
            problems.append(Problem(where, f"{{{{{name}}}}} is not a field of this suite's items{hint}; they have {have}"))
    return problems


# --- sample items ------------------------------------------------------------------------------------


def _sample_lines(path: Path) -> Iterator[tuple[int, bytes | str]]:
    """(line number, line bytes, or why the line is unreadable) of a JSONL file or JSON array."""
    from assay.scoring.intake.ingest import BadLine, LineSplitter
    from assay.settings import get_settings

    settings = get_settings()
    splitter = LineSplitter(settings.max_item_bytes, settings.max_upload_bytes)
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            for number, line in splitter.feed(chunk):
                yield number, line.reason if isinstance(line, BadLine) else line
        for number, line in splitter.close():
            yield number, line.reason if isinstance(line, BadLine) else line


def _item_refs(value: Any) -> Iterator[ItemRef]:
    """The ``{from: …}`` arguments in a metric's arguments, however deep."""
    if isinstance(value, dict):
        if set(value) == {"from"} and isinstance(value["from"], str):
            try:
                yield ItemRef.model_validate(value)
            except ValidationError:
                return  # the suite resolved: a metric that takes such a mapping as data
            return
        for inner in value.values():
            yield from _item_refs(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _item_refs(inner)


def _check_items(result: Validation, path: Path) -> None:
    from assay.scoring.intake import strict_json

    suite = result.suite
    assert suite is not None
    criteria = suite.criteria
    kind = get_kind(criteria.kind)
    try:
        for number, line in _sample_lines(path):
            if result.items_checked >= MAX_SAMPLE_ITEMS:
                result.problems.append(Problem("--items", f"only the first {MAX_SAMPLE_ITEMS} items were checked"))
                return
            result.items_checked += 1
            if isinstance(line, str):
                result.findings.append(ItemFinding(number, "rejected", None, line))
                continue
            try:
                item = _item(kind, criteria, strict_json.loads(line))
            except strict_json.JsonRejected as exc:
                result.findings.append(ItemFinding(number, "rejected", None, exc.message))
                continue
            except (AssayError, ValidationError) as exc:
                reason = exc.message if isinstance(exc, AssayError) else "; ".join(map(str, _errors(exc)))
                result.findings.append(ItemFinding(number, "rejected", None, reason))
                continue
            result.findings.extend(_component_findings(number, item, kind, suite))
    except OSError as exc:
        result.problems.append(Problem("--items", f"cannot read {path}: {exc}"))
    except AssayError as exc:  # the file as a whole is refused (too large, a broken array)
        result.problems.append(Problem("--items", exc.message))


def _item(kind: Kind, criteria: loader.Criteria, raw: Any) -> BaseModel:
    payload = kind.prepare_payload(raw, criteria) if kind.prepare_payload is not None else raw
    return kind.item_model.model_validate(payload)


def _component_findings(number: int, item: BaseModel, kind: Kind, suite: loader.Suite) -> list[ItemFinding]:
    findings = []
    for name, spec in suite.criteria.components.items():
        for ref in _item_refs(spec.args):
            try:
                resolve_arg(ref, item)
            except MissingItemValue as exc:
                findings.append(ItemFinding(number, "skip", name, f"{{from: {ref}}}: {exc.message}"))
    inputs = kind.judge_inputs(item)
    for name, template in _templates(suite):
        missing = [p for p in template_placeholders(template) if p != OUTPUT_SCHEMA and p not in inputs]
        if missing:
            names = ", ".join("{{" + p + "}}" for p in missing)
            findings.append(ItemFinding(number, "fail", name, f"the judge prompt uses {names}, which this item does not provide"))
    return findings
