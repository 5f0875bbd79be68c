"""Issue 19.6: requirements come from the reference code's AST as classes of operation on columns
(equivalent spellings count the same); the question is read conservatively, and only for what the
reference cannot show or when there is no reference. Coverage is measured from the candidate's own
code: a matching result alone grants nothing."""

from __future__ import annotations

import pytest

from assay.scoring.kinds.pandas_codegen import (
    PandasItem,
    prompt_understanding,
    requirement_coverage,
)
from assay.scoring.pandas.question import analyse_question
from tests.scoring.pandas.scoring import CTX, score_item
from tests.scoring.pandas.validity_cases import DESK, SHOP, SINGLE

SHOP_COLUMNS = sorted({k for table in SHOP.values() for row in table for k in row})


def structure(question, reference, code, frames, **fields):
    item = PandasItem.model_validate({"question": question, "frames": frames, "generated_code": code,
                                      **({"reference_code": reference} if reference else {}), **fields})
    return prompt_understanding()(item, CTX), requirement_coverage()(item, CTX)


@pytest.mark.parametrize(
    ("question", "reference", "candidate", "frames"),
    [
        # "at least one" is neither a bottom-1 ranking nor a minimum; a merge is a semi-join like isin
        ("Which customers have at least one order? Give their names.",
         "result = customers[customers['customer_id'].isin(orders['customer_id'])]['name']",
         "result = customers.merge(orders, on='customer_id')['name'].drop_duplicates()", SHOP),
        # "(all statuses)" is no filter on status; "order" is a noun, not a sort
        ("What is the total order amount per country (all statuses)?",
         "result = orders.merge(customers, on='customer_id').groupby('country')['amount'].sum()",
         "country = customers.set_index('customer_id')['country']\nresult = orders.groupby(orders['customer_id'].map(country))['amount'].sum()",
         SHOP),
        # two comparisons on one column are one filter on it; between() is the same filter
        ("How many tickets were opened in March 2024?",
         "opened = pd.to_datetime(df['opened'])\nresult = int(((opened >= '2024-03-01') & (opened < '2024-04-01')).sum())",
         "result = int(df['opened'].between('2024-03-01', '2024-03-31').sum())", DESK),
        ("Which employees were hired after 2019-12-31 and before 2021-01-01?",
         "result = df[(df['hire_date'] > '2019-12-31') & (df['hire_date'] < '2021-01-01')]",
         "result = df[df.hire_date.between('2020-01-01', '2020-12-31')]", SINGLE),
        # a comparison summed per group is the filter; a derived key groups by its source column
        ("For each team, how many tickets have a satisfaction score of at least 4?",
         "result = df[df['satisfaction'] >= 4].groupby('team').size()",
         "result = (df['satisfaction'] >= 4).groupby(df['team']).sum()", DESK),
        ("What is the average salary per hire year?",
         "result = df.groupby(pd.to_datetime(df['hire_date']).dt.year)['salary'].mean()",
         "result = df.assign(year=df['hire_date'].str[:4].astype(int)).groupby('year')['salary'].mean()", SINGLE),
        # a group's row picked by label is the filter on the key; idxmin() in loc[] is a lookup
        ("What is the average resolution time in hours for high priority tickets only?",
         "result = df[df['priority'] == 'high']['hours'].mean()",
         "result = df.groupby('priority')['hours'].mean()['high']", DESK),
        ("What is the name of the youngest employee?",
         "result = df.loc[df['age'].idxmin(), 'name']",
         "result = df.sort_values('age').iloc[0]['name']", SINGLE),
    ],
)
def test_equivalent_spellings_meet_the_references_requirements(question, reference, candidate, frames):
    understanding, coverage = structure(question, reference, candidate, frames)
    assert understanding.score == pytest.approx(1.0), understanding.details
    assert coverage.score == pytest.approx(1.0), coverage.details
    assert coverage.details["requirements_source"] == "reference_code"


def test_each_of_two_ored_filters_is_a_requirement():
    question = "Which tickets are urgent or have been escalated?"
    reference = "result = df[(df['priority'] == 'urgent') | (df['status'] == 'escalated')]"
    _, both = structure(question, reference, "result = df.query(\"priority == 'urgent' or status == 'escalated'\")", DESK)
    assert both.score == pytest.approx(1.0) and both.details["required"]["filter_columns"] == ["priority", "status"]
    _, one = structure(question, reference, "result = df[df['priority'] == 'urgent']", DESK)
    assert one.details["filter_conditions_coverage"] == pytest.approx(0.5)
    assert one.details["missing_requirements"] == ["Filter condition(s) missing: on status"]


