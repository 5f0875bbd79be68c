"""Path and query parameters shared by routes. Every numeric parameter has both bounds: past them a request
is a 422 that says so, never a value the store cannot take (a test walks the route table for this)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query

# PostgreSQL's bigint, the widest integer an OFFSET takes: past it the query fails instead of
# returning an empty page.
MAX_OFFSET = 2**63 - 1

Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET, description="Rows to skip.")]

SuiteName = Annotated[
    str, Path(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_-]+$", description="The suite's name")
]
CriteriaHashFilter = Annotated[
    str | None, Query(min_length=64, max_length=64, pattern=r"^[0-9a-f]{64}$", description="Only this criteria hash.")
]
