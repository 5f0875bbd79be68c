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
