"""The metric registry: registration, lookup, rebuilding from a stored spec, per-item arguments."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from assay.scoring.errors import CriteriaError
from assay.scoring.metrics import registry
from assay.scoring.metrics.catalog import build_metric, check_component_metric, registered_metrics
from assay.scoring.metrics.registry import (
    ComponentResult,
    ItemRef,
    MissingItemValue,
    PluginRef,
    register_metric,
    resolve_arg,
)
from tests.scoring.metrics.library_items import CTX, Item

LIBRARY = {
    "exact_match", "contains", "not_contains", "contains_all", "contains_any", "regex_match", "starts_with",
    "is_json", "json_schema", "json_path_equals", "json_path_contains", "numeric_close",
    "length_chars", "length_words", "levenshtein_ratio", "bleu", "chrf", "rouge_l", "list_f1",
}  # fmt: skip


@pytest.fixture
def scratch_registry(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Registrations made in a test disappear after it."""
    registered_metrics()  # load the real metrics first, so the copy has them
    copy = dict(registry._REGISTRY)
    monkeypatch.setattr(registry, "_REGISTRY", copy)
    return copy


class GreetArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    word: str | ItemRef = "hello"


def greet_factory(args: GreetArgs) -> Any:
    def score(item: Any, ctx: Any) -> ComponentResult:
        return ComponentResult.ok(1.0 if resolve_arg(args.word, item) in item.output else 0.0)

    return score


PLUGIN = PluginRef(distribution="assay-greet", version="1.2.0")


def test_library_metrics_are_registered_for_the_generic_kind_with_an_args_model() -> None:
    known = registered_metrics()
    assert LIBRARY <= set(known)
    for name in LIBRARY:
        info = known[name]
        assert (info.version, info.kinds, info.plugin) == (1, frozenset({"generic"}), None), name
        assert info.args_model is not None and info.args_model.model_config.get("extra") == "forbid", name


def test_kind_metrics_keep_keyword_factories() -> None:
    info = registered_metrics()["kql.results_match"]
    assert (info.version, info.kinds, info.args_model, info.plugin) == (3, frozenset({"kql"}), None, None)
    assert callable(build_metric("kql.results_match", 3, {"mode": "f1"}, "kql"))
    with pytest.raises(CriteriaError, match="bad arguments for metric 'kql.results_match'"):
        build_metric("kql.results_match", 3, {"nope": 1}, "kql")
    with pytest.raises(CriteriaError, match="component 'results': bad arguments"):
        check_component_metric("results", "kql.results_match", 3, {"nope": 1}, "kql")


def test_unknown_metric_wrong_version_and_wrong_kind_are_criteria_errors() -> None:
    with pytest.raises(CriteriaError, match="component 'c': unknown metric 'no_such_metric'; known: .*exact_match"):
        check_component_metric("c", "no_such_metric", 1, {}, "generic")
    with pytest.raises(CriteriaError, match="'exact_match' is at version 1 in this code but the criteria ask for version 2"):
        build_metric("exact_match", 2, {}, "generic")
    with pytest.raises(CriteriaError, match="'exact_match' does not score items of kind 'kql'; it scores generic"):
        check_component_metric("c", "exact_match", 1, {}, "kql")
    with pytest.raises(CriteriaError, match="args must be a mapping, got list"):
        build_metric("exact_match", 1, [], "generic")  # type: ignore[arg-type]


def test_args_errors_name_the_component_and_the_field() -> None:
    with pytest.raises(CriteriaError) as caught:
        check_component_metric("exact", "exact_match", 1, {"case_sensitive": "maybe", "typo": 1}, "generic")
    message = caught.value.message
    assert message.startswith("component 'exact': metric 'exact_match': ")
    assert "args.case_sensitive: Input should be a valid boolean" in message
    assert "args.typo: Extra inputs are not permitted" in message


def test_register_metric_refuses_a_taken_name_and_bad_settings(scratch_registry: dict[str, Any]) -> None:
    register_metric("greet", version=1, kinds=("generic",), factory=greet_factory, args_model=GreetArgs, plugin=PLUGIN)
    # The same registration again (a module imported twice) is a no-op.
    register_metric("greet", version=1, kinds=("generic",), factory=greet_factory, args_model=GreetArgs, plugin=PLUGIN)
    with pytest.raises(RuntimeError, match="'greet' is registered twice .*plug-in assay-greet==1.2.0"):
        register_metric("greet", version=2, kinds=("generic",), factory=greet_factory, args_model=GreetArgs)
    with pytest.raises(RuntimeError, match="'exact_match' is registered twice .*by Assay"):
        register_metric("exact_match", version=1, kinds=("generic",), factory=greet_factory, plugin=PLUGIN)
    with pytest.raises(ValueError, match="version is an integer >= 1"):
        register_metric("other", version=0, kinds=("generic",), factory=greet_factory)
    with pytest.raises(ValueError, match="at least one kind"):
        register_metric("other", version=1, kinds=(), factory=greet_factory)
    with pytest.raises(ValueError, match="args_model must be a pydantic model class"):
        register_metric("other", version=1, kinds=("generic",), factory=greet_factory, args_model=dict)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-empty string"):
        register_metric(" other", version=1, kinds=("generic",), factory=greet_factory)
    assert "other" not in registered_metrics()