def test_what_the_reference_does_is_required_of_the_candidate():
    question = "What is the total amount per channel?"
    reference = "result = orders[orders['status'] != 'cancelled'].groupby('channel')['amount'].sum()"
    understanding, coverage = structure(question, reference, "result = orders.groupby('channel')['amount'].mean()", SHOP)
    assert understanding.details["missing_statistical_operations"] == ["sum"]
    assert understanding.details["missing_columns"] == ["status"]
    assert "Filter condition(s) missing: on status" in coverage.details["missing_requirements"]


def test_a_matching_result_alone_grants_no_coverage():
    raw = {"question": "How many orders were cancelled?", "frames": SHOP, "generated_code": "result = 3", "expected_result": 3}
    scored = score_item(raw)
    assert scored.score("correctness") == 1.0
    assert scored.score("prompt_understanding") == 0.0 and scored.score("requirement_coverage") == 0.0
    assert not scored.passed
    copied = score_item({**raw, "reference_code": "result = int((orders['status'] == 'cancelled').sum())"})
    assert copied.score("requirement_coverage") == 0.0 and not copied.passed


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("Which customers have at least one order?", {"bottom_n": [], "stats": [], "sort": False}),
        ("Which teams closed at most 5 tickets?", {"top_n": [], "stats": [], "sort": False}),
        ("What is the total order amount per country (all statuses)?", {"mentioned": ["amount", "country"], "sort": False}),
        ("What is the total order amount per channel, whatever the status?", {"mentioned": ["amount", "channel"], "sort": False}),
        ("List the distinct customer tiers in alphabetical order.", {"order": True, "sort": True}),
        ("List the gold customers' names, newest sign-up first.", {"order": True}),
        ("Give the top 3 orders by amount.", {"top_n": [3], "sort": True, "order": False}),
        ("Which order has the highest amount?", {"stats": ["max"], "sort": False}),
        ("Match each order with its customer's country.", {"join": False}),
        ("Join orders to customers and give each order's country.", {"join": True}),
    ],
)
def test_the_question_is_read_conservatively(question, expected):
    facts = analyse_question(question, SHOP_COLUMNS)
    read = {"bottom_n": facts.bottom_n, "top_n": facts.top_n, "stats": facts.stat_operations, "sort": facts.wants_sort,
            "mentioned": facts.mentioned_columns, "order": facts.asks_order, "join": facts.wants_join}
    assert {k: read[k] for k in expected} == expected


def test_without_reference_the_conservative_reading_gives_the_requirements():
    question = "What is the total order amount per country (all statuses)?"
    code = "result = orders.merge(customers, on='customer_id').groupby('country')['amount'].sum()"
    understanding, coverage = structure(question, None, code, SHOP, expected_result=[1])
    assert understanding.score == pytest.approx(1.0) and coverage.score == pytest.approx(1.0), (understanding.details, coverage.details)
    assert coverage.details["requirements_source"] == "question"
    assert coverage.details["required"]["groupby_columns"] == ["country"] and coverage.details["required"]["sort"] is False


@pytest.mark.parametrize(
    "candidate",
    [
        "result = df.groupby('agent').size().nlargest(2)",
        "result = df.groupby('agent').size().sort_values(ascending=False).head(2)",
        "result = df['agent'].value_counts()[:2]",
    ],
)
def test_a_ranking_is_the_same_requirement_whatever_its_spelling(candidate):
    question = "Which 2 agents handled the most tickets, and how many?"
    understanding, _ = structure(question, "result = df['agent'].value_counts().head(2)", candidate, DESK)
    assert understanding.details["nl_patterns"] == [
        {"pattern": "top 2", "expects": "nlargest / sort descending + head", "satisfied": 1.0}], understanding.details
    assert understanding.score == pytest.approx(1.0)
    understanding, _ = structure(question, "result = df['agent'].value_counts().head(2)", "result = df.groupby('agent').size()", DESK)
    assert understanding.details["nl_patterns"][0]["satisfied"] == 0.0
