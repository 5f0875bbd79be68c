"""JSON checks on the output: valid JSON, a JSON Schema, the value at a path.

A string output is JSON text to parse; any other output value already is JSON. An output that is
not valid JSON scores 0 with the parse error in the details (that is the answer's fault, not a
failure of the metric).

Paths (``json_path_equals``, ``json_path_contains``, ``list_f1``) are keys separated by dots, each
optionally followed by list indexes: ``a.b[0].c``, ``items[2]``, ``[0].name`` (the output is a list).
Indexes count from 0; a key cannot contain ``.``, ``[`` or ``]``.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

from jsonschema import SchemaError, ValidationError
from jsonschema.validators import Draft202012Validator, extend, validator_for
from pydantic import Field, field_validator
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from assay.scoring.metrics.library._common import (
    KINDS,
    Args,
    as_text,
    compile_re2,
    json_equal,
    json_values,
    output_json,
)
from assay.scoring.metrics.registry import (
    ComponentResult,
    ItemRef,
    Metric,
    MetricContext,
    metric,
    resolve_arg,
)
from assay.scoring.metrics.work import Work, WorkBound

# --- paths ---------------------------------------------------------------------------------------

PathStep = str | int

_SEGMENT = re.compile(r"([^.\[\]]*)((?:\[\d+\])*)")
_INDEX = re.compile(r"\[(\d+)\]")


def parse_path(path: str) -> tuple[PathStep, ...]:
    """``a.b[0].c`` -> ``("a", "b", 0, "c")``; a ValueError says what is wrong with the path."""
    steps: list[PathStep] = []
    for position, part in enumerate(path.split(".")):
        found = _SEGMENT.fullmatch(part)
        key = found.group(1) if found else ""
        # Only the first segment may be bare indexes (the output itself is a list).
        if found is None or (not key and (position > 0 or not found.group(2))):
            raise ValueError(f"{path!r} is not a path like a.b[0].c (keys separated by dots, [N] list indexes)")
        if key:
            steps.append(key)
        steps.extend(int(index) for index in _INDEX.findall(found.group(2)))
    return tuple(steps)


def lookup(value: Any, steps: tuple[PathStep, ...]) -> tuple[bool, Any, str]:
    """``(True, value at the path, "")`` or ``(False, None, why it is not there)``."""
    where = "$"
    for step in steps:
        if isinstance(step, int):
            if not isinstance(value, list):
                return False, None, f"{where} is not a list"
            if step >= len(value):
                return False, None, f"{where} has {len(value)} elements, no index {step}"
            value, where = value[step], f"{where}[{step}]"
        else:
            if not isinstance(value, dict):
                return False, None, f"{where} is not an object"
            if step not in value:
                return False, None, f"{where} has no key {step!r}"
            value, where = value[step], f"{where}.{step}"
    return True, value, ""


# --- valid JSON ----------------------------------------------------------------------------------


class NoArgs(Args):
    pass


@metric("is_json", version=1, kinds=KINDS, args_model=NoArgs)
def is_json(args: NoArgs) -> Metric:
    """1 when the output is valid JSON, else 0 (``error`` says where parsing stopped)."""

    def score(item: Any, ctx: MetricContext) -> ComponentResult:
        _, error = output_json(item)
        return ComponentResult.ok(0.0, {"error": error}) if error else ComponentResult.ok(1.0)

    return score


# --- JSON Schema ---------------------------------------------------------------------------------

_REF_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")
# How many validation errors, and how much of each message, the details keep.
_MAX_ERRORS = 5
_MAX_MESSAGE = 300


def _walk(node: Any) -> Iterator[tuple[str, Any]]:
    """Every (key, value) pair of every object in a schema, depth first."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield key, value
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def _references(schema: dict[str, Any]) -> list[str]:
    return [value for key, value in _walk(schema) if key in _REF_KEYWORDS and isinstance(value, str)]


def _patterns(schema: dict[str, Any]) -> Iterator[str]:
    for key, value in _walk(schema):
        if key == "pattern" and isinstance(value, str):
            yield value
        elif key == "patternProperties" and isinstance(value, dict):
            yield from value


# jsonschema matches `pattern` and `patternProperties` with Python's backtracking `re`, where a
# pattern like (a+)+$ can take hours on a short output. These keywords are replaced by RE2
# versions (linear time); `additionalProperties` is handed the properties RE2 matched so that it
# never runs a pattern itself. `unevaluatedProperties` runs patterns deep inside jsonschema, so a
# schema combining it with `patternProperties` is refused at resolution.


def _re2_search(pattern: str, text: str) -> bool:
    return compile_re2(pattern, True).search(text) is not None