def test_a_plugin_metric_is_rebuilt_only_from_the_same_plugin_version(scratch_registry: dict[str, Any]) -> None:
    register_metric("greet", version=1, kinds=("generic",), factory=greet_factory, args_model=GreetArgs, plugin=PLUGIN)
    assert registered_metrics()["greet"].plugin == PLUGIN
    assert check_component_metric("c", "greet", 1, {"word": "hi"}, "generic") == PLUGIN
    metric = build_metric("greet", 1, {"word": "hi"}, "generic", plugin=PLUGIN)
    assert metric(Item(output="hi there"), CTX) == ComponentResult.ok(1.0)

    other = PluginRef(distribution="assay-greet", version="1.3.0")
    with pytest.raises(CriteriaError, match=r"comes from plug-in assay-greet==1.3.0 in the criteria but from plug-in assay-greet==1.2.0 here"):
        build_metric("greet", 1, {}, "generic", plugin=other)
    with pytest.raises(CriteriaError, match="comes from Assay itself in the criteria but from plug-in assay-greet==1.2.0 here"):
        build_metric("greet", 1, {}, "generic")
    with pytest.raises(CriteriaError, match="comes from plug-in assay-greet==1.2.0 in the criteria but from Assay itself here"):
        build_metric("exact_match", 1, {}, "generic", plugin=PLUGIN)
    with pytest.raises(CriteriaError, match=r"unknown metric 'missing' \(it comes from plug-in assay-greet==1.2.0, which is not installed here\)"):
        build_metric("missing", 1, {}, "generic", plugin=PLUGIN)


def test_plugin_ref_is_strict() -> None:
    with pytest.raises(ValidationError):
        PluginRef.model_validate({"distribution": "x", "version": "1", "extra": 1})
    with pytest.raises(ValidationError):
        PluginRef.model_validate({"distribution": "", "version": "1"})


# --- ItemRef ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["input", "output", "expected", "context", "metadata.k", "metadata.a.b"])
def test_item_ref_names_an_item_field(source: str) -> None:
    ref = ItemRef.model_validate({"from": source})
    assert ref.from_ == source and str(ref) == source


@pytest.mark.parametrize("bad", [{"from": "metadata."}, {"from": "id"}, {"from": "Expected"}, {"from": "expected", "x": 1}, {}])
def test_item_ref_refuses_anything_else(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ItemRef.model_validate(bad)


def test_resolve_arg_reads_the_item_or_passes_a_constant_through() -> None:
    item = Item(output={"a": 1}, expected="42", context=["p1", "p2"], metadata={"lang": "en", "n": 0})
    assert resolve_arg("constant", item) == "constant"
    assert resolve_arg({"from": "expected"}, item) == {"from": "expected"}  # only a validated ItemRef is resolved
    assert resolve_arg(ItemRef.model_validate({"from": "expected"}), item) == "42"
    assert resolve_arg(ItemRef.model_validate({"from": "output"}), item) == {"a": 1}
    assert resolve_arg(ItemRef.model_validate({"from": "context"}), item) == ["p1", "p2"]
    assert resolve_arg(ItemRef.model_validate({"from": "metadata.n"}), item) == 0  # a falsy value is a value
    with pytest.raises(MissingItemValue, match="the item has no metadata.other"):
        resolve_arg(ItemRef.model_validate({"from": "metadata.other"}), item)
    with pytest.raises(MissingItemValue, match="the item has no metadata.lang"):
        resolve_arg(ItemRef.model_validate({"from": "metadata.lang"}), Item())
    with pytest.raises(MissingItemValue, match="the item has no expected"):
        resolve_arg(ItemRef.model_validate({"from": "expected"}), Item())


def test_a_missing_per_item_value_skips_the_component_with_the_reason() -> None:
    metric = build_metric("contains", 1, {"value": {"from": "metadata.keyword"}}, "generic")
    assert metric(Item(output="abc", metadata={"keyword": "b"}), CTX) == ComponentResult.ok(1.0, {"found": True})
    result = metric(Item(output="abc"), CTX)
    assert (result.status, result.reason) == ("skipped", "the item has no metadata.keyword")


def test_an_unusable_per_item_value_fails_the_component_with_the_reason() -> None:
    metric = build_metric("contains_all", 1, {"values": {"from": "metadata.words"}}, "generic")
    result = metric(Item(output="abc", metadata={"words": "a"}), CTX)
    assert result.status == "failed"
    assert result.reason == 'metadata.words must be a non-empty list of non-empty strings, got a'
