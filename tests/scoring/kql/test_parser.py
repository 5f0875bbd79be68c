"""parse_query: what it extracts from the grammar's tree, and each normalisation rule."""

from __future__ import annotations

import pytest

from assay.scoring.kql import KqlParseError, QueryStructure, SortKey, parse_query
from assay.scoring.kql.parser import rewrite_count_star


def filters(query: str) -> frozenset[str]:
    return parse_query(query).filters


def same_filters(a: str, b: str) -> bool:
    return filters(f"T | where {a}") == filters(f"T | where {b}")


# --- extraction ------------------------------------------------------------------------------------


def test_full_structure_of_a_typical_query() -> None:
    structure = parse_query(
        'StormEvents | where StartTime > ago(7d) and State == "TEXAS"'
        " | summarize Events = count(), Damage = sum(DamageProperty) by EventType, bin(StartTime, 1d)"
        " | sort by Events desc | take 10 | project EventType, Events"
    )
    assert structure == QueryStructure(
        tables=frozenset({"StormEvents"}),
        filters=frozenset({"StartTime > ago(7d)", 'State == "TEXAS"'}),
        aggregations=frozenset({"count()", "sum(DamageProperty)"}),
        group_by=frozenset({"EventType", "bin(StartTime, 1d)"}),
        sort_keys=(SortKey("count()", "desc"),),
        take=10,
        join_kinds=frozenset(),
        projected_columns=frozenset({"EventType", "count()"}),
        ordered=True,
    )


def test_tables_include_joins_lookups_unions_and_let_bodies_but_not_let_names() -> None:
    structure = parse_query(
        "let Recent = StormEvents | where StartTime > ago(1d);"
        " let Pop = materialize(PopulationData | project State, Population);"
        " Recent"
        " | join kind=leftouter (Pop) on State"
        " | lookup (Regions | project State, Region) on State"
        " | union Archive, (OldStorms | take 5)"
    )
    assert structure.tables == {"StormEvents", "PopulationData", "Regions", "Archive", "OldStorms"}
    assert structure.join_kinds == {"leftouter", "lookup leftouter"}
    assert structure.filters == {"StartTime > ago(1d)"}


def test_union_as_source_and_database_qualified_tables() -> None:
    structure = parse_query('union A, database("db").B, Storm* | where x == 1 | join C on k')
    assert structure.tables == {"A", "B", "Storm*", "C"}
    assert parse_query('let X = cluster("c").database("db").T; X | count').tables == {"T"}
    assert structure.join_kinds == {"innerunique"}  # KQL's default join kind


def test_tables_read_by_subqueries_in_predicates() -> None:
    structure = parse_query("T | where State in (Big | project State) and x > toscalar(U | summarize max(x))")
    assert structure.tables == {"T", "Big", "U"}


def test_function_let_bodies_read_tables_and_the_function_name_is_not_one() -> None:
    structure = parse_query("let f = (n:int) { Logs | where Level > n }; f(3)")
    assert structure.tables == {"Logs"}
    assert structure.filters == {"Level > n"}


def test_group_by_from_summarize_and_distinct() -> None:
    assert parse_query("T | summarize by a, b").group_by == {"a", "b"}
    assert parse_query("T | distinct a, b").group_by == {"a", "b"}
    assert parse_query("T | summarize count() by k = tolower(a)").group_by == {"tolower(a)"}


def test_count_operator_is_count_aggregation() -> None:
    assert parse_query("T | count").aggregations == {"count()"}


def test_sort_keys_default_to_descending_and_keep_their_order() -> None:
    structure = parse_query("T | order by a asc, b, c desc nulls last")
    assert structure.sort_keys == (SortKey("a", "asc"), SortKey("b", "desc"), SortKey("c", "desc"))


def test_top_sets_sort_and_take() -> None:
    structure = parse_query("T | top 3 by x asc")
    assert (structure.sort_keys, structure.take, structure.ordered) == ((SortKey("x", "asc"),), 3, True)


