"""Reading the question (text) and the code (AST): what counts and what never does."""

from __future__ import annotations

from assay.scoring.pandas.code import analyse_code
from assay.scoring.pandas.question import analyse_question

COLUMNS = {"name", "department", "salary", "age", "city", "hire_date", "total_sales"}
FRAMES = {"df", "dfs"}


def code(text: str):
    return analyse_code(text, COLUMNS, FRAMES)


def test_columns_in_every_reference_style():
    assert code("result = df['salary'].mean()").columns == ["salary"]
    assert code("result = df.salary.mean()").columns == ["salary"]
    assert set(code("result = df[['name', 'age']]").columns) == {"name", "age"}
    assert code("result = df.groupby('city').size()").columns == ["city"]
    assert set(code("result = df.query('age > 30 and `hire_date` > \"2020\"')").columns) == {"age", "hire_date"}
    assert set(code("result = df.loc[df.age > 3, 'name']").columns) == {"age", "name"}
    assert set(code("result = df.merge(df, on='city')").columns) == {"city"}
    assert set(code("result = df.groupby('city').agg(avg=('salary', 'mean'))").columns) == {"city", "salary"}
    assert set(code("col = 'salary'\nresult = df[col].sum()").columns) == {"salary"}
    assert set(code("result = df.pivot_table(index='city', values='age', aggfunc='mean')").columns) == {"city", "age"}


def test_comments_strings_and_dead_code_never_count():
    stuffed = code("# salary age city groupby mean\n'''salary department'''\nprint('salary')\nresult = 0")
    assert stuffed.columns == [] and not stuffed.uses_data and not stuffed.conditions
    dead = code("df.groupby('city')['salary'].mean()\nx = df.query('age > 3')\nresult = 0")
    assert dead.columns == [] and dead.groupby_columns == [] and dead.conditions == 0
    assert dead.dead_lines == [1, 2] and dead.relevant_statements == 1
    # A value compared against is not a column, even when it looks like one.
    assert code("result = df[df.city.str.contains('salary')]").columns == ["city"]


def test_backward_slice_follows_assignments_mutations_and_functions():
    facts = code(
        "rows = []\nfor _, r in df.iterrows():\n    if r['age'] > 30:\n        rows.append(r['name'])\n"
        "def top(d):\n    return d.nlargest(2, 'salary')\nresult = (rows, top(df))"
    )
    assert {"age", "name", "salary"} <= set(facts.columns) and facts.dead_lines == []
    assert code("df.dropna(inplace=True)\nresult = df['city'].nunique()").relevant_statements == 2
    # Without `result`, the last expression is the answer.
    assert code("x = df.salary\nx.mean()").columns == ["salary"]


def test_operations_conditions_groupby_sort_join():
    facts = code("result = df[(df.age > 30) & (df.salary.between(1, 9))].groupby(['city', 'department']).salary.agg(['mean', 'max'])")
    assert {"mean", "max", "groupby", "between"} <= facts.operations
    assert facts.conditions == 2 and facts.filters
    assert facts.groupby_columns == ["city", "department"]
    assert code("result = df.query('age > 3 and salary < 9 or city == \"x\"')").conditions == 3
    ranked = code("result = df.sort_values('salary', ascending=False).head(3)")
    assert ranked.sort_calls == {"sort_values"} and ranked.sort_descending == {True} and ("head", 3) in ranked.limits
    joined = code("result = df.merge(df, left_on='city', right_on='city')")
    assert joined.joins == {"merge"} and joined.join_keys == ["city"]
    assert code("result = df['city'].value_counts()").groupby_columns == ["city"]


def test_code_that_does_not_parse():
    facts = code("result = df[")
    assert not facts.parsed and "SyntaxError" in facts.syntax_error


def test_question_mentions_keywords_and_masks_column_names():
    q = analyse_question("What is the total sales per city for employees older than 30, sorted by name?", sorted(COLUMNS))
    assert q.mentioned_columns == ["total_sales", "city", "name"]
    assert "sum" not in q.stat_operations  # "total" belongs to the column total_sales
    assert q.groupby_columns == ["city"] and "groupby" in q.stat_operations
    assert q.filter_conditions == 1 and q.wants_sort and q.asks_order
    top = analyse_question("Show the top five employees by salary", sorted(COLUMNS))
    assert top.top_n == [5] and not top.asks_order and "max" not in top.stat_operations
    two = analyse_question("Average salary by department and city where age is above 30 and salary below 100", sorted(COLUMNS))
    # Filter phrases say that the answer is filtered, not how many conditions it has (issue 19.6): the
    # conditions themselves come from reference code when there is one.
    assert two.groupby_columns == ["department", "city"] and two.filter_conditions == 1 and "mean" in two.stat_operations
    plural = analyse_question("How many distinct cities are there?", sorted(COLUMNS))
    assert plural.mentioned_columns == ["city"] and {"count", "nunique"} <= set(plural.stat_operations)
    assert analyse_question("When were people hired? Use the hire date.", sorted(COLUMNS)).mentioned_columns == ["hire_date"]
    joined = analyse_question("Join the tables on city and count rows", sorted(COLUMNS))
    assert joined.wants_join and joined.join_keys == ["city"]
