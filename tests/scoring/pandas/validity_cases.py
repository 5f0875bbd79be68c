"""Cases with known truth for the pandas_codegen suite: a question, reference code, correct answers
in several styles, and wrong answers (always including the keyword-stuffed ``result = 0`` and
dead code that mentions everything the question asks for).

The data is built so that each wrong answer really is wrong (no ties where an order is asked for,
people on the boundaries of ranges, a highest single salary outside the best-paid department).
"""

from __future__ import annotations

from dataclasses import dataclass, field

EMPLOYEES = [
    {"id": 1, "name": "Ada", "department": "Engineering", "city": "Berlin", "age": 34, "salary": 98000, "hire_date": "2019-03-01"},
    {"id": 2, "name": "Ben", "department": "Engineering", "city": "Paris", "age": 45, "salary": 91000, "hire_date": "2016-07-15"},
    {"id": 3, "name": "Cleo", "department": "Engineering", "city": "Berlin", "age": 29, "salary": 87000, "hire_date": "2021-01-10"},
    {"id": 4, "name": "Dev", "department": "Engineering", "city": "Madrid", "age": 40, "salary": 83000, "hire_date": "2020-05-20"},
    {"id": 5, "name": "Eve", "department": "Engineering", "city": "Berlin", "age": 52, "salary": 95000, "hire_date": "2014-11-03"},
    {"id": 6, "name": "Finn", "department": "Sales", "city": "Paris", "age": 38, "salary": 72000, "hire_date": "2018-02-12"},
    {"id": 7, "name": "Gia", "department": "Sales", "city": "Madrid", "age": 30, "salary": 64000, "hire_date": "2022-09-01"},
    {"id": 8, "name": "Hal", "department": "Sales", "city": "Paris", "age": 47, "salary": 120000, "hire_date": "2012-04-30"},
    {"id": 9, "name": "Ivy", "department": "Sales", "city": "Berlin", "age": 26, "salary": 58000, "hire_date": "2023-03-15"},
    {"id": 10, "name": "Jon", "department": "HR", "city": "Madrid", "age": 41, "salary": 61000, "hire_date": "2017-06-01"},
    {"id": 11, "name": "Kim", "department": "HR", "city": "Lisbon", "age": 35, "salary": 66000, "hire_date": "2020-10-05"},
    {"id": 12, "name": "Leo", "department": "Marketing", "city": "Lisbon", "age": 31, "salary": 70500, "hire_date": "2021-08-23"},
]
DEPARTMENTS = [
    {"department": "Engineering", "budget": 900000, "floor": 3},
    {"department": "Sales", "budget": 500000, "floor": 2},
    {"department": "HR", "budget": 200000, "floor": 1},
    {"department": "Marketing", "budget": 300000, "floor": 2},
]
SALES = [
    {"sale_id": i, "emp_id": emp, "amount": amount, "region": region}
    for i, (emp, amount, region) in enumerate(
        [(6, 1200.0, "North"), (7, 800.0, "South"), (8, 4300.0, "North"), (8, 2100.0, "West"), (9, 600.0, "South"),
         (6, 1500.0, "West"), (1, 300.0, "North"), (12, 950.0, "South"), (8, 700.0, "South"), (7, 1100.0, "North")],
        start=1,
    )
]
SINGLE = {"df": EMPLOYEES}
MULTI = {"employees": EMPLOYEES, "departments": DEPARTMENTS, "sales": SALES}


def stuffed(question: str) -> str:
    """The original design's failure: keywords everywhere, no computation."""
    return f"# {question}\n# groupby mean sum count max min sort_values merge query nlargest filter\n'''{question}'''\nresult = 0"


@dataclass
class Case:
    name: str
    question: str
    reference: str
    correct: list[str]
    wrong: list[str]
    frames: dict = field(default_factory=lambda: SINGLE)
    dead: str | None = None  # dead code that mentions the right things, then answers nothing

    def wrong_answers(self) -> list[str]:
        extra = [stuffed(self.question)]
        if self.dead:
            extra.append(self.dead)
        return self.wrong + extra