def test_order_counts_only_when_nothing_reorders_after_the_sort() -> None:
    assert parse_query("T | sort by x | take 5 | project x, y | extend z = 1").ordered
    assert not parse_query("T | sort by x | summarize count() by x").ordered
    assert not parse_query("T | summarize count() by x").ordered


def test_main_pipeline_inherits_order_and_size_from_the_let_it_reads() -> None:
    structure = parse_query("let Top = T | top 5 by x; Top")
    assert (structure.sort_keys, structure.take, structure.ordered) == ((SortKey("x", "desc"),), 5, True)


def test_subquery_sort_and_take_do_not_leak_into_the_main_pipeline() -> None:
    structure = parse_query("T | join (U | sort by y | take 1) on k")
    assert (structure.sort_keys, structure.take, structure.ordered) == ((), None, False)


# --- normalisation ---------------------------------------------------------------------------------


def test_quote_style() -> None:
    assert same_filters('s == "a b"', "s == 'a b'")
    assert same_filters('s == "a\\\\b"', "s == @'a\\b'")
    assert same_filters('s == "ab"', "s == 'a' \"b\"")
    assert filters('T | where s == "it\'s"') == {'s == "it\'s"'}


def test_whitespace_and_comments() -> None:
    assert parse_query("T|where a==1|count") == parse_query("T\n | where  a == 1 // note\n | count")


@pytest.mark.parametrize("spelling", ["1d", "24h", "1440m", "86400s", "time(1.00:00:00)", "timespan(1d)"])
def test_timespans_take_one_canonical_unit(spelling: str) -> None:
    assert filters(f"T | where ts > ago({spelling})") == {"ts > ago(1d)"}


def test_timespans_keep_the_largest_exact_unit() -> None:
    assert filters("T | where ts > ago(1.5h)") == {"ts > ago(90m)"}
    assert filters("T | where d < 1500ms") == {"d < 1500ms"}


def test_numbers_compare_by_value() -> None:
    assert same_filters("x > 1", "x > 1.0")
    assert same_filters("x > 1", "x > long(1)")
    assert filters("T | where x > 1.50 and y < -2") == {"x > 1.5", "y < -2"}


def test_datetimes_in_iso_form() -> None:
    assert filters('T | where t > datetime("2007-01-01 00:00")') == {"t > datetime(2007-01-01T00:00:00)"}
    assert same_filters("t > datetime(2007-01-01)", "t > datetime(2007-01-01T00:00:00Z)")


def test_in_is_an_or_of_equalities() -> None:
    assert filters('T | where s in ("a", "b")') == {'s == "a" or s == "b"'}
    assert same_filters('s in ("a", "b")', 's == "b" or "a" == s')
    assert same_filters('s in ("a")', 's == "a"')


def test_negated_and_case_insensitive_in() -> None:
    assert filters('T | where s !in ("a", "b")') == {'s != "a"', 's != "b"'}
    assert same_filters('s in~ ("a", "b")', 's =~ "a" or s =~ "b"')
    assert same_filters('s !in~ ("a", "b")', 's !~ "a" and s !~ "b"')


def test_in_over_a_subquery_or_a_lone_name_is_kept_as_in() -> None:
    assert filters("T | where s in (names)") == {"s in (names)"}
    assert filters("T | where s in (U | project s)") == {"s in (U | project s)"}


def test_between_is_a_pair_of_comparisons() -> None:
    assert filters("T | where x between (1 .. 5)") == {"x >= 1", "x <= 5"}
    assert filters("T | where x !between (1 .. 5)") == {"x < 1 or x > 5"}


def test_operand_order_of_commutative_operators() -> None:
    assert same_filters('"a" == s', 's == "a"')
    assert same_filters("a != b", "b != a")
    assert same_filters('"A" =~ s', 's =~ "A"')
    assert same_filters("a == 1 or b == 2", "b == 2 or a == 1")
    assert same_filters("(a == 1 or b == 2) and c == 3", "c == 3 and (b == 2 or a == 1)")