def _pattern(validator: Any, pattern: str, instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _re2_search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: dict[str, Any], instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _re2_search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties_after_re2(original: Callable[..., Iterator[ValidationError]]) -> Callable[..., Iterator[ValidationError]]:
    def additional_properties(validator: Any, allowed: Any, instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
        if "patternProperties" in schema and validator.is_type(instance, "object"):
            matched = {key: True for key in instance if any(_re2_search(p, key) for p in schema["patternProperties"])}
            schema = {k: v for k, v in schema.items() if k != "patternProperties"}
            schema["properties"] = {**schema.get("properties", {}), **matched}
        yield from original(validator, allowed, instance, schema)

    return additional_properties


@functools.cache
def _re2_validator(cls: type[Any]) -> type[Any]:
    return extend(
        cls,
        validators={
            "pattern": _pattern,
            "patternProperties": _pattern_properties,
            "additionalProperties": _additional_properties_after_re2(cls.VALIDATORS["additionalProperties"]),
        },
    )


def _validator_class(schema: dict[str, Any]) -> type[Any]:
    if "$schema" not in schema:
        return Draft202012Validator
    cls = validator_for(schema, default=None)
    if cls is None:
        raise ValueError(f"$schema {schema['$schema']!r} is not a JSON Schema dialect this version of jsonschema knows")
    return cls


class JsonSchemaArgs(Args):
    schema_: dict[str, Any] = Field(..., alias="schema", description="a JSON Schema (default dialect 2020-12)")
    check_formats: bool = Field(False, description="assert `format` (email, date, ...) instead of treating it as a note")

    @field_validator("schema_")
    @classmethod
    def _usable(cls, schema: dict[str, Any]) -> dict[str, Any]:
        # Only references inside the schema: a remote $ref is never fetched, so refuse it up front
        # instead of failing every item.
        for ref in _references(schema):
            if not ref.startswith("#"):
                raise ValueError(f"$ref {ref!r} is not local; only references inside the schema ('#/...') are allowed")
        try:
            _validator_class(schema).check_schema(schema)
        except SchemaError as exc:
            raise ValueError(f"not a valid JSON Schema: {exc.message} (at {exc.json_path})") from exc
        for pattern in _patterns(schema):
            try:
                compile_re2(pattern, True)
            except ValueError as exc:
                raise ValueError(f"pattern {pattern!r}: {exc}") from exc
        keys = {key for key, _ in _walk(schema)}
        if {"patternProperties", "unevaluatedProperties"} <= keys:
            raise ValueError(
                "patternProperties with unevaluatedProperties is not supported (jsonschema would match those "
                "patterns with Python's backtracking re); use additionalProperties"
            )
        # A local reference to nothing would fail every item; find it now (against the root).
        resolver = Registry().resolver_with_root(Resource.from_contents(schema, default_specification=DRAFT202012))
        for ref in _references(schema):
            try:
                resolver.lookup(ref)
            except Unresolvable as exc:
                raise ValueError(f"$ref {ref!r} points to nothing in the schema") from exc
        return schema


# jsonschema validates in Python, a few microseconds per (output value, schema value) it visits; the
# product of the two counts bounds what an anyOf of many branches over a long array can cost.
MAX_VALIDATION_STEPS = 500_000
# uniqueItems compares every pair of an array's elements when they cannot be sorted (objects, lists,
# mixed types): about 2 microseconds a pair.
MAX_UNIQUE_PAIRS = 400_000


def _output_or_none(item: Any) -> Any:
    value, error = output_json(item)
    return None if error else value


def _validation_steps(args: JsonSchemaArgs, item: Any) -> Work:
    output, schema = json_values(_output_or_none(item)), json_values(args.schema_)
    return Work(output * schema, f"{output:,} output JSON values x {schema:,} schema values")


def _unsortable_pairs(value: Any) -> tuple[int, int]:
    """Pairs uniqueItems would compare one by one, over every array in ``value``, and the longest
    such array."""
    pairs = longest = 0
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
            strings = all(isinstance(e, str) for e in node)
            numbers = all(isinstance(e, int | float) and not isinstance(e, bool) for e in node)
            if not (strings or numbers):
                pairs += len(node) * (len(node) - 1) // 2
                longest = max(longest, len(node))
    return pairs, longest


def _unique_pairs(args: JsonSchemaArgs, item: Any) -> Work:
    if "uniqueItems" not in {key for key, _ in _walk(args.schema_)}:
        return Work(0, "no uniqueItems in the schema")
    pairs, longest = _unsortable_pairs(_output_or_none(item))
    return Work(pairs, f"arrays of objects, lists or mixed values (the longest {longest:,} elements)")


@metric(
    "json_schema",
    version=1,
    kinds=KINDS,
    args_model=JsonSchemaArgs,
    bounds=(
        WorkBound("uniqueItems pairs", MAX_UNIQUE_PAIRS, _unique_pairs),
        WorkBound("validation steps", MAX_VALIDATION_STEPS, _validation_steps),
    ),
)
def json_schema(args: JsonSchemaArgs) -> Metric:
    """1 when the output is JSON valid against ``schema``, else 0; ``errors`` lists the first few
    violations (JSON path and message), ``error_count`` how many there are."""
    cls = _re2_validator(_validator_class(args.schema_))
    # An empty registry that retrieves nothing: no reference can reach the network or the disk.
    validator = cls(
        args.schema_, registry=Registry(), format_checker=cls.FORMAT_CHECKER if args.check_formats else None
    )

    def score(item: Any, ctx: MetricContext) -> ComponentResult:
        value, error = output_json(item)
        if error:
            return ComponentResult.ok(0.0, {"error": error})
        try:
            errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
        except Unresolvable as exc:
            # Only a reference the resolution check could not follow (one under a nested $id)
            # gets here; the empty registry fetched nothing.
            return ComponentResult.failed(f"the schema has a reference that cannot be resolved: {exc.ref}")
        if not errors:
            return ComponentResult.ok(1.0, {"error_count": 0})
        listed = [{"path": e.json_path, "message": e.message[:_MAX_MESSAGE]} for e in errors[:_MAX_ERRORS]]
        return ComponentResult.ok(0.0, {"error_count": len(errors), "errors": listed})

    return score


# --- value at a path -----------------------------------------------------------------------------


class JsonPathArgs(Args):
    path: str = Field(..., description="where in the output JSON, like a.b[0].c")
    value: Any = Field(..., description="a JSON constant, or a per-item value like {from: expected}")

    @field_validator("path")
    @classmethod
    def _valid_path(cls, path: str) -> str:
        parse_path(path)
        return path

    @field_validator("value", mode="before")
    @classmethod
    def _item_ref_or_constant(cls, value: Any) -> Any:
        # A mapping whose only key is "from" is a per-item value (so a typo is an error, not a constant).
        if isinstance(value, dict) and set(value) == {"from"}:
            return ItemRef.model_validate(value)
        return value


def _at_path(args: JsonPathArgs, item: Any) -> tuple[bool, Any, dict[str, Any]]:
    """``(True, value at the path, {})`` or ``(False, None, details saying why there is none)``."""
    output, error = output_json(item)
    if error:
        return False, None, {"error": error}
    found, value, why = lookup(output, parse_path(args.path))
    return (True, value, {}) if found else (False, None, {"error": f"path {args.path}: {why}"})


def _wanted(args: JsonPathArgs, item: Any, found: Any) -> Any:
    wanted = resolve_arg(args.value, item)
    # A per-item string (expected is always one) is read as JSON when the value found is not a
    # string, so {from: expected} can hold 42 or ["a", "b"].
    if isinstance(args.value, ItemRef) and isinstance(wanted, str) and not isinstance(found, str):
        try:
            return json.loads(wanted)
        except json.JSONDecodeError:
            return wanted
    return wanted


@metric("json_path_equals", version=1, kinds=KINDS, args_model=JsonPathArgs)
def json_path_equals(args: JsonPathArgs) -> Metric:
    """1 when the output JSON has ``value`` at ``path`` (JSON equality: 1 equals 1.0, "1" is not 1),
    else 0; a missing path scores 0 with the reason in ``error``."""

    def score(item: Any, ctx: MetricContext) -> ComponentResult:
        found, value, details = _at_path(args, item)
        if not found:
            return ComponentResult.ok(0.0, details)
        equal = json_equal(value, _wanted(args, item, value))
        return ComponentResult.ok(1.0 if equal else 0.0, {"equal": equal, "found": as_text(value)[:_MAX_MESSAGE]})

    return score


@metric("json_path_contains", version=1, kinds=KINDS, args_model=JsonPathArgs)
def json_path_contains(args: JsonPathArgs) -> Metric:
    """1 when the value at ``path`` contains ``value``, else 0: a string contains it as a substring,
    a list as an element (JSON equality), an object as a key."""

    def score(item: Any, ctx: MetricContext) -> ComponentResult:
        found, value, details = _at_path(args, item)
        if not found:
            return ComponentResult.ok(0.0, details)
        wanted = _wanted(args, item, value)
        if isinstance(value, str):
            holds = isinstance(wanted, str) and wanted in value
        elif isinstance(value, list):
            holds = any(json_equal(element, wanted) for element in value)
        elif isinstance(value, dict):
            holds = isinstance(wanted, str) and wanted in value
        else:
            return ComponentResult.ok(
                0.0, {"error": f"path {args.path}: {as_text(value)} is neither a string, a list nor an object"}
            )
        return ComponentResult.ok(1.0 if holds else 0.0, {"contains": holds})

    return score