CASES = [
    Case(
        "mean",
        "What is the average salary?",
        "result = df['salary'].mean()",
        ["result = df.salary.mean()", "result = np.mean(df['salary'])", "df.agg({'salary': 'mean'})['salary']"],
        ["result = df['salary'].median()", "result = df['age'].mean()"],
        dead="df['salary'].mean()\nresult = 0",
    ),
    Case(
        "filtered_count",
        "How many employees work in the Sales department?",
        "result = len(df[df['department'] == 'Sales'])",
        ["result = (df['department'] == 'Sales').sum()", "result = df.query(\"department == 'Sales'\").shape[0]",
         "result = df[df.department.eq('Sales')]['id'].count()"],
        ["result = len(df)", "result = (df.department == 'Engineering').sum()"],
    ),
    Case(
        "group_mean",
        "What is the average salary per department?",
        "result = df.groupby('department')['salary'].mean()",
        ["result = df.groupby('department', as_index=False).agg(avg_salary=('salary', 'mean'))",
         "result = df.pivot_table(index='department', values='salary', aggfunc='mean')",
         "result = df.groupby('department').salary.mean().reset_index()"],
        ["result = df.groupby('department')['salary'].sum()", "result = df.groupby('city')['salary'].mean()",
         "result = df['salary'].mean()"],
        dead="by_dept = df.groupby('department')['salary'].mean()\nresult = 0",
    ),
    Case(
        "top_n_ordered",
        "List the name and salary of the 3 highest paid employees, sorted by salary in descending order.",
        "result = df.nlargest(3, 'salary')[['name', 'salary']]",
        ["result = df.sort_values('salary', ascending=False).head(3)[['name', 'salary']]",
         "top = df.sort_values(by='salary', ascending=False)\nresult = top[['name', 'salary']].iloc[:3]",
         "result = df[['name', 'salary']].sort_values('salary', ascending=False).head(3).reset_index(drop=True)"],
        ["result = df.sort_values('salary').head(3)[['name', 'salary']]",
         "result = df.nlargest(3, 'salary')[['name', 'salary']].sort_values('salary')",
         "result = df.nlargest(2, 'salary')[['name', 'salary']]"],
    ),
    Case(
        "two_conditions",
        "Which employees are older than 40 and earn more than 90000?",
        "result = df[(df['age'] > 40) & (df['salary'] > 90000)]",
        ["result = df.query('age > 40 and salary > 90000')",
         "result = df.loc[df['age'].gt(40) & df['salary'].gt(90000)]",
         "mask = (df.age > 40) & (df.salary > 90000)\nresult = df[mask]"],
        ["result = df[df['age'] > 40]", "result = df[(df['age'] >= 40) & (df['salary'] > 80000)]",
         "result = df[(df['age'] > 40) | (df['salary'] > 90000)]"],
        dead="old = df[df.age > 40]\nrich = df.query('salary > 90000')\nresult = 0",
    ),
    Case(
        "count_per_group",
        "How many employees are there per city?",
        "result = df.groupby('city').size()",
        ["result = df['city'].value_counts()", "result = df.groupby('city').agg(n=('id', 'count')).reset_index()",
         "result = df.groupby('city', as_index=False)['id'].count()"],
        ["result = df['city'].nunique()", "result = df.groupby('department').size()"],
    ),
    Case(
        "two_group_columns",
        "What is the total salary for each department and city?",
        "result = df.groupby(['department', 'city'])['salary'].sum()",
        ["result = df.pivot_table(index=['department', 'city'], values='salary', aggfunc='sum').reset_index()",
         "result = df.groupby(['department', 'city'], as_index=False)['salary'].sum()"],
        ["result = df.groupby('department')['salary'].sum()", "result = df.groupby(['department', 'city'])['salary'].mean()"],
    ),
    Case(
        "argmax_group",
        "Which department has the highest average salary?",
        "result = df.groupby('department')['salary'].mean().idxmax()",
        ["result = df.groupby('department').salary.mean().sort_values(ascending=False).index[0]",
         "result = df.groupby('department')['salary'].mean().nlargest(1).index[0]"],
        ["result = df.groupby('department')['salary'].mean().idxmin()", "result = df.loc[df['salary'].idxmax(), 'department']"],
    ),
    Case(
        "max",
        "What is the maximum age?",
        "result = df['age'].max()",
        ["result = df.age.max()", "result = df.sort_values('age')['age'].iloc[-1]", "result = max(df['age'])"],
        ["result = df['age'].min()", "result = df['salary'].max()"],
    ),
    Case(
        "distinct",
        "How many distinct cities are there?",
        "result = df['city'].nunique()",
        ["result = len(df.city.unique())", "result = df['city'].drop_duplicates().shape[0]"],
        ["result = df['city'].count()", "result = len(df)"],
    ),
    Case(
        "date_filter_median",
        "What is the median salary of employees hired after 2020-01-01?",
        "result = df[pd.to_datetime(df['hire_date']) > '2020-01-01']['salary'].median()",
        ["result = df.query(\"hire_date > '2020-01-01'\")['salary'].median()",
         "result = df.loc[df['hire_date'] > '2020-01-01', 'salary'].median()"],
        ["result = df[df['hire_date'] < '2020-01-01']['salary'].median()", "result = df['salary'].median()"],
    ),
    Case(
        "sorted_names",
        "List the names of the employees in the Engineering department, sorted alphabetically.",
        "result = df[df['department'] == 'Engineering'].sort_values('name')['name']",
        ["result = sorted(df.loc[df.department == 'Engineering', 'name'])",
         "result = df.query(\"department == 'Engineering'\")[['name']].sort_values('name')"],
        ["result = df[df['department'] == 'Engineering'].sort_values('name', ascending=False)['name']",
         "result = df[df['department'] == 'Sales']['name']"],
    ),
    Case(
        "group_filter",
        "What is the average age per city, for cities with more than 2 employees?",
        "kept = df.groupby('city').filter(lambda g: len(g) > 2)\nresult = kept.groupby('city')['age'].mean()",
        ["counts = df['city'].value_counts()\nkeep = counts[counts > 2].index\nresult = df[df.city.isin(keep)].groupby('city').age.mean()",
         "stats = df.groupby('city').agg(n=('id', 'size'), avg_age=('age', 'mean'))\nresult = stats[stats['n'] > 2]['avg_age']"],
        ["result = df.groupby('city')['age'].mean()", "result = df.groupby('city')['age'].mean().nlargest(2)"],
    ),
    Case(
        "group_sum_other_table",
        "What is the total sales amount per region?",
        "result = sales.groupby('region')['amount'].sum()",
        ["result = sales.pivot_table(index='region', values='amount', aggfunc='sum')",
         "result = dfs['sales'].groupby('region', as_index=False).agg(total=('amount', 'sum'))"],
        ["result = sales.groupby('region')['amount'].mean()", "result = sales['amount'].sum()"],
        frames=MULTI,
    ),
    Case(
        "join_group",
        "What is the total sales amount per department? Join sales to employees on the employee id.",
        "result = sales.merge(employees, left_on='emp_id', right_on='id').groupby('department')['amount'].sum()",
        ["merged = pd.merge(sales, employees, how='inner', left_on='emp_id', right_on='id')\nresult = merged.groupby('department', as_index=False).agg(total=('amount', 'sum'))",
         "dept_of = employees.set_index('id')['department']\nresult = sales.assign(department=sales['emp_id'].map(dept_of)).groupby('department')['amount'].sum()"],
        ["result = sales.groupby('region')['amount'].sum()", "result = sales['amount'].sum()"],
        frames=MULTI,
        dead="m = sales.merge(employees, left_on='emp_id', right_on='id')\nm.groupby('department')['amount'].sum()\nresult = 0",
    ),
    Case(
        "above_group_average",
        "Which employees earn more than the average salary of their department? Give their names.",
        "result = df[df['salary'] > df.groupby('department')['salary'].transform('mean')]['name']",
        ["avg = df.groupby('department')['salary'].mean()\nresult = df[df['salary'] > df['department'].map(avg)]['name']",
         "merged = df.merge(df.groupby('department', as_index=False)['salary'].mean(), on='department', suffixes=('', '_avg'))\nresult = merged.loc[merged.salary > merged.salary_avg, 'name']"],
        ["result = df[df['salary'] > df['salary'].mean()]['name']", "result = df[df['salary'] < df.groupby('department')['salary'].transform('mean')]['name']"],
    ),
    Case(
        "ordered_counts",
        "Count the employees in each department, ordered from the most to the fewest.",
        "result = df['department'].value_counts()",
        ["result = df.groupby('department').size().sort_values(ascending=False)",
         "result = df.groupby('department').agg(n=('id', 'count')).sort_values('n', ascending=False).reset_index()"],
        ["result = df.groupby('department').size().sort_values()", "result = df.groupby('department').size()",
         "result = df['city'].value_counts()"],
    ),
    Case(
        "between_inclusive",
        "What is the average salary of employees aged between 30 and 40, inclusive?",
        "result = df[df['age'].between(30, 40)]['salary'].mean()",
        ["result = df.query('30 <= age <= 40')['salary'].mean()", "result = df.loc[(df.age >= 30) & (df.age <= 40), 'salary'].mean()"],
        ["result = df[(df['age'] > 30) & (df['age'] < 40)]['salary'].mean()", "result = df['salary'].mean()"],
    ),
    Case(
        "join_budget_headcount",
        "For each department, give its budget and its number of employees (join departments with employees).",
        "counts = employees.groupby('department').size().rename('employees').reset_index()\nresult = departments.merge(counts, on='department')[['department', 'budget', 'employees']]",
        ["n = employees['department'].value_counts().rename('n')\nresult = departments.set_index('department').join(n)[['budget', 'n']].reset_index()",
         "m = departments.merge(employees, on='department')\nresult = m.groupby(['department', 'budget']).size().reset_index(name='headcount')"],
        ["result = departments[['department', 'budget']]", "result = employees.groupby('department').size()"],
        frames=MULTI,
    ),
    Case(
        "percentage",
        "What percentage of the employees work in Engineering?",
        "result = (df['department'] == 'Engineering').mean() * 100",
        ["result = len(df[df['department'] == 'Engineering']) / len(df) * 100",
         "result = df['department'].value_counts(normalize=True)['Engineering'] * 100"],
        ["result = (df['department'] == 'Engineering').sum()", "result = (df['department'] == 'Engineering').mean()"],
    ),
    Case(
        "argmin_name",
        "What is the name of the youngest employee?",
        "result = df.loc[df['age'].idxmin(), 'name']",
        ["result = df.nsmallest(1, 'age')['name'].iloc[0]", "result = df.sort_values('age').iloc[0]['name']"],
        ["result = df.loc[df['age'].idxmax(), 'name']", "result = df['name'].iloc[0]"],
    ),
    Case(
        "group_by_year",
        "What is the average salary per hire year?",
        "result = df.groupby(pd.to_datetime(df['hire_date']).dt.year)['salary'].mean()",
        ["result = df.assign(year=df['hire_date'].str[:4].astype(int)).groupby('year')['salary'].mean()"],
        ["result = df.groupby('department')['salary'].mean()", "result = df['salary'].mean()"],
    ),
]