def test_comparisons_are_mirrored_with_the_constant_on_the_right() -> None:
    assert filters("T | where ago(1h) < ts") == {"ts > ago(1h)"}
    assert same_filters("5 >= x", "x <= 5")


def test_non_commutative_operators_keep_their_order() -> None:
    assert not same_filters('s has "a"', '"a" has s')
    assert not same_filters("a - b > 0", "b - a > 0")


def test_and_chains_split_into_conjuncts_and_flatten() -> None:
    assert filters("T | where a == 1 and (b == 2 and c == 3)") == filters("T | where c == 3 | where b == 2 and a == 1")
    assert same_filters("a == 1 or (b == 2 or c == 3)", "(a == 1 or b == 2) or c == 3")


def test_set_valued_operator_lists_are_sorted() -> None:
    assert same_filters('s has_any ("b", "a")', "s has_any ('a', 'b')")


def test_function_name_case() -> None:
    assert parse_query("T | summarize COUNT() by x") == parse_query("T | summarize count() by x")


def test_keyword_case_is_the_grammar_s_business() -> None:
    # Kusto itself rejects upper-case keywords, so there is nothing to normalise: it does not parse.
    with pytest.raises(KqlParseError):
        parse_query("T | WHERE a == 1")


def test_aggregation_aliases_are_dropped_and_resolved_later() -> None:
    aliased = parse_query("T | summarize N = count(), S = sum(x) by k | where N > 1 | sort by S")
    plain = parse_query("T | summarize count(), sum(x) by k | where count_ > 1 | sort by sum_x")
    assert aliased == plain
    assert aliased.filters == {"count() > 1"}
    assert aliased.sort_keys == (SortKey("sum(x)", "desc"),)


def test_extend_and_rename_aliases_resolve_in_later_filters() -> None:
    assert filters("T | extend t = a + b | where t > 0") == filters("T | where a + b > 0") == {"(a + b) > 0"}
    assert filters("T | project-rename n = name | where n == 'x'") == {'name == "x"'}


def test_scalar_let_is_substituted() -> None:
    assert filters("let limit_ = 10; T | where x > limit_") == {"x > 10"}


def test_group_key_default_name_is_the_binned_column() -> None:
    structure = parse_query("T | summarize count() by bin(ts, 1h) | sort by ts asc")
    assert structure.sort_keys == (SortKey("bin(ts, 1h)", "asc"),)


def test_join_kind_aliases() -> None:
    assert parse_query("T | join kind=anti (U) on k").join_kinds == {"leftanti"}
    assert parse_query("T | join kind = leftouter U on k").join_kinds == {"leftouter"}


# --- count(*), errors, cache -------------------------------------------------------------------------


def test_count_star_is_count() -> None:
    assert parse_query("T | summarize count(*) by x") == parse_query("T | summarize count() by x")
    assert parse_query("T | summarize Count(  *  )") == parse_query("T | summarize count()")


def test_count_star_rewrite_leaves_strings_and_comments_alone() -> None:
    text = 'T | where s == "count(*)" // count(*)\n| summarize count(*)'
    assert rewrite_count_star(text) == 'T | where s == "count(*)" // count(*)\n| summarize count()'


def test_a_parse_error_carries_the_parser_message() -> None:
    with pytest.raises(KqlParseError) as caught:
        parse_query("T | where")
    assert caught.value.message.startswith("could not parse KQL at 1:")


def test_control_commands_and_empty_text_are_not_queries() -> None:
    with pytest.raises(KqlParseError, match="control command"):
        parse_query(".show tables")
    with pytest.raises(KqlParseError):
        parse_query("let x = 1;")


def test_each_distinct_query_is_parsed_once() -> None:
    text = "CacheProbe | where a == 1"
    assert parse_query(text) is parse_query(text)
    with pytest.raises(KqlParseError) as first:
        parse_query("CacheProbe |")
    with pytest.raises(KqlParseError) as second:
        parse_query("CacheProbe |")
    assert first.value is second.value
