"""The one CSV writer: every CSV Assay produces (batch reports, result exports, criteria diffs) is
written here, so every one of them is safe to open in a spreadsheet.

A text cell that a spreadsheet would run as a formula — it starts with ``=``, ``+``, ``-``, ``@``, a
tab or a carriage return — gets a leading ``'`` (OWASP's CSV-injection rule). Numbers are left as
they are (``-0.5`` is a number, not a formula). Dicts and lists are written as JSON. Header cells go
through the same rule: column names can come from a suite's YAML.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(value: Any) -> Any:
    """``value`` as a CSV cell a spreadsheet shows as data, never runs."""
    if isinstance(value, (dict, list)):
        value = json.dumps(value, default=str)
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def csv_chunks(
    rows: Iterable[Mapping[str, Any]], columns: Sequence[str] | None = None, *, rows_per_chunk: int = 200
) -> Iterator[str]:
    """A header and one line per row, as text chunks of ``rows_per_chunk`` lines (flat memory).

    ``columns`` are the header; without them the first row's keys are. A row's keys outside the columns
    are left out and missing ones are empty. No rows and no columns give an empty document."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    keys = list(columns) if columns is not None else None

    def take() -> str:
        text = buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
        return text

    if keys is not None:
        writer.writerow([safe_cell(k) for k in keys])
    for n, row in enumerate(rows, 1):
        if keys is None:
            keys = list(row)
            writer.writerow([safe_cell(k) for k in keys])
        writer.writerow([safe_cell(row.get(k, "")) for k in keys])
        if n % rows_per_chunk == 0:
            yield take()
    if buffer.getvalue():
        yield take()