# --- issue 19: labelled cases by class of cause --------------------------------------------------------
#
# New tables (a small shop and a support desk) and new questions. Each class has several cases; every
# correct candidate was checked to return the truth on these rows, every wrong one to differ from it
# (customers without orders, a March 31st ticket on the range's edge, a high-priority ticket without
# hours, no ties where an order or an extreme is asked for).
#
# Classes (``Case.cls``):
#   baseline   - the cases above (issues before 19)
#   invented   - issue 19.6: question heuristics that invent, miss or double-count requirements
#                ("at least one", "(all statuses)", "order" as a noun, OR'ed filters, a range in words)
#   expected   - issue 19.6: items with an expected result and no reference (conservative reading)
#   array      - issue 19.7: array-like answers (unique(), to_numpy(), Index, list, tuple, set, dict)
#   recovered  - issue 19.8: code that failed, then a recovery attempt (right or wrong)
#   no_truth   - issue 19.9: neither reference nor expected result: nothing may pass

CUSTOMERS = [
    {"customer_id": cid, "name": name, "country": country, "tier": tier, "signup_date": signup}
    for cid, name, country, tier, signup in [
        (1, "Acme", "DE", "gold", "2022-01-15"), (2, "Birch", "FR", "silver", "2022-06-02"),
        (3, "Cobalt", "DE", "bronze", "2023-02-20"), (4, "Dune", "ES", "gold", "2023-05-11"),
        (5, "Ember", "FR", "gold", "2023-09-30"), (6, "Fjord", "NO", "silver", "2024-01-08"),
        (7, "Garnet", "ES", "bronze", "2024-02-14"), (8, "Helix", "NO", "gold", "2024-03-03"),
    ]
]
ORDERS = [
    {"order_id": oid, "customer_id": cid, "amount": amount, "status": status, "order_date": day, "channel": channel}
    for oid, cid, amount, status, day, channel in [
        (101, 1, 250.0, "shipped", "2024-01-05", "web"), (102, 1, 80.0, "cancelled", "2024-01-19", "store"),
        (103, 2, 420.0, "shipped", "2024-02-02", "web"), (104, 3, 35.5, "returned", "2024-02-11", "store"),
        (105, 3, 310.0, "shipped", "2024-02-27", "web"), (106, 5, 99.9, "pending", "2024-03-04", "web"),
        (107, 5, 640.0, "shipped", "2024-03-09", "store"), (108, 6, 15.0, "cancelled", "2024-03-15", "web"),
        (109, 8, 275.0, "shipped", "2024-03-21", "web"), (110, 8, 130.0, "pending", "2024-03-30", "store"),
        (111, 2, 55.0, "cancelled", "2024-04-02", "web"), (112, 1, 980.0, "shipped", "2024-04-10", "web"),
    ]
]
TICKETS = [
    {"ticket_id": tid, "team": team, "agent": agent, "priority": priority, "status": status, "hours": hours,
     "satisfaction": satisfaction, "opened": opened}
    for tid, team, agent, priority, status, hours, satisfaction, opened in [
        (1, "Billing", "Ana", "high", "closed", 4.5, 4, "2024-02-27"),
        (2, "Billing", "Bo", "urgent", "escalated", 12.0, None, "2024-03-01"),
        (3, "Network", "Cy", "low", "closed", 1.0, 5, "2024-03-02"),
        (4, "Network", "Cy", "urgent", "closed", 8.0, 3, "2024-03-10"),
        (5, "Network", "Dee", "medium", "escalated", 20.0, 2, "2024-03-15"),
        (6, "Accounts", "Eli", "high", "open", None, None, "2024-03-31"),
        (7, "Accounts", "Eli", "low", "closed", 2.5, 4, "2024-04-01"),
        (8, "Billing", "Ana", "medium", "closed", 3.0, 5, "2024-04-03"),
        (9, "Network", "Dee", "high", "closed", 6.5, 3, "2024-04-09"),
        (10, "Accounts", "Fay", "urgent", "open", None, None, "2024-04-12"),
        (11, "Network", "Cy", "low", "closed", 0.5, 5, "2024-02-10"),
        (12, "Network", "Cy", "high", "escalated", 15.0, 1, "2024-03-20"),
    ]
]
SHOP = {"customers": CUSTOMERS, "orders": ORDERS}
DESK = {"df": TICKETS}


