import pytest

from assay.scoring.errors import CriteriaError
from assay.scoring.suites.envsubst import substitute, substitute_tree


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        ("${A}", {"A": "x"}, "x"),
        ("pre-${A}-post", {"A": "x"}, "pre-x-post"),
        ("${A:-dflt}", {}, "dflt"),
        ("${A:-dflt}", {"A": "set"}, "set"),
        ("${A:-dflt}", {"A": ""}, "dflt"),  # empty takes the default, as in the shell
        ("${A:-}", {}, ""),
        ("${A:-${B:-c}}", {}, "c"),
        ("${A:-${B:-c}}", {"B": "b"}, "b"),
        ("${A:-${B:-c}}", {"A": "a", "B": "b"}, "a"),
        ("${A:-${B:-${C:-deep}}}", {}, "deep"),
        ("${A:-has } brace}", {}, "has  brace}"),
        ("cost $$5", {}, "cost $5"),
        ("no variables", {}, "no variables"),
        ("${A:-x}${B:-y}", {}, "xy"),
    ],
)
def test_substitution(text, env, expected):
    assert substitute(text, env) == expected


def test_unset_bare_variable_is_an_error_naming_it():
    with pytest.raises(CriteriaError) as err:
        substitute("${SCORING_PROVIDER_KEY}", {}, where="judge.model")
    assert "SCORING_PROVIDER_KEY" in err.value.message
    assert "judge.model" in err.value.message
    assert err.value.details == {"variable": "SCORING_PROVIDER_KEY"}


def test_nested_default_with_unset_bare_inner_is_an_error():
    with pytest.raises(CriteriaError, match="INNER"):
        substitute("${OUTER:-${INNER}}", {})


@pytest.mark.parametrize("text", ["${A", "${A:-x", "${}", "${1A}", "${A-x}"])
def test_malformed_references_are_errors(text):
    with pytest.raises(CriteriaError):
        substitute(text, {"A": "1"})


def test_tree_substitutes_strings_only_and_keeps_keys():
    tree = {"${K}": "${A:-1}", "n": 3, "list": ["${B:-b}", True]}
    assert substitute_tree(tree, {}) == {"${K}": "1", "n": 3, "list": ["b", True]}
