"""Write the sample ``hr`` dataset for pandas_codegen items: employees (CSV), departments (CSV) and
sales (Parquet, so both table formats are exercised).

    python examples/pandas_datasets/make_hr.py   # (re)writes examples/pandas_datasets/hr/*

Register it under the name ``hr`` before uploading items that use it, e.g.
``assay run examples/pandas_dataset_items.jsonl --suite pandas_codegen --dataset hr=examples/pandas_datasets/hr``
or ``POST /api/v1/datasets/files`` with the three files and ``name=hr``. The rows are the ones the
validity tests use (tests/scoring/pandas/validity_cases.py): no ties where an order is asked for,
people on the boundaries of ranges.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

OUT = Path(__file__).resolve().parent / "hr"

EMPLOYEES = [
    (1, "Ada", "Engineering", "Berlin", 34, 98000, "2019-03-01"),
    (2, "Ben", "Engineering", "Paris", 45, 91000, "2016-07-15"),
    (3, "Cleo", "Engineering", "Berlin", 29, 87000, "2021-01-10"),
    (4, "Dev", "Engineering", "Madrid", 40, 83000, "2020-05-20"),
    (5, "Eve", "Engineering", "Berlin", 52, 95000, "2014-11-03"),
    (6, "Finn", "Sales", "Paris", 38, 72000, "2018-02-12"),
    (7, "Gia", "Sales", "Madrid", 30, 64000, "2022-09-01"),
    (8, "Hal", "Sales", "Paris", 47, 120000, "2012-04-30"),
    (9, "Ivy", "Sales", "Berlin", 26, 58000, "2023-03-15"),
    (10, "Jon", "HR", "Madrid", 41, 61000, "2017-06-01"),
    (11, "Kim", "HR", "Lisbon", 35, 66000, "2020-10-05"),
    (12, "Leo", "Marketing", "Lisbon", 31, 70500, "2021-08-23"),
]
DEPARTMENTS = [("Engineering", 900000, 3), ("Sales", 500000, 2), ("HR", 200000, 1), ("Marketing", 300000, 2)]
SALES = [
    (1, 6, 1200.0, "North"), (2, 7, 800.0, "South"), (3, 8, 4300.0, "North"), (4, 8, 2100.0, "West"), (5, 9, 600.0, "South"),
    (6, 6, 1500.0, "West"), (7, 1, 300.0, "North"), (8, 12, 950.0, "South"), (9, 8, 700.0, "South"), (10, 7, 1100.0, "North"),
]


def _csv(header: tuple[str, ...], rows: list[tuple]) -> bytes:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue().encode()


def main() -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "employees.csv").write_bytes(_csv(("id", "name", "department", "city", "age", "salary", "hire_date"), EMPLOYEES))
    (OUT / "departments.csv").write_bytes(_csv(("department", "budget", "floor"), DEPARTMENTS))
    columns = list(zip(*SALES))
    table = pa.table({"sale_id": columns[0], "emp_id": columns[1], "amount": columns[2], "region": columns[3]})
    pq.write_table(table, OUT / "sales.parquet", compression="none")


if __name__ == "__main__":
    main()
