"""The comparison rules (assay.scoring.pandas.compare), on canonical tables."""

from __future__ import annotations

import pytest

from assay.scoring.pandas.compare import CTable, Tolerance, compare, from_encoded, from_expected


def enc(columns, rows, index_columns=0):
    return from_encoded({"columns": columns, "rows": rows, "index_columns": index_columns})


def test_scalar_equals_a_one_by_one_frame_and_a_one_element_series():
    expected = from_expected(90.8)
    assert compare(expected, enc(["value"], [[90.8]]), ordered=False)[0] == 1.0
    assert compare(expected, enc(["salary"], [[90.8]]), ordered=False)[0] == 1.0
    # df[['salary']].mean(): a Series labelled by the column name; the label is dropped when the
    # expected answer has none.
    score, details = compare(expected, enc(["index", "value"], [["salary", 90.8]], index_columns=1), ordered=False)
    assert score == 1.0 and details["reading"] == "generated index dropped"


def test_numbers_within_tolerance_and_integers_equal_floats():
    assert compare(from_expected([1, 2]), enc(["value"], [[1.0000000001], [2.0]]), ordered=False)[0] == 1.0
    assert compare(from_expected(0.3), enc(["value"], [[0.1 + 0.2]]), ordered=False)[0] == 1.0
    assert compare(from_expected(1.0), enc(["value"], [[1.001]]), ordered=False)[0] == 0.0
    loose = Tolerance(rel_tol=0.01)
    assert compare(from_expected(1.0), enc(["value"], [[1.001]]), ordered=False, tol=loose)[0] == 1.0
    assert compare(from_expected(True), enc(["value"], [[1]]), ordered=False)[0] == 1.0


def test_nulls_are_one_null_and_instants_compare_as_instants():
    expected = from_expected([{"a": None, "t": "2024-01-02"}, {"a": 1.5, "t": "2024-01-03T00:00:00Z"}])
    generated = enc(["a", "t"], [[None, {"$ts": "2024-01-02T00:00:00"}], [1.5, {"$ts": "2024-01-03T01:00:00+01:00"}]])
    assert compare(expected, generated, ordered=False)[0] == 1.0


def test_groupby_keys_are_columns_and_aliases_match_by_values():
    expected = enc(["department", "salary"], [["Eng", 90.8], ["HR", 63.5]], index_columns=1)
    alias = enc(["department", "avg_salary"], [["HR", 63.5], ["Eng", 90.8]])
    score, details = compare(expected, alias, ordered=False)
    assert score == 1.0
    assert details["column_mapping"] == {"department": "department", "salary": "avg_salary"}
    assert details["matched_by_values"] == ["salary"]
    renamed = enc(["dept", "mean"], [["Eng", 90.8], ["HR", 63.5]])
    assert compare(expected, renamed, ordered=False)[0] == 1.0


def test_rows_are_a_bag_unless_order_is_asked_for():
    expected = enc(["name", "salary"], [["Hal", 120], ["Ada", 98], ["Eve", 95]])
    shuffled = enc(["name", "salary"], [["Eve", 95], ["Hal", 120], ["Ada", 98]])
    assert compare(expected, shuffled, ordered=False)[0] == 1.0
    score, details = compare(expected, shuffled, ordered=True)
    assert score == pytest.approx(0.4) and details["order_ok"] is False


def test_ties_may_come_in_any_order_when_sorted_by_a_key():
    expected = enc(["name", "n"], [["a", 3], ["b", 2], ["c", 2], ["d", 1]])
    tie_swapped = enc(["name", "n"], [["a", 3], ["c", 2], ["b", 2], ["d", 1]])
    assert compare(expected, tie_swapped, ordered=True)[0] == 1.0


def test_partial_answers_score_below_the_cap_and_wrong_ones_zero():
    expected = enc(["name", "salary"], [["Hal", 120], ["Ada", 98], ["Eve", 95]])
    two_of_three = enc(["name", "salary"], [["Hal", 120], ["Ada", 98]])
    score, details = compare(expected, two_of_three, ordered=False)
    assert 0 < score <= 0.4 and details["rows_matched"] == 2
    names_only = enc(["name"], [["Hal"], ["Ada"], ["Eve"]])
    score, details = compare(expected, names_only, ordered=False)
    assert score == pytest.approx(0.2) and details["missing_columns"] == ["salary"]
    assert compare(expected, enc(["x"], [[1], [2], [3]]), ordered=False)[0] == 0.0


def test_extra_columns_cost_a_little():
    expected = enc(["name"], [["Hal"], ["Ada"]])
    extra = enc(["name", "salary"], [["Hal", 120], ["Ada", 98]])
    score, details = compare(expected, extra, ordered=False)
    assert score == pytest.approx(0.9) and details["extra_columns"] == ["salary"]


def test_expected_result_shapes():
    assert from_expected(5).columns == ["value"]
    assert from_expected([1, 2]).rows == [(1.0,), (2.0,)]
    table = from_expected({"columns": ["a", "b"], "data": [[1, "x"]]})
    assert table.columns == ["a", "b"] and table.rows == [(1.0, "x")]
    records = from_expected([{"a": 1}, {"a": 2, "b": 3}])
    assert records.columns == ["a", "b"] and records.rows == [(1.0, None), (2.0, 3.0)]


def test_empty_results_match_empty_results():
    assert compare(CTable(["a"], []), enc(["a"], []), ordered=False)[0] == 1.0
    assert compare(CTable(["a"], []), enc(["a"], [[1]]), ordered=False)[0] == 0.0


def test_a_set_has_no_order_to_agree_with():
    expected = enc(["value"], [["bronze"], ["gold"], ["silver"]])
    as_set = from_encoded({"columns": ["value"], "rows": [["bronze"], ["gold"], ["silver"]], "ordered": False})
    assert compare(expected, as_set, ordered=False)[0] == 1.0
    score, details = compare(expected, as_set, ordered=True)  # sorted by chance of the encoding, not by the answer
    assert score == pytest.approx(0.4) and details["order_ok"] is False and "set" in details["order_note"]
    one = from_encoded({"columns": ["value"], "rows": [["gold"]], "ordered": False})
    assert compare(enc(["value"], [["gold"]]), one, ordered=True)[0] == 1.0  # one member: no order to get wrong
