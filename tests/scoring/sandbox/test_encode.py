"""How array-like answers cross the sandbox boundary (issue 19.7): each is a table the comparison can
read, with its order kept (or, for a set, marked as having none); what is not a value is refused
with a message that says what to do."""

from __future__ import annotations

import pytest

RUNS = {
    # unique() of a string column is an ArrowStringArray under pandas 3
    "string unique()": ("result = employees['dept'].unique()", "sequence", ["value"], [["eng"], ["ops"]]),
    "categorical unique()": ("result = employees['dept'].astype('category').unique()", "sequence", ["value"], [["eng"], ["ops"]]),
    "nullable integers": ("result = employees['salary'].astype('Int64').unique()", "sequence", ["value"], [[100], [80], [60]]),
    "datetimes": ("result = pd.to_datetime(pd.Series(['2024-01-02', '2024-01-02'])).unique()", "sequence", ["value"],
                  [[{"$ts": "2024-01-02T00:00:00"}]]),
    "numpy array": ("result = employees['salary'].to_numpy()", "sequence", ["value"], [[100], [80], [60]]),
    "index": ("result = employees.groupby('dept')['salary'].sum().index", "sequence", ["dept"], [["eng"], ["ops"]]),
    "multiindex": ("result = employees.set_index(['dept', 'name']).index", "sequence", ["dept", "name"],
                   [["eng", "ann"], ["eng", "bob"], ["ops", "cid"]]),
    "list": ("result = employees['name'].tolist()", "sequence", ["value"], [["ann"], ["bob"], ["cid"]]),
    "tuple": ("result = tuple(employees['salary'])", "sequence", ["value"], [[100], [80], [60]]),
    "list of pairs": ("result = list(zip(employees['name'], employees['salary']))", "sequence", ["0", "1"],
                      [["ann", 100], ["bob", 80], ["cid", 60]]),
    "set": ("result = set(employees['dept'])", "set", ["value"], [["eng"], ["ops"]]),
    "dict with integer keys": ("result = {1: 'a', 2: 'b'}", "mapping", ["key", "value"], [[1, "a"], [2, "b"]]),
    "per-group unique()": ("result = employees.groupby('dept')['name'].unique()", "series", ["dept", "name"],
                           [["eng", {"$seq": ["ann", "bob"]}], ["ops", {"$seq": ["cid"]}]]),
}


@pytest.mark.parametrize("name", list(RUNS))
def test_array_like_answers_cross_the_boundary(sandbox, employees, name):
    code, kind, columns, rows = RUNS[name]
    outcome = sandbox.run(code, dataset=employees)
    assert outcome.ok, outcome.error
    assert outcome.result["kind"] == kind
    assert outcome.result["columns"] == columns
    assert outcome.result["rows"] == rows
    assert outcome.result.get("ordered", True) is (kind != "set")


def test_a_string_unique_keeps_its_dtype(sandbox, employees):
    outcome = sandbox.run("result = employees['dept'].unique()", dataset=employees)
    assert outcome.result["dtypes"] == ["str"] and outcome.result["type"].endswith("ArrowStringArray")


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("result = (x for x in range(3))", "not a table, series, array, list, tuple, set, dict or scalar"),
        ("result = employees.groupby('dept')", "aggregate it"),
        ("result = np.zeros((2, 2, 2))", "3-dimensional array is not a table"),
    ],
)
def test_what_is_not_a_value_is_refused_clearly(sandbox, employees, code, message):
    outcome = sandbox.run(code, dataset=employees)
    assert not outcome.ok and outcome.error["category"] == "unsupported_result"
    assert message in outcome.error["message"]