@dataclass(frozen=True)
class Recovered:
    """A candidate that failed first, then the model's recovery attempts (in order)."""

    code: str
    attempts: tuple[str, ...]


def candidate_fields(candidate: str | Recovered) -> dict:
    """The item fields of one candidate."""
    if isinstance(candidate, Recovered):
        return {"generated_code": candidate.code, "recovery_attempts": [{"code": c} for c in candidate.attempts]}
    return {"generated_code": candidate}


@dataclass
class LabelledCase:
    """One question with its truth (reference code and/or expected result, or neither), correct and
    wrong candidates, and the class of cause it measures."""

    cls: str
    name: str
    question: str
    reference: str | None
    correct: list
    wrong: list
    frames: dict = field(default_factory=lambda: DESK)
    expected: object = None
    order_matters: bool | None = None

    @property
    def passable(self) -> bool:
        """Whether correctness can be established (issue 19.9): otherwise nothing may pass."""
        return self.reference is not None or self.expected is not None

    def item(self, candidate: str | Recovered) -> dict:
        raw = {"question": self.question, "frames": self.frames, **candidate_fields(candidate)}
        if self.reference is not None:
            raw["reference_code"] = self.reference
        if self.expected is not None:
            raw["expected_result"] = self.expected
        if self.order_matters is not None:
            raw["order_matters"] = self.order_matters
        return raw


