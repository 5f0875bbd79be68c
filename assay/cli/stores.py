"""Where a command reads and writes: the embedded store (SQLite, ``--db``, what ``assay run`` wrote)
or the Assay API (``--api-url``). One rule for every command: with ``--api-url`` (or ``ASSAY_API_URL``)
the API, else the embedded store.

Both stores answer with the same documents: the API's routes and the embedded store call the same
domain functions (``assay.scoring``) and shape their answers with the same response models, so a
command prints the same for the same data either way."""

from __future__ import annotations

import os
import signal
import sys
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Annotated, Any, Optional

import typer
from rich.markup import escape

from assay.cli.common import (
    EXIT_INCOMPLETE,
    api_client,
    check,
    fail,
    follow,
    live_printer,
    progress_bar,
    request,
    unreachable,
    watch,
)

OptionalApiUrl = Annotated[
    Optional[str],
    typer.Option(
        envvar="ASSAY_API_URL",
        help="Use this Assay API (default: the embedded store, --db). Also read from ASSAY_API_URL.",
    ),
]
EmbeddedDb = Annotated[
    Path, typer.Option(help="The embedded store (the SQLite file `assay run --db` wrote); not used with --api-url.")
]
DEFAULT_DB = Path(".assay/embedded.db")


def _text_sink(output: Path | None) -> IO[str]:
    # newline="": CSV lines end in \r\n as written, on every platform.
    return output.open("w", newline="") if output is not None else sys.stdout


class ApiStore:
    """A command's reads and writes through the Assay API."""

    def __init__(self, api_url: str, api_key: str | None) -> None:
        self.client = api_client(api_url, api_key)
        self.name = api_url

    def close(self) -> None:
        self.client.close()

    def _stream(self, path: str, params: dict[str, Any], write: Any, binary: bool = False) -> None:
        import httpx

        try:
            with self.client.stream("GET", path, params=params) as response:
                if response.status_code >= 400:
                    response.read()
                    check(response)
                for chunk in response.iter_bytes() if binary else response.iter_text():
                    write(chunk)
        except httpx.HTTPError as exc:
            unreachable(exc)

    # --- batches
    def batch(self, batch_id: str) -> dict[str, Any]:
        return request(self.client.get, f"/api/v1/batches/{batch_id}")

    def watch(self, batch_id: str) -> dict[str, Any]:
        return watch(self.client, batch_id)

    def slices(self, batch_id: str, by: str) -> dict[str, Any]:
        return request(self.client.get, f"/api/v1/batches/{batch_id}/slices", params={"by": by})

    def write_results(self, batch_id: str, fmt: str, status: str, output: Path | None) -> None:
        if fmt == "xlsx":
            assert output is not None
            with output.open("wb") as sink:
                self._stream(f"/api/v1/batches/{batch_id}/report.xlsx", {}, sink.write, binary=True)
            return
        sink = _text_sink(output)
        try:
            self._stream(f"/api/v1/batches/{batch_id}/results", {"format": fmt, "status": status}, sink.write)
        finally:
            if output is not None:
                sink.close()

    # --- compare and diff
    def compare(self, a: str, b: str, by: str | None) -> dict[str, Any]:
        return request(self.client.get, "/api/v1/compare", params={"a": a, "b": b} | ({"by": by} if by else {}))

    def write_compare_csv(self, a: str, b: str, target: Path) -> None:
        with target.open("w", newline="") as sink:
            self._stream("/api/v1/compare", {"a": a, "b": b, "format": "csv"}, sink.write)

    def diff(self, suite: str, from_hash: str, to_hash: str, limit: int, flips_only: bool) -> dict[str, Any]:
        params = {"suite": suite, "from": from_hash, "to": to_hash, "limit": limit}
        return request(self.client.get, "/api/v1/criteria/diff", params=params | ({"flips_only": "true"} if flips_only else {}))

    def write_diff_csv(self, suite: str, from_hash: str, to_hash: str, target: Path) -> None:
        with target.open("w", newline="") as sink:
            params = {"suite": suite, "from": from_hash, "to": to_hash, "format": "csv"}
            self._stream("/api/v1/criteria/diff", params, sink.write)

    # --- re-scoring
    def rescore(self, suite: str, options: dict[str, Any]) -> dict[str, Any]:
        return request(self.client.post, "/api/v1/rescore", json={"suite": suite, **options})

    def score_rescore(self, answer: dict[str, Any], options: dict[str, Any], wait: bool) -> dict[str, Any] | None:
        """The run's batch's final view with ``wait``; None without (the API's workers score it)."""
        return watch(self.client, answer["batch_id"], live=False) if wait else None

    # --- suites and their criteria versions
    def suites(self) -> dict[str, Any]:
        return request(self.client.get, "/api/v1/suites")

    def criteria_versions(self, suite: str) -> dict[str, Any]:
        return request(self.client.get, f"/api/v1/suites/{suite}/criteria")

    def criteria_version(self, suite: str, version: int) -> dict[str, Any]:
        return request(self.client.get, f"/api/v1/suites/{suite}/criteria/{version}")

    # --- the judge's noise, labels
    def noise(self, suite: str, criteria_hash: str | None) -> dict[str, Any]:
        params = {"criteria_hash": criteria_hash} if criteria_hash else None
        return request(self.client.get, f"/api/v1/suites/{suite}/noise", params=params)

    def agreement(self, suite: str, criteria_hash: str | None, by: str | None) -> dict[str, Any]:
        params = ({"criteria_hash": criteria_hash} if criteria_hash else {}) | ({"by": by} if by else {})
        return request(self.client.get, f"/api/v1/suites/{suite}/agreement", params=params)

    def push_labels(self, suite: str, body: bytes, content_type: str, partial: bool) -> dict[str, Any]:
        return request(
            self.client.post,
            f"/api/v1/suites/{suite}/labels",
            params={"partial": str(partial).lower()},
            content=body,
            headers={"Content-Type": content_type},
        )

    # --- the gate
    def items(self, batch_id: uuid.UUID, by: str | None) -> list[Any]:
        from assay.scoring.trust.gate import items_from_results

        import httpx

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


