"""JSON metrics: valid JSON, JSON Schema (no reference is ever fetched), the value at a path."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import pytest

from assay.scoring.metrics.library.json_checks import lookup, parse_path
from assay.scoring.metrics.registry import ComponentResult
from tests.scoring.metrics.library_items import args_error, score

# --- is_json ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("output", ['{"a": 1}', "[1, 2]", "42", '"text"', "null", {"a": 1}, [1], 3.5])
def test_is_json_accepts_json_text_and_json_values(output: Any) -> None:
    assert score("is_json", output=output) == ComponentResult.ok(1.0)


@pytest.mark.parametrize("output", ["{'a': 1}", '{"a": 1,}', "", "```json\n{}\n```", "NaN", "[1, Infinity]"])
def test_is_json_scores_zero_with_the_parse_error(output: str) -> None:
    result = score("is_json", output=output)
    assert result.score == 0.0 and result.details["error"].startswith("the output is not valid JSON: ")


def test_is_json_takes_no_args() -> None:
    assert args_error("is_json", {"strict": True}).endswith("args.strict: Extra inputs are not permitted")


# --- json_schema -----------------------------------------------------------------------------------

SCHEMA = {
    "type": "object",
    "required": ["tool", "args"],
    "properties": {"tool": {"enum": ["search", "lookup"]}, "args": {"$ref": "#/$defs/args"}},
    "$defs": {"args": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}},
}


def test_json_schema_valid_and_invalid_outputs() -> None:
    assert score("json_schema", {"schema": SCHEMA}, output='{"tool": "search", "args": {"q": "x"}}') == ComponentResult.ok(
        1.0, {"error_count": 0}
    )
    result = score("json_schema", {"schema": SCHEMA}, output={"tool": "delete", "args": {"q": 3}})
    assert result.score == 0.0
    assert result.details == {
        "error_count": 2,
        "errors": [
            {"path": "$.args.q", "message": "3 is not of type 'string'"},
            {"path": "$.tool", "message": "'delete' is not one of ['search', 'lookup']"},
        ],
    }
    not_json = score("json_schema", {"schema": SCHEMA}, output="tool: search")
    assert not_json.score == 0.0 and not_json.details["error"].startswith("the output is not valid JSON")


def test_json_schema_keeps_at_most_five_errors() -> None:
    schema = {"type": "array", "items": {"type": "string"}}
    result = score("json_schema", {"schema": schema}, output=list(range(8)))
    assert result.details["error_count"] == 8 and len(result.details["errors"]) == 5


def test_json_schema_formats_are_asserted_only_when_asked() -> None:
    schema = {"type": "string", "format": "email"}
    assert score("json_schema", {"schema": schema}, output='"not an address"').score == 1.0
    assert score("json_schema", {"schema": schema, "check_formats": True}, output='"not an address"').score == 0.0
    assert score("json_schema", {"schema": schema, "check_formats": True}, output='"a@example.com"').score == 1.0


def test_json_schema_honours_the_declared_dialect() -> None:
    # Draft 4's exclusiveMaximum is a boolean; 2020-12 would reject that schema.
    schema = {"$schema": "http://json-schema.org/draft-04/schema#", "maximum": 5, "exclusiveMaximum": True}
    assert score("json_schema", {"schema": schema}, output="5").score == 0.0
    assert score("json_schema", {"schema": schema}, output="4").score == 1.0


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "https://example.com/schema.json"},
        {"properties": {"a": {"$ref": "other.json#/x"}}},
        {"items": [{"$dynamicRef": "http://127.0.0.1:9/s"}]},
        {"$defs": {"x": {"$id": "urn:x", "type": "string"}}, "$ref": "urn:x"},
    ],
)
def test_a_non_local_ref_makes_the_suite_invalid(schema: dict[str, Any]) -> None:
    message = args_error("json_schema", {"schema": schema})
    assert "args.schema: $ref " in message and "is not local; only references inside the schema" in message


def test_a_reference_that_cannot_be_followed_fails_the_item_and_fetches_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    # "#/$defs/y" exists at the root (so the resolution check passes) but not inside the resource
    # whose $id is a URL, where jsonschema resolves it. The validator's registry is empty and
    # retrieves nothing: any connection attempt fails the test.
    def no_network(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a JSON Schema reference reached the network")

    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    schema = {"$defs": {"y": {}}, "items": {"$id": "http://127.0.0.1:9/x", "$ref": "#/$defs/y"}}
    result = score("json_schema", {"schema": schema}, output="[1]")
    assert result.status == "failed"
    assert result.reason == "the schema has a reference that cannot be resolved: /$defs/y"


def test_a_local_ref_to_nothing_makes_the_suite_invalid() -> None:
    message = args_error("json_schema", {"schema": {"$ref": "#/$defs/missing"}})
    assert message.endswith("args.schema: $ref '#/$defs/missing' points to nothing in the schema")


def test_schema_patterns_run_in_re2_so_a_catastrophic_one_returns_fast() -> None:
    # With Python's re, (a+)+$ against "aaa...b" backtracks exponentially (hours at 40 characters).
    evil = "a" * 40 + "b"
    # CPU time, not wall time: on a loaded machine the wall clock also counts other processes' turns.
    started = time.process_time()
    on_value = score("json_schema", {"schema": {"type": "string", "pattern": "(a+)+$"}}, output=json.dumps(evil))
    on_key = score("json_schema", {"schema": {"patternProperties": {"(a+)+$": {"type": "integer"}}}}, output={evil: "x"})
    closed = {"properties": {"id": {}}, "patternProperties": {"(a+)+$": {}}, "additionalProperties": False}
    on_extra = score("json_schema", {"schema": closed}, output={evil: 1, "id": 1, "aaa": 2})
    assert time.process_time() - started < 1.0
    assert on_value.details["errors"] == [{"path": "$", "message": f"{evil!r} does not match '(a+)+$'"}]
    assert on_key.score == 1.0  # the key does not match, so nothing constrains its value
    assert on_extra.details["errors"] == [{"path": "$", "message": f"Additional properties are not allowed ({evil!r} was unexpected)"}]


def test_schema_patterns_keep_their_meaning() -> None:
    schema = {
        "type": "object",
        "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}-\\d+$"}},
        "patternProperties": {"^x-": {"type": "string"}},
        "additionalProperties": False,
    }
    assert score("json_schema", {"schema": schema}, output={"code": "ABC-12", "x-note": "ok"}).score == 1.0
    wrong = score("json_schema", {"schema": schema}, output={"code": "abc-12", "x-note": 3, "other": 1})
    assert [e["path"] for e in wrong.details["errors"]] == ["$", "$.code", "$['x-note']"]


def test_a_schema_pattern_re2_cannot_run_makes_the_suite_invalid() -> None:
    message = args_error("json_schema", {"schema": {"properties": {"a": {"pattern": "(x)\\1"}}}})
    assert "args.schema: pattern '(x)\\\\1': not a valid RE2 pattern (invalid escape sequence: \\1)" in message
    both = {"patternProperties": {"^a": {}}, "unevaluatedProperties": False}
    assert "patternProperties with unevaluatedProperties is not supported" in args_error("json_schema", {"schema": both})


def test_json_schema_args_are_checked() -> None:
    assert args_error("json_schema", {}).endswith("args.schema: Field required")
    assert "args.schema: Input should be a valid dictionary" in args_error("json_schema", {"schema": "object"})
    assert "args.schema: not a valid JSON Schema: 'strng' is not valid under any of the given schemas" in args_error(
        "json_schema", {"schema": {"type": "strng"}}
    )
    assert "is not a JSON Schema dialect this version of jsonschema knows" in args_error(
        "json_schema", {"schema": {"$schema": "https://example.com/my-dialect"}}
    )


# --- paths -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "steps"),
    [("a", ("a",)), ("a.b[0].c", ("a", "b", 0, "c")), ("[1]", (1,)), ("[0][2].x", (0, 2, "x")), ("a-b.c_d", ("a-b", "c_d"))],
)
def test_path_syntax(path: str, steps: tuple) -> None:
    assert parse_path(path) == steps


@pytest.mark.parametrize("path", ["", "a..b", ".a", "a.", "a.[0]", "a[x]", "a[-1]", "a[0", "a]"])
def test_bad_paths_are_refused_at_resolution(path: str) -> None:
    assert "args.path: " in args_error("json_path_equals", {"path": path, "value": 1})
    assert "is not a path like a.b[0].c" in args_error("json_path_equals", {"path": path, "value": 1})


def test_lookup_says_why_a_path_is_not_there() -> None:
    data = {"a": {"b": [1, {"c": 2}]}}
    assert lookup(data, parse_path("a.b[1].c")) == (True, 2, "")
    assert lookup(data, parse_path("a.b[5]")) == (False, None, "$.a.b has 2 elements, no index 5")
    assert lookup(data, parse_path("a.x")) == (False, None, "$.a has no key 'x'")
    assert lookup(data, parse_path("a[0]")) == (False, None, "$.a is not a list")
    assert lookup(data, parse_path("a.b.c")) == (False, None, "$.a.b is not an object")


# --- json_path_equals / json_path_contains ---------------------------------------------------------

OUTPUT = '{"answer": {"city": "Paris", "population": 2100000, "tags": ["capital", "france"], "ok": true}}'


@pytest.mark.parametrize(
    ("path", "value", "equal"),
    [
        ("answer.city", "Paris", True),
        ("answer.city", "paris", False),
        ("answer.population", 2100000.0, True),  # 1 equals 1.0
        ("answer.population", "2100000", False),  # a string constant is not a number
        ("answer.ok", True, True),
        ("answer.ok", 1, False),  # true is not 1
        ("answer.tags", ["capital", "france"], True),
        ("answer.tags[1]", "france", True),
    ],
)
def test_json_path_equals(path: str, value: Any, equal: bool) -> None:
    result = score("json_path_equals", {"path": path, "value": value}, output=OUTPUT)
    assert (result.score, result.details["equal"]) == (float(equal), equal)


def test_json_path_equals_reads_a_per_item_string_as_json_when_the_value_is_not_a_string() -> None:
    args = {"path": "answer.population", "value": {"from": "expected"}}
    assert score("json_path_equals", args, output=OUTPUT, expected="2100000").score == 1.0
    assert score("json_path_equals", {"path": "answer.city", "value": {"from": "expected"}}, output=OUTPUT, expected="Paris").score == 1.0
    tags = {"path": "answer.tags", "value": {"from": "metadata.tags"}}
    assert score("json_path_equals", tags, output=OUTPUT, metadata={"tags": ["capital", "france"]}).score == 1.0
    assert score("json_path_equals", args, output=OUTPUT).status == "skipped"


def test_a_missing_path_or_non_json_output_scores_zero_with_the_reason() -> None:
    missing = score("json_path_equals", {"path": "answer.country", "value": "France"}, output=OUTPUT)
    assert missing == ComponentResult.ok(0.0, {"error": "path answer.country: $.answer has no key 'country'"})
    broken = score("json_path_contains", {"path": "a", "value": "x"}, output="{oops")
    assert broken.score == 0.0 and broken.details["error"].startswith("the output is not valid JSON")


@pytest.mark.parametrize(
    ("path", "value", "holds"),
    [
        ("answer.city", "ari", True),  # substring of a string
        ("answer.city", "Rome", False),
        ("answer.tags", "capital", True),  # element of a list
        ("answer.tags", "cap", False),
        ("answer", "city", True),  # key of an object
        ("answer", "country", False),
    ],
)
def test_json_path_contains(path: str, value: Any, holds: bool) -> None:
    assert score("json_path_contains", {"path": path, "value": value}, output=OUTPUT) == ComponentResult.ok(
        float(holds), {"contains": holds}
    )


def test_json_path_contains_on_a_scalar_scores_zero_with_the_reason() -> None:
    result = score("json_path_contains", {"path": "answer.population", "value": "2"}, output=OUTPUT)
    assert result == ComponentResult.ok(0.0, {"error": "path answer.population: 2100000 is neither a string, a list nor an object"})


def test_a_from_mapping_with_a_typo_is_an_error_not_a_constant() -> None:
    message = args_error("json_path_equals", {"path": "a", "value": {"from": "expectd"}})
    assert "args.value.from: 'from' names one of input, output, expected, context or metadata.KEY" in message
    # A constant object with other keys stays a constant.
    assert score("json_path_equals", {"path": "a", "value": {"from": "x", "to": "y"}}, output='{"a": {"from": "x", "to": "y"}}').score == 1.0