def _baseline(case: Case) -> LabelledCase:
    return LabelledCase("baseline", case.name, case.question, case.reference, [case.reference, *case.correct],
                        case.wrong_answers(), frames=case.frames)


NEW_CASES = [
    # --- invented: requirements the question's wording seems to state but the reference does not have
    LabelledCase(
        "invented", "at_least_one_order",
        "Which customers have at least one order? Give their names.",
        "result = customers[customers['customer_id'].isin(orders['customer_id'])]['name']",
        ["result = customers.merge(orders, on='customer_id')['name'].drop_duplicates()",
         "buyers = orders['customer_id'].unique()\nresult = customers.loc[customers.customer_id.isin(buyers), 'name']",
         "counts = orders.groupby('customer_id').size()\nresult = customers[customers['customer_id'].map(counts).fillna(0) >= 1]['name']"],
        ["result = customers['name']",
         "result = customers[~customers['customer_id'].isin(orders['customer_id'])]['name']",
         "result = customers.merge(orders, on='customer_id')['name']"],
        frames=SHOP,
    ),
    LabelledCase(
        "invented", "all_statuses",
        "What is the total order amount per country (all statuses)?",
        "result = orders.merge(customers, on='customer_id').groupby('country')['amount'].sum()",
        ["country = customers.set_index('customer_id')['country']\nresult = orders.groupby(orders['customer_id'].map(country))['amount'].sum()",
         "merged = pd.merge(orders, customers[['customer_id', 'country']], on='customer_id')\nresult = merged.pivot_table(index='country', values='amount', aggfunc='sum')",
         "result = customers.merge(orders, on='customer_id', how='inner').groupby('country', as_index=False).agg(total_amount=('amount', 'sum'))"],
        ["shipped = orders[orders['status'] == 'shipped']\nresult = shipped.merge(customers, on='customer_id').groupby('country')['amount'].sum()",
         "result = orders.merge(customers, on='customer_id').groupby('country')['amount'].mean()",
         "result = orders.merge(customers, on='customer_id').groupby('tier')['amount'].sum()"],
        frames=SHOP,
    ),
    LabelledCase(
        "invented", "or_filters",
        "Which tickets are urgent or have been escalated?",
        "result = df[(df['priority'] == 'urgent') | (df['status'] == 'escalated')]",
        ["result = df.query(\"priority == 'urgent' or status == 'escalated'\")",
         "result = df.loc[df.priority.eq('urgent') | df.status.eq('escalated')]",
         "urgent = df['priority'] == 'urgent'\nescalated = df['status'] == 'escalated'\nresult = df[urgent | escalated]"],
        ["result = df[(df['priority'] == 'urgent') & (df['status'] == 'escalated')]",
         "result = df[df['priority'] == 'urgent']",
         "result = df.query(\"status == 'escalated'\")"],
    ),
    LabelledCase(
        "invented", "range_in_words",
        "How many tickets were opened in March 2024?",
        "opened = pd.to_datetime(df['opened'])\nresult = int(((opened >= '2024-03-01') & (opened < '2024-04-01')).sum())",
        ["result = int(df['opened'].between('2024-03-01', '2024-03-31').sum())",
         "result = len(df[df['opened'].str.startswith('2024-03')])",
         "result = df.query(\"opened >= '2024-03-01' and opened <= '2024-03-31'\").shape[0]"],
        ["result = int(((df['opened'] >= '2024-03-01') & (df['opened'] < '2024-03-31')).sum())",
         "result = len(df)",
         "result = len(df[df['opened'].str.startswith('2024-04')])"],
    ),
    LabelledCase(
        "invented", "only_high_priority",
        "What is the average resolution time in hours for high priority tickets only?",
        "result = df[df['priority'] == 'high']['hours'].mean()",
        ["result = df.query(\"priority == 'high'\").hours.mean()",
         "result = df.loc[df.priority.eq('high'), 'hours'].dropna().mean()",
         "result = df.groupby('priority')['hours'].mean()['high']"],
        ["result = df['hours'].mean()",
         "result = df[df['priority'] == 'urgent']['hours'].mean()",
         "result = df[df['priority'] == 'high']['hours'].fillna(0).mean()"],
    ),
    LabelledCase(
        "invented", "order_as_a_noun",
        "What is the average order amount for each sales channel?",
        "result = orders.groupby('channel')['amount'].mean()",
        ["result = orders.pivot_table(index='channel', values='amount', aggfunc='mean')",
         "result = orders.groupby('channel', as_index=False).agg(avg_amount=('amount', 'mean'))",
         "result = orders.groupby('channel').amount.agg('mean').reset_index()"],
        ["result = orders.groupby('channel')['amount'].sum()",
         "result = orders.groupby('status')['amount'].mean()",
         "result = orders['amount'].mean()"],
        frames=SHOP,
    ),
    LabelledCase(
        "invented", "at_least_per_team",
        "For each team, how many tickets have a satisfaction score of at least 4?",
        "result = df[df['satisfaction'] >= 4].groupby('team').size()",
        ["result = df.query('satisfaction >= 4')['team'].value_counts()",
         "result = (df['satisfaction'] >= 4).groupby(df['team']).sum()",
         "good = df[df.satisfaction.ge(4)]\nresult = good.groupby('team', as_index=False).agg(n=('ticket_id', 'count'))"],
        ["result = df[df['satisfaction'] > 4].groupby('team').size()",
         "result = df.groupby('team').size()",
         "result = df[df['satisfaction'] >= 4].groupby('agent').size()"],
    ),
    LabelledCase(
        "invented", "best_team_closed",
        "Which team has the highest average satisfaction among closed tickets?",
        "result = df[df['status'] == 'closed'].groupby('team')['satisfaction'].mean().idxmax()",
        ["closed = df.query(\"status == 'closed'\")\nresult = closed.groupby('team').satisfaction.mean().sort_values(ascending=False).index[0]",
         "result = df[df.status.eq('closed')].groupby('team')['satisfaction'].mean().nlargest(1).index[0]"],
        ["result = df[df['status'] == 'closed'].groupby('team')['satisfaction'].mean().idxmin()",
         "result = df[df['status'] == 'closed'].groupby('team')['hours'].mean().idxmax()",
         "result = df[df['status'] == 'closed']['team'].value_counts().idxmax()"],
    ),
    LabelledCase(
        "invented", "whatever_the_status",
        "What is the total order amount per channel, whatever the status?",
        "result = orders.groupby('channel')['amount'].sum()",
        ["result = orders.pivot_table(index='channel', values='amount', aggfunc='sum')",
         "result = orders.groupby('channel', as_index=False)['amount'].sum()",
         "result = {channel: group['amount'].sum() for channel, group in orders.groupby('channel')}"],
        ["result = orders[orders['status'] == 'shipped'].groupby('channel')['amount'].sum()",
         "result = orders.groupby(['channel', 'status'])['amount'].sum()",
         "result = orders.groupby('channel')['amount'].count()"],
        frames=SHOP,
    ),
    LabelledCase(
        "invented", "highest_level_named",
        "How many hours were spent on tickets of the highest priority level, urgent?",
        "result = df[df['priority'] == 'urgent']['hours'].sum()",
        ["result = df.query(\"priority == 'urgent'\")['hours'].sum()",
         "result = df.loc[df.priority.eq('urgent'), 'hours'].sum()",
         "result = df.groupby('priority')['hours'].sum().loc['urgent']"],
        ["result = df[df['priority'] == 'high']['hours'].sum()",
         "result = df[df['priority'] == 'urgent']['hours'].mean()",
         "result = df['hours'].sum()"],
    ),
    LabelledCase(
        "invented", "teams_with_one_low",
        "Which teams have at least one low priority ticket?",
        "result = df[df['priority'] == 'low']['team'].drop_duplicates()",
        ["result = df.loc[df['priority'] == 'low', 'team'].unique()",
         "counts = df[df.priority == 'low'].groupby('team').size()\nresult = counts[counts >= 1].index",
         "result = sorted(set(df.query(\"priority == 'low'\").team))"],
        ["result = df['team'].drop_duplicates()",
         "result = df[df['priority'] == 'medium']['team'].drop_duplicates()",
         "result = df.groupby('team').size().idxmin()"],
    ),
    # --- expected: an expected result and no reference code
    LabelledCase(
        "expected", "cancelled_count",
        "How many orders were cancelled?",
        None,
        ["result = int((orders['status'] == 'cancelled').sum())",
         "result = len(orders.query(\"status == 'cancelled'\"))",
         "result = orders['status'].value_counts()['cancelled']"],
        ["result = len(orders)", "result = int((orders['status'] == 'returned').sum())"],
        frames=SHOP, expected=3,
    ),
    LabelledCase(
        "expected", "gold_newest_first",
        "List the names of the gold-tier customers, sorted by sign-up date, newest first.",
        None,
        ["result = customers[customers['tier'] == 'gold'].sort_values('signup_date', ascending=False)['name']",
         "result = customers.query(\"tier == 'gold'\").sort_values(by='signup_date', ascending=False).name.tolist()"],
        ["result = customers[customers['tier'] == 'gold'].sort_values('signup_date')['name']",
         "result = customers.sort_values('signup_date', ascending=False)['name']"],
        frames=SHOP, expected=["Helix", "Ember", "Dune", "Acme"],
    ),
    LabelledCase(
        "expected", "web_revenue",
        "What is the total amount of the shipped web orders?",
        None,
        ["result = orders[(orders['status'] == 'shipped') & (orders['channel'] == 'web')]['amount'].sum()",
         "result = orders.query(\"status == 'shipped' and channel == 'web'\").amount.sum()"],
        ["result = orders[orders['channel'] == 'web']['amount'].sum()",
         "result = orders[orders['status'] == 'shipped']['amount'].sum()"],
        frames=SHOP, expected=2235.0,
    ),
    # --- array: array-like answers
    LabelledCase(
        "array", "unique_teams",
        "Which teams have escalated tickets?",
        "result = df[df['status'] == 'escalated']['team'].drop_duplicates()",
        ["result = df[df['status'] == 'escalated']['team'].unique()",
         "result = set(df.loc[df.status == 'escalated', 'team'])",
         "result = df.query(\"status == 'escalated'\").team.unique().tolist()",
         "result = np.unique(df[df.status.eq('escalated')]['team'].to_numpy())"],
        ["result = df['team'].unique()",
         "result = df[df['status'] == 'closed']['team'].unique()",
         "result = tuple(df[df['status'] == 'escalated']['team'])"],
    ),
    LabelledCase(
        "array", "hours_values",
        "What are the resolution hours of the urgent tickets?",
        "result = df[df['priority'] == 'urgent']['hours']",
        ["result = df[df['priority'] == 'urgent']['hours'].to_numpy()",
         "result = df.loc[df.priority == 'urgent', 'hours'].values",
         "result = tuple(df.query(\"priority == 'urgent'\")['hours'])"],
        ["result = df[df['priority'] == 'urgent']['hours'].dropna().to_numpy()",
         "result = df[df['priority'] == 'high']['hours'].values",
         "result = df[df['priority'] == 'urgent']['satisfaction'].to_numpy()"],
    ),
    LabelledCase(
        "array", "big_spenders_index",
        "Which customer ids spent more than 300 in total on shipped orders?",
        "totals = orders[orders['status'] == 'shipped'].groupby('customer_id')['amount'].sum()\nresult = totals[totals > 300].index.tolist()",
        ["totals = orders[orders.status == 'shipped'].groupby('customer_id').amount.sum()\nresult = totals[totals > 300].index",
         "totals = orders.query(\"status == 'shipped'\").groupby('customer_id')['amount'].sum()\nresult = set(totals[totals.gt(300)].index)",
         "totals = orders[orders['status'] == 'shipped'].groupby('customer_id')['amount'].sum()\nresult = totals.index[totals > 300].to_numpy()"],
        ["totals = orders.groupby('customer_id')['amount'].sum()\nresult = totals[totals > 300].index.tolist()",
         "totals = orders[orders['status'] == 'shipped'].groupby('customer_id')['amount'].sum()\nresult = totals[totals > 400].index",
         "result = orders[orders['amount'] > 400]['customer_id'].unique()"],
        frames=SHOP,
    ),
    LabelledCase(
        "array", "priority_counts_dict",
        "What is the number of tickets per priority?",
        "result = df['priority'].value_counts()",
        ["result = df['priority'].value_counts().to_dict()",
         "result = dict(df.groupby('priority').size())",
         "result = {priority: len(group) for priority, group in df.groupby('priority')}"],
        ["result = df['status'].value_counts().to_dict()",
         "result = df['priority'].nunique()",
         "result = {priority: len(group) for priority, group in df[df.status == 'closed'].groupby('priority')}"],
    ),
    LabelledCase(
        "array", "urgent_dates",
        "On which dates were urgent tickets opened?",
        "result = pd.to_datetime(df[df['priority'] == 'urgent']['opened'])",
        ["result = pd.to_datetime(df.loc[df.priority == 'urgent', 'opened']).unique()",
         "result = df[df['priority'] == 'urgent']['opened'].tolist()",
         "result = pd.to_datetime(df.query(\"priority == 'urgent'\").opened).dt.date.tolist()"],
        ["result = pd.to_datetime(df[df['priority'] == 'high']['opened']).unique()",
         "result = df['opened'].unique()"],
    ),
    LabelledCase(
        "array", "tiers_sorted",
        "List the distinct customer tiers in alphabetical order.",
        "result = sorted(customers['tier'].unique())",
        ["result = customers['tier'].drop_duplicates().sort_values()",
         "result = customers['tier'].astype('category').cat.categories",
         "result = customers.tier.sort_values().unique()"],
        ["result = customers['tier'].unique()",
         "result = set(customers['tier'])",
         "result = sorted(customers['country'].unique())"],
        frames=SHOP,
    ),
    # --- recovered: the generated code failed; the last recovery attempt is the model's final answer
    LabelledCase(
        "recovered", "shipped_total",
        "What is the total amount of the shipped orders?",
        "result = orders[orders['status'] == 'shipped']['amount'].sum()",
        [Recovered("result = orders[orders['state'] == 'shipped']['amount'].sum()",
                   ("result = orders[orders['status'] == 'shipped']['amount'].sum()",)),
         Recovered("result = orders.query(\"status == 'shipped'\"].amount.sum()",
                   ("result = orders.query(\"status == 'shipped'\").amount.sum()",)),
         Recovered("result = orders[orders.state == 'shipped'].amount.sum()",
                   ("result = orders[orders['state'] == 'shipped']['amount'].sum()",
                    "result = orders.loc[orders['status'].eq('shipped'), 'amount'].sum()"))],
        [Recovered("result = orders[orders['state'] == 'shipped']['amount'].sum()", ("result = orders['amount'].sum()",)),
         Recovered("result = orders[orders['state'] == 'shipped']['amount'].sum()",
                   ("result = orders[orders['State'] == 'shipped']['amount'].sum()",)),
         "result = orders[orders['status'] == 'pending']['amount'].sum()"],
        frames=SHOP,
    ),
    LabelledCase(
        "recovered", "satisfaction_per_team",
        "What is the average satisfaction per team?",
        "result = df.groupby('team')['satisfaction'].mean()",
        [Recovered("result = df.groupby('teams')['satisfaction'].mean()", ("result = df.groupby('team')['satisfaction'].mean()",)),
         Recovered("result = df.groupby('team').agg(avg=('satisfaction', 'avg'))",
                   ("result = df.groupby('team', as_index=False).agg(avg_satisfaction=('satisfaction', 'mean'))",)),
         Recovered("result = df.pivot_table(index='team', values='satisfaction', aggfunc='mean'",
                   ("result = df.pivot_table(index='team', values='satisfaction', aggfunc='mean')",))],
        [Recovered("result = df.groupby('teams')['satisfaction'].mean()", ("result = df.groupby('team')['satisfaction'].median()",)),
         Recovered("result = df.groupby('teams')['satisfaction'].mean()", ("result = df['satisfaction'].mean()",)),
         "result = df.groupby('team')['satisfaction'].sum()"],
    ),
    LabelledCase(
        "recovered", "gold_countries",
        "Which countries do the gold-tier customers come from?",
        "result = customers[customers['tier'] == 'gold']['country'].drop_duplicates()",
        [Recovered("result = customers[customers.tier == 'gold'].countries.unique()",
                   ("result = customers[customers.tier == 'gold']['country'].unique()",)),
         Recovered("result = set(customers.query('tier == gold')['country'])",
                   ("result = set(customers.query(\"tier == 'gold'\")['country'])",))],
        [Recovered("result = customers[customers.tier == 'gold'].countries.unique()",
                   ("result = customers[customers['tier'] == 'bronze']['country'].unique()",)),
         Recovered("result = customers[customers.tier == 'gold'].countries.unique()",
                   ("result = customers[customers.tier == 'silver']['country'].unique()",))],
        frames=SHOP,
    ),
    # --- no_truth: neither reference code nor an expected result
    LabelledCase(
        "no_truth", "web_average_unchecked",
        "What is the average amount of the web orders?",
        None,
        ["result = orders[orders['channel'] == 'web']['amount'].mean()",
         "result = orders.query(\"channel == 'web'\").amount.mean()"],
        ["result = orders['amount'].mean()", "result = 0"],
        frames=SHOP,
    ),
    LabelledCase(
        "no_truth", "tickets_per_team_unchecked",
        "How many tickets does each team have?",
        None,
        ["result = df['team'].value_counts()", "result = df.groupby('team').size()"],
        ["result = df.groupby('agent').size()", "result = len(df)"],
    ),
]
LABELLED = [_baseline(case) for case in CASES] + NEW_CASES
CLASSES = ("baseline", "invented", "expected", "array", "recovered", "no_truth")