def _batch_id(spec: str) -> uuid.UUID:
    try:
        return uuid.UUID(spec)
    except ValueError:
        fail(f"{spec!r} is not a batch id (a UUID, as `assay run` and `assay status` print it)")


class EmbeddedStore:
    """A command's reads and writes in the embedded SQLite store, through the domain functions the
    API's routes call, answered with the API's own response models."""

    def __init__(self, db: Path, concurrency: int = 8) -> None:
        if not db.is_file():
            fail(f"no embedded store at {db}: give --db (the file `assay run --db` wrote) or --api-url")
        from assay.workers import embedded

        embedded.configure_environment(db)
        from assay.scoring.store.db import migrate

        migrate()  # a store an older Assay wrote gets the tables this one reads
        self.db, self.concurrency, self.name = db, concurrency, str(db)

    def close(self) -> None:
        pass

    # --- batches
    def batch(self, batch_id: str) -> dict[str, Any]:
        from assay.api.schemas import BatchOut
        from assay.scoring.intake import batches as svc
        from assay.scoring.reports.views import batch_view
        from assay.scoring.store.db import transaction

        with transaction() as session:
            batch = svc.get_batch(session, _batch_id(batch_id))
            return BatchOut(**batch_view(batch, svc.progress(session, batch))).model_dump(mode="json")

    def watch(self, batch_id: str) -> dict[str, Any]:
        """Follow a batch another process (`assay run`) is scoring into this store."""
        return follow(lambda: self.batch(batch_id))

    def slices(self, batch_id: str, by: str) -> dict[str, Any]:
        from assay.api.schemas import SlicedSummaryOut
        from assay.scoring.intake import batches as svc
        from assay.scoring.pipeline.summaries import sliced_summary
        from assay.scoring.store.db import transaction

        with transaction() as session:
            batch = svc.get_batch(session, _batch_id(batch_id))
            summary = sliced_summary(session, batch.id, by)
            return SlicedSummaryOut(batch_id=str(batch.id), **summary).model_dump(mode="json")

    def write_results(self, batch_id: str, fmt: str, status: str, output: Path | None) -> None:
        from assay.scoring.intake import batches as svc
        from assay.scoring.reports import batch_reports, exports
        from assay.scoring.store.db import new_session

        session = new_session()
        try:
            if fmt == "xlsx":
                assert output is not None
                ctx = batch_reports.open_report(session, _batch_id(batch_id))
                with output.open("wb") as sink:
                    batch_reports.write_xlsx(ctx, svc.iter_results(session, ctx.batch_id, status="all"), sink)
                return
            chunks = exports.results_export(session, _batch_id(batch_id), status, fmt)  # type: ignore[arg-type]
            first = next(chunks, "")  # a missing batch fails here, before the output file is created
            sink = _text_sink(output)
            try:
                sink.write(first)
                for chunk in chunks:
                    sink.write(chunk)
            finally:
                if output is not None:
                    sink.close()
        finally:
            session.close()

    # --- compare and diff
    def compare(self, a: str, b: str, by: str | None) -> dict[str, Any]:
        from assay.api.routes.compare import comparison_out
        from assay.scoring.store.db import transaction
        from assay.scoring.trust import compare as svc

        with transaction() as session:
            return comparison_out(svc.compare_batches(session, _batch_id(a), _batch_id(b), by)).model_dump(mode="json")

    def write_compare_csv(self, a: str, b: str, target: Path) -> None:
        from assay.api.routes.compare import pairs_csv
        from assay.scoring.store.db import transaction
        from assay.scoring.trust import compare as svc

        with transaction() as session:
            batch_a, batch_b = svc.load_batches(session, _batch_id(a), _batch_id(b))
            item_floor = svc.item_floor_for(session, batch_a, batch_b)
        with target.open("w", newline="") as sink:
            sink.writelines(pairs_csv(batch_a.id, batch_b.id, item_floor))

    def diff(self, suite: str, from_hash: str, to_hash: str, limit: int, flips_only: bool) -> dict[str, Any]:
        from assay.api.routes.criteria import criteria_diff_out
        from assay.scoring.rescoring import diff as svc
        from assay.scoring.store.db import transaction

        with transaction() as session:
            result = svc.criteria_diff(
                session, suite=suite, from_hash=from_hash, to_hash=to_hash, limit=limit, offset=0, order="delta",
                flips_only=flips_only,
            )
            return criteria_diff_out(result, limit, 0).model_dump(mode="json")

    def write_diff_csv(self, suite: str, from_hash: str, to_hash: str, target: Path) -> None:
        from assay.api.routes.criteria import diff_csv
        from assay.scoring.rescoring import diff as svc
        from assay.scoring.store.db import transaction

        with transaction() as session:
            old, new = svc.resolve_pair(session, suite=suite, from_hash=from_hash, to_hash=to_hash)
            item_floor = svc.item_noise_floor(session, old.criteria_hash, new.criteria_hash)
        with target.open("w", newline="") as sink:
            sink.writelines(diff_csv(suite, old.criteria_hash, new.criteria_hash, False, item_floor))

    # --- re-scoring
    def rescore(self, suite: str, options: dict[str, Any]) -> dict[str, Any]:
        """As ``POST /api/v1/rescore``; a suite given as a file's path is registered first (its criteria
        as the file has them now), as `assay run --suite FILE` does."""
        from assay.api.routes.rescore import RescoreOut
        from assay.cli.common import suite_path
        from assay.scoring.rescoring import rescore as svc
        from assay.scoring.store.db import transaction
        from assay.scoring.suites.loader import load_model_catalog
        from assay.settings import get_settings
        from assay.workers import embedded

        suite_file = suite_path(suite)
        if suite_file is not None and not suite_file.is_file():
            fail(f"--suite {suite}: no such suite file")
        name = embedded.register_suites(suite_file or suite)
        settings = get_settings()
        with transaction() as session:
            answer = svc.start_rescore(
                session,
                name,
                svc.Selection(stale_only=options["stale_only"], partial=options["partial"]),
                dry_run=options["dry_run"],
                lane=options["lane"],
                budget_usd=options["budget_usd"],
                triggered_by=os.environ.get("USER", "cli"),
                catalog=load_model_catalog(settings.config_dir),
                judge_key_set=settings.anthropic_api_key is not None,
            )
        return RescoreOut(**answer).model_dump(mode="json")

    def score_rescore(self, answer: dict[str, Any], options: dict[str, Any], wait: bool) -> dict[str, Any] | None:
        """Score the run's batch here and now (no worker runs it later), whatever ``wait`` says."""
        from assay.workers import embedded

        batch_id = uuid.UUID(answer["batch_id"])
        start = embedded.rescore_start(batch_id, options["stale_only"], options["partial"])
        return score_batch(batch_id, self.db, concurrency=self.concurrency, live=False, start=start)

    # --- the judge's noise, labels
    def suites(self) -> dict[str, Any]:
        from assay.scoring.store.db import transaction
        from assay.scoring.suites.api_suites import list_suites

        with transaction() as session:
            return {"suites": list_suites(session)}

    def criteria_versions(self, suite: str) -> dict[str, Any]:
        from assay.scoring.store.db import transaction
        from assay.scoring.suites.history import criteria_versions

        with transaction() as session:
            return criteria_versions(session, suite)

    def criteria_version(self, suite: str, version: int) -> dict[str, Any]:
        from assay.scoring.store.db import transaction
        from assay.scoring.suites.history import criteria_version

        with transaction() as session:
            return criteria_version(session, suite, version)

    def noise(self, suite: str, criteria_hash: str | None) -> dict[str, Any]:
        from assay.scoring.store.db import transaction
        from assay.scoring.trust.calibration import noise_report

        with transaction() as session:
            return noise_report(session, suite, criteria_hash)

    def agreement(self, suite: str, criteria_hash: str | None, by: str | None) -> dict[str, Any]:
        from assay.scoring.store.db import transaction
        from assay.scoring.trust.agreement import suite_agreement

        with transaction() as session:
            return suite_agreement(session, suite, criteria_hash, by=by)

    def push_labels(self, suite: str, body: bytes, content_type: str, partial: bool) -> dict[str, Any]:
        from assay.scoring.store.db import transaction
        from assay.scoring.trust import labels
        from assay.settings import get_settings

        rows = (labels.csv_rows if content_type == "text/csv" else labels.jsonl_rows)(body)
        with transaction() as session:
            return labels.store_labels(
                session, suite, rows, uploader=os.environ.get("USER", "cli"), partial=partial,
                max_reported_bad_lines=get_settings().max_reported_bad_lines,
            ).to_dict()

    # --- the gate
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


