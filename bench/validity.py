"""Validity of the shipped suites on the labelled sets, without the judge. Prints figures; the exit
code says whether every goal was met (issue 19's goals, stated by each part).

    .venv/bin/python -m bench.validity            # KQL, then pandas
    .venv/bin/python -m bench.validity_kql        # one part alone
"""

from __future__ import annotations

import sys

from bench import validity_kql, validity_pandas


def main() -> int:
    results = {"kql": validity_kql.report(), "pandas_codegen": validity_pandas.report()}
    print()
    for part, met in results.items():
        print(f"{part}: {'goals met' if met else 'GOALS NOT MET'}")
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
