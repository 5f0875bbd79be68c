"""Where a command reads and writes: the embedded store (SQLite, ``--db``, what ``assay run`` wrote)
or the Assay API (``--api-url``). One rule for every command: with ``--api-url`` (or ``ASSAY_API_URL``)
the API, else the embedded store.

Both stores call the same domain functions (the API through its routes, the embedded store
directly), so a command prints the same for the same data either way."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from assay.cli.common import api_client, check, fail, unreachable

OptionalApiUrl = Annotated[
    Optional[str],
    typer.Option(envvar="ASSAY_API_URL", help="Read batches through this Assay API (default: the embedded store, --db)."),
]
EmbeddedDb = Annotated[Path, typer.Option(help="The embedded store (SQLite) that `assay run` wrote.")]


class EmbeddedStore:
    """Batches and noise in the embedded SQLite store."""

    def __init__(self, db: Path) -> None:
        if not db.is_file():
            fail(f"no embedded store at {db}: give --db (the file `assay run --db` wrote) or --api-url")
        from assay.workers import embedded

        embedded.configure_environment(db)
        self.name = str(db)

    def items(self, batch_id: uuid.UUID, by: str | None) -> list[Any]:
        from assay.scoring.store.db import new_session
        from assay.scoring.trust.gate import batch_items

        with new_session() as session:
            return batch_items(session, batch_id, by=by)

    def sigma(self, suite: str | None, criteria_hash: str) -> float | None:
        from assay.scoring.store.db import new_session
        from assay.scoring.trust.gate import noise_sigma

        with new_session() as session:
            return noise_sigma(session, criteria_hash)


class ApiStore:
    """Batches (their JSONL export, the same lines as a results file) and noise through the API."""

    def __init__(self, api_url: str, api_key: str | None) -> None:
        self.client = api_client(api_url, api_key)
        self.name = api_url

    def items(self, batch_id: uuid.UUID, by: str | None) -> list[Any]:
        import httpx

        from assay.scoring.trust.gate import items_from_results

        params = {"format": "jsonl", "status": "all"}
        try:
            with self.client.stream("GET", f"/api/v1/batches/{batch_id}/results", params=params) as response:
                if response.status_code >= 400:
                    response.read()
                    check(response)
                return items_from_results(response.iter_lines(), by=by, source=f"batch {batch_id}")
        except httpx.HTTPError as exc:
            unreachable(exc)

    def sigma(self, suite: str | None, criteria_hash: str) -> float | None:
        """The API's measured σw; None when the API does not know the suite (results files from an
        embedded run gated with --api-url)."""
        import httpx

        if suite is None:
            return None
        try:
            response = self.client.get(f"/api/v1/suites/{suite}/noise", params={"criteria_hash": criteria_hash})
        except httpx.HTTPError as exc:
            unreachable(exc)
        if response.status_code == 404:
            return None
        floors = check(response)["noise"]
        return floors[0]["sigma_w_total"] if floors else None


class Sources:
    """Where sides are read from: results files, and batches in one store, opened when first needed
    (the API with --api-url, else the embedded store, --db)."""

    def __init__(self, db: Path, api_url: str | None, api_key: str | None) -> None:
        self.db, self.api_url, self.api_key = db, api_url, api_key
        self._store: EmbeddedStore | ApiStore | None = None

    def store(self) -> EmbeddedStore | ApiStore:
        if self._store is None:
            self._store = ApiStore(self.api_url, self.api_key) if self.api_url else EmbeddedStore(self.db)
        return self._store

    def side(self, spec: str, by: str | None) -> tuple[list[Any], str]:
        """A side named by a results file's path or a batch id, and how the report names it."""
        from assay.scoring.trust.gate import items_from_file

        path = Path(spec)
        if path.is_file():
            return items_from_file(path, by=by), str(path)
        try:
            batch_id = uuid.UUID(spec)
        except ValueError:
            fail(f"{spec}: neither a results file nor a batch id")
        return self.store().items(batch_id, by), f"batch {batch_id}"

    def sigma(self, items: Sequence[Any]) -> float | None:
        """The judge's measured σw of the total for the items' one criteria hash, when a store has it."""
        hashes = {i.criteria_hash for i in items}
        if len(hashes) != 1 or (self._store is None and not self.api_url and not self.db.is_file()):
            return None
        suite = next((i.suite for i in items if i.suite), None)
        return self.store().sigma(suite, next(iter(hashes)))

    def gate(self, baseline: str, candidate: str, options: Any) -> tuple[Any, list[Any]]:
        """The gate's report, and the candidate's items."""
        from assay.scoring.trust.gate import evaluate

        if baseline == candidate:
            fail("the baseline and the candidate are the same: gate a run against another one")
        base, base_name = self.side(baseline, options.by)
        cand, cand_name = self.side(candidate, options.by)
        sigma = self.sigma([*base, *cand])
        report = evaluate(base, cand, options, sigma_w_total=sigma, baseline_name=base_name, candidate_name=cand_name)
        return report, cand

    def close(self) -> None:
        if isinstance(self._store, ApiStore):
            self._store.client.close()


@contextmanager
def sources(db: Path, api_url: str | None, api_key: str | None) -> Iterator[Sources]:
    """Sources for one command; a domain error (a bad results file, a missing batch) exits 2."""
    from assay.scoring.errors import AssayError

    opened = Sources(db, api_url, api_key)
    try:
        yield opened
    except AssayError as exc:
        fail(exc.message)
    finally:
        opened.close()