Store = ApiStore | EmbeddedStore


def make_store(db: Path, api_url: str | None, api_key: str | None) -> Store:
    """The one rule: the API with --api-url (or ASSAY_API_URL), else the embedded store at --db."""
    return ApiStore(api_url, api_key) if api_url else EmbeddedStore(db)


@contextmanager
def open_store(db: Path, api_url: str | None, api_key: str | None) -> Iterator[Store]:
    """The command's store; a domain error of the embedded store (a missing batch or suite, bad rows)
    is reported as the API would (its message, the bad lines) and exits 2."""
    from assay.cli.common import report_domain_error
    from assay.scoring.errors import AssayError

    store = make_store(db, api_url, api_key)
    try:
        yield store
    except AssayError as exc:
        report_domain_error(exc)
        raise typer.Exit(2) from None
    finally:
        store.close()


class Sources:
    """Where sides are read from: results files, and batches in one store, opened when first needed
    (the API with --api-url, else the embedded store, --db)."""

    def __init__(self, db: Path, api_url: str | None, api_key: str | None) -> None:
        self.db, self.api_url, self.api_key = db, api_url, api_key
        self._store: Store | None = None

    def store(self) -> Store:
        if self._store is None:
            self._store = make_store(self.db, self.api_url, self.api_key)
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
        if self._store is not None:
            self._store.close()


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


