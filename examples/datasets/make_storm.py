"""Write the sample ``storm`` dataset: a small StormEvents-like table and its PopulationData companion.

    python examples/datasets/make_storm.py          # (re)writes examples/datasets/storm/*.csv
    python examples/datasets/make_storm.py --check  # exits 1 if the committed files differ

The rows come from duckdb-kql's own fixture generator (``duckdb_kql.fixtures``: a fixed seed, real
state names, NOAA event types and 2007 dates; synthetic values, no licensing question): the first
:data:`ROWS` of its StormEvents rows, with the columns example queries use, and its one-row-per-state
PopulationData. The output is byte-identical for the pinned duckdb-kql version; the tests check
that the committed files are what this script writes, so a change in the generator is noticed.

Register it under the name ``storm`` before uploading items that use it, e.g. with
``ASSAY_DATA_DIR=examples/datasets``: ``POST /api/v1/datasets {"name": "storm", "path": "storm"}``.
Items pin ``now`` (``ago()`` reads it); every StartTime lies in 2007.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from pathlib import Path

from duckdb_kql import fixtures

OUT = Path(__file__).resolve().parent / "storm"
ROWS = 300
COLUMNS = (
    "StartTime",
    "EndTime",
    "EpisodeId",
    "EventId",
    "State",
    "EventType",
    "InjuriesDirect",
    "InjuriesIndirect",
    "DeathsDirect",
    "DeathsIndirect",
    "DamageProperty",
    "DamageCrops",
    "Source",
    "BeginLocation",
    "BeginLat",
    "BeginLon",
    "EventNarrative",
)


def _csv(header: list[str], rows: list[list[object]]) -> bytes:
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, lineterminator="\n", quoting=csv.QUOTE_MINIMAL)
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue().encode("utf-8")


def build() -> dict[str, bytes]:
    """File name -> bytes of the dataset's tables."""
    names = [name for name, _, _ in fixtures.SCHEMA]
    keep = [names.index(c) for c in COLUMNS]
    storms = [[row[i] for i in keep] for row in fixtures.generate()[:ROWS]]
    population_header = [name for name, _, _ in fixtures.POPULATION_SCHEMA]
    return {
        "StormEvents.csv": _csv(list(COLUMNS), storms),
        "PopulationData.csv": _csv(population_header, fixtures.generate_population()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed files, write nothing")
    args = parser.parse_args(argv)
    files = build()
    if args.check:
        stale = [name for name, data in files.items() if not (OUT / name).is_file() or (OUT / name).read_bytes() != data]
        if stale:
            print(f"differs from the generator: {', '.join(stale)}", file=sys.stderr)
            return 1
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (OUT / name).write_bytes(data)
        print(f"wrote {OUT / name} ({len(data)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