def score_batch(
    batch_id: Any, db: Path, *, concurrency: int, live: bool | None, start: Any = None
) -> dict[str, Any]:
    """Score a batch of the embedded store with the in-process worker pool, progress (and each result's
    live lines) on stderr; its final view. Exit 3 when it stalls. ``start``: ``run_batch``'s."""
    from assay.settings import get_settings
    from assay.workers import embedded

    worker_log = db.with_suffix(".log")
    with progress_bar() as bar:
        task = bar.add_task("scoring", total=None, passed=0, failed=0, errored=0)

        def show(view: dict[str, Any]) -> None:
            p = view["progress"]
            bar.update(task, total=p["total"], completed=p["done"], passed=p["passed"], failed=p["failed"], errored=p["errored"])

        def problem(message: str) -> None:
            bar.console.print(f"[yellow]worker error:[/yellow] {escape(message)}", highlight=False)

        def sandbox_started(message: str) -> None:
            bar.console.print(escape(message), highlight=False)

        # SIGTERM unwinds like Ctrl-C, so the worker stops and the sandbox's work folder is removed.
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
        try:
            return embedded.run_batch(
                batch_id,
                concurrency=concurrency,
                on_progress=show,
                on_finished=live_printer(bar, live, total=None),
                on_problem=problem,
                on_sandbox_start=sandbox_started,
                stall_seconds=get_settings().embedded_stall_seconds,
                log_file=worker_log,
                start=start,
            )
        except embedded.Stalled as exc:
            fail(f"batch {batch_id} stopped: {exc} (the worker's log: {worker_log})", EXIT_INCOMPLETE)


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)
