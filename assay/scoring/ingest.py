"""Batch ingest: a streamed JSONL (or JSON array) body becomes a batch, its items and pending scores.

The whole upload is one transaction: a bad line (by default), a cut-off stream or a crash leaves
nothing behind. Rows go to the store in chunks (COPY on Postgres), so memory stays flat whatever
the size of the upload.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import queue
import re
import threading
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy import insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from assay.scoring import datasets
from assay.scoring.errors import InvalidInput, NotFound, PayloadTooLarge
from assay.scoring.kinds import Kind
from assay.scoring.store.models import Batch, Item, Score, SuiteRecord, utcnow
from assay.scoring.suites import canonical_json

WRITE_CHUNK = 2000
# A \u0000 escape (an odd run of backslashes before u0000): Postgres text and JSONB cannot store NUL.
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
# A UTF-8 byte order mark: RFC 8259 lets a parser ignore one that starts the body (Windows tools write it).
_BOM = b"\xef\xbb\xbf"
# Bytes that may parse to a non-finite float: NaN / Infinity literals, or a number past the float range.
_NON_FINITE_HINT = re.compile(rb"NaN|Infinity|\d[eE]\+?0*[1-9]\d{2}|\d{200}")


@dataclass(frozen=True)
class IngestLimits:
    max_items: int
    max_item_bytes: int
    max_body_bytes: int
    max_reported_bad_lines: int


@dataclass
class BadLine:
    line: int
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"line": self.line, "reason": self.reason}


@dataclass
class IngestResult:
    batch: Batch
    created: bool
    accepted: int = 0
    bad_lines: list[BadLine] = field(default_factory=list)
    bad_line_count: int = 0


class LineSplitter:
    """Incremental byte-stream → (line number, line) splitter with a per-line size cap.

    Detects a JSON array body (first non-blank byte ``[``) and then buffers it whole, up to the body
    limit, because a JSON array cannot be split into items without parsing it.
    """

    def __init__(self, max_line_bytes: int, max_body_bytes: int) -> None:
        self.max_line_bytes = max_line_bytes
        self.max_body_bytes = max_body_bytes
        self._buf = bytearray()
        self._line_no = 0
        self._oversize = False
        self._body_bytes = 0
        self._mode: str | None = None  # "jsonl" or "array"

    def feed(self, chunk: bytes) -> Iterator[tuple[int, bytes | BadLine]]:
        self._body_bytes += len(chunk)
        if self._body_bytes > self.max_body_bytes:
            raise PayloadTooLarge(f"upload exceeds {self.max_body_bytes} bytes", limit_bytes=self.max_body_bytes)
        if self._mode is None:
            self._buf += chunk
            chunk = b""
            if len(self._buf) < len(_BOM) and _BOM.startswith(self._buf):
                return  # nothing yet, or a byte order mark cut short: wait for more
            if self._buf.startswith(_BOM):
                del self._buf[: len(_BOM)]
            stripped = self._buf.lstrip()
            if not stripped:
                return
            self._mode = "array" if stripped[:1] == b"[" else "jsonl"
        self._buf += chunk
        if self._mode == "array":
            return
        yield from self._split()

    def _split(self) -> Iterator[tuple[int, bytes | BadLine]]:
        start = 0
        while True:
            nl = self._buf.find(b"\n", start)
            if nl < 0:
                break
            line = bytes(self._buf[start:nl])
            start = nl + 1
            self._line_no += 1
            if self._oversize:
                self._oversize = False
                yield self._line_no, BadLine(self._line_no, f"line longer than {self.max_line_bytes} bytes")
            elif len(line) > self.max_line_bytes:
                yield self._line_no, BadLine(self._line_no, f"line longer than {self.max_line_bytes} bytes")
            elif line.strip():
                yield self._line_no, line
        del self._buf[:start]
        if len(self._buf) > self.max_line_bytes:
            # Drop the rest of an oversize line as it streams in; report it when it ends.
            self._oversize = True
            self._buf.clear()

    def close(self) -> Iterator[tuple[int, bytes | BadLine]]:
        if self._mode == "array":
            yield from self._split_array()
            return
        self._buf += b"\n"
        yield from self._split()

    def _split_array(self) -> Iterator[tuple[int, bytes | BadLine]]:
        try:
            values = json.loads(bytes(self._buf))
        except (ValueError, RecursionError) as exc:  # ValueError: bad JSON, bad UTF-8, an int past 4300 digits
            raise InvalidInput(f"the body is not a valid JSON array: {exc}") from None
        self._buf.clear()
        if not isinstance(values, list):
            raise InvalidInput("a JSON body must be an array of items")
        for index, value in enumerate(values, start=1):
            line = json.dumps(value).encode()
            if len(line) > self.max_line_bytes:
                yield index, BadLine(index, f"item longer than {self.max_line_bytes} bytes")
            else:
                yield index, line


def contains_nul(value: Any) -> bool:
    """Whether any string in a JSON-like value (keys included) holds NUL, which Postgres cannot store."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any("\x00" in str(key) or contains_nul(inner) for key, inner in value.items())
    if isinstance(value, list):
        return any(contains_nul(inner) for inner in value)
    return False


def _non_finite(value: Any) -> bool:
    """Whether a parsed value holds a NaN or infinite float anywhere."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_non_finite(inner) for inner in value.values())
    if isinstance(value, list | tuple):
        return any(_non_finite(inner) for inner in value)
    return False


def _format_validation_error(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        loc = ".".join(str(p) for p in err["loc"])
        msg = err["msg"]
        if err["type"] == "json_invalid":
            parts.append(f"invalid JSON: {err.get('ctx', {}).get('error', msg)}")
        else:
            parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)


def item_content_hash(payload_json: str, dataset_hash: str | None = None) -> str:
    """SHA-256 of the item's canonical JSON, and of its dataset's content hash when it has one."""
    digest = hashlib.sha256(payload_json.encode())
    if dataset_hash:
        digest.update(b"\0" + dataset_hash.encode())
    return digest.hexdigest()


class BatchWriter:
    """Writes one batch upload inside the caller's transaction."""

    def __init__(
        self,
        session: Session,
        *,
        suite: SuiteRecord,
        kind: Kind,
        created_by: str,
        limits: IngestLimits,
        partial: bool = False,
        idempotency_key: str | None = None,
        budget_usd: float | None = None,
    ) -> None:
        self.session = session
        self.budget_usd = budget_usd
        self.suite = suite
        self.kind = kind
        self.created_by = created_by
        self.limits = limits
        self.partial = partial
        self.idempotency_key = idempotency_key
        self.splitter = LineSplitter(limits.max_item_bytes, limits.max_body_bytes)
        self._items: list[dict[str, Any]] = []
        self._scores: list[dict[str, Any]] = []
        self.result: IngestResult | None = None
        self._components_total = len(self._criteria_components())
        self._datasets: dict[str, str] = {}
        self._copier: _CopyThread | None = None

    def _criteria_components(self) -> list[str]:
        from assay.scoring.criteria import load_criteria

        return list(load_criteria(self.session, self.suite.current_criteria_hash).components)

    def begin(self) -> IngestResult:
        """Create the batch row, or find the batch a previous upload with the same key created."""
        if self.idempotency_key:
            existing = self.session.scalar(select(Batch).where(Batch.idempotency_key == self.idempotency_key))
            if existing is not None:
                self.result = IngestResult(existing, created=False, accepted=existing.total_items)
                return self.result
        batch = Batch(
            id=uuid.uuid4(),
            suite_name=self.suite.name,
            criteria_hash=self.suite.current_criteria_hash,
            status="planning",
            idempotency_key=self.idempotency_key,
            created_by=self.created_by,
            total_items=0,
            planned_position=-1,
            budget_usd=self.budget_usd,
            spent_usd=0.0,
            created_at=utcnow(),
        )
        self.session.add(batch)
        try:
            # Flush now: a concurrent upload with the same key waits on the unique index here.
            with self.session.begin_nested():
                self.session.flush()
        except IntegrityError:
            self.session.expunge(batch)
            existing = self.session.scalar(select(Batch).where(Batch.idempotency_key == self.idempotency_key))
            assert existing is not None
            self.result = IngestResult(existing, created=False, accepted=existing.total_items)
            return self.result
        self.result = IngestResult(batch, created=True)
        return self.result

    def feed(self, chunk: bytes) -> None:
        self._take(self.splitter.feed(chunk))

    def feed_all(self, chunks: Iterable[bytes]) -> None:
        for chunk in chunks:
            self.feed(chunk)

    def _take(self, lines: Iterable[tuple[int, bytes | BadLine]]) -> None:
        assert self.result is not None and self.result.created
        for line_no, line in lines:
            if isinstance(line, BadLine):
                self._bad(line)
                continue
            try:
                item = self.kind.item_model.model_validate_json(line)
            except ValidationError as exc:
                self._bad(BadLine(line_no, _format_validation_error(exc)))
                continue
            if _NON_FINITE_HINT.search(line) and _non_finite(item.model_dump()):
                # Parsed leniently, then stored as null by the JSON dump: refused instead of silently changed.
                self._bad(BadLine(line_no, "NaN, Infinity or a number past the float range is not valid JSON"))
                continue
            if self.result.accepted >= self.limits.max_items:
                raise PayloadTooLarge(
                    f"a batch holds at most {self.limits.max_items} items", limit_items=self.limits.max_items
                )
            try:
                dataset_hash = self._dataset_hash(getattr(item, "dataset", None))
            except NotFound as exc:
                self._bad(BadLine(line_no, exc.message))
                continue
            if _NUL_ESCAPE.search(line.decode("utf-8", "replace")):
                self._bad(BadLine(line_no, "contains a NUL character (\\u0000), which the store cannot hold"))
                continue
            self._add(line_no, item, dataset_hash)

    def _dataset_hash(self, reference: str | None) -> str | None:
        """Resolve an item's dataset reference (hash or name) once per upload."""
        if reference is None:
            return None
        if reference not in self._datasets:
            self._datasets[reference] = datasets.resolve(self.session, reference).content_hash
        return self._datasets[reference]

    def _bad(self, bad: BadLine) -> None:
        assert self.result is not None
        self.result.bad_line_count += 1
        if len(self.result.bad_lines) < self.limits.max_reported_bad_lines:
            self.result.bad_lines.append(bad)

    def _add(self, position: int, item: Any, dataset_hash: str | None) -> None:
        assert self.result is not None
        now = utcnow()
        payload = item.model_dump(mode="json", exclude_none=True)
        if dataset_hash is not None:
            payload["dataset"] = dataset_hash  # the payload names exactly the content it was scored on
        # Encoded once: the canonical text is both what is hashed and what is stored.
        payload_json = canonical_json(payload)
        item_id, score_id = _new_ids()
        self._items.append(
            dict(
                id=item_id,
                kind=self.kind.name,
                external_id=self.kind.external_id(item) if self.kind.external_id is not None else payload.get("id"),
                payload=JsonText(payload_json),
                content_hash=item_content_hash(payload_json, dataset_hash),
                dataset_hash=dataset_hash,
                origin_batch_id=self.result.batch.id,
                created_at=now,
            )
        )
        self._scores.append(
            dict(
                id=score_id,
                item_id=item_id,
                batch_id=self.result.batch.id,
                position=position,
                suite_name=self.suite.name,
                criteria_hash=self.suite.current_criteria_hash,
                status="pending",
                partial=False,
                components_total=self._components_total,
                components_landed=0,
                cost_usd=0.0,
                triggered_by=self.created_by,
                created_at=now,
            )
        )
        self.result.accepted += 1
        if len(self._items) >= WRITE_CHUNK:
            self._flush_rows()

    def _flush_rows(self) -> None:
        if self.result is not None and self.result.bad_line_count and not self.partial:
            self._items.clear()
            self._scores.clear()
            return
        if self._items:
            if self.session.get_bind().dialect.name == "postgresql":
                if self._copier is None:
                    self._copier = _CopyThread(self.session.connection().connection.driver_connection)
                self._copier.send(Item, self._items)
                self._copier.send(Score, self._scores)  # after its items: the foreign key is checked per row
            else:
                for model, rows in ((Item, self._items), (Score, self._scores)):
                    decoded = [{k: json.loads(v) if isinstance(v, JsonText) else v for k, v in r.items()} for r in rows]
                    self.session.execute(insert(model), decoded)
        self._items = []
        self._scores = []

    def abort(self) -> None:
        """Stop sending rows (the caller rolls back). Safe to call more than once."""
        if self._copier is not None:
            self._copier.close(raise_error=False)

    def finish(self) -> IngestResult:
        assert self.result is not None
        if not self.result.created:
            return self.result
        self._take(self.splitter.close())
        self._flush_rows()
        if self._copier is not None:
            self._copier.close()
        result = self.result
        if result.bad_line_count and not self.partial:
            raise InvalidInput(
                f"{result.bad_line_count} bad line(s); nothing was written. "
                "Fix them, or upload with partial=true to accept the good lines.",
                bad_lines=[b.to_dict() for b in result.bad_lines],
                bad_line_count=result.bad_line_count,
            )
        if result.accepted == 0:
            raise InvalidInput(
                "the upload holds no valid item",
                bad_lines=[b.to_dict() for b in result.bad_lines],
                bad_line_count=result.bad_line_count,
            )
        result.batch.total_items = result.accepted
        if result.bad_line_count:
            result.batch.summary = {"rejected_lines": result.bad_line_count}
        self.session.flush()
        return result


class JsonText(str):
    """A JSON document already encoded (canonical): written as is, never encoded again."""


def _new_ids() -> tuple[uuid.UUID, uuid.UUID]:
    raw = os.urandom(32)
    return uuid.UUID(bytes=raw[:16], version=4), uuid.UUID(bytes=raw[16:], version=4)


# COPY text format: backslash, tab, newline and carriage return are escaped; NULL is \N.
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _copy_field(value: Any) -> str:
    if value is None:
        return "\\N"
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict | list):
        value = json.dumps(value)
    return str(value).translate(_COPY_ESCAPES)


class _CopyThread:
    """COPY chunks sent from a thread, so the next chunk is parsed while Postgres ingests this one.

    Nothing else uses the connection meanwhile except the writer's own rare look-ups (dataset names),
    which psycopg serialises behind the running COPY. The queue is short: memory stays flat."""

    def __init__(self, driver_connection: Any) -> None:
        self._connection = driver_connection
        self._jobs: queue.Queue[tuple[str, list[str], str] | None] = queue.Queue(maxsize=2)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="ingest-copy", daemon=True)
        self._thread.start()

    def send(self, model: type, rows: list[dict[str, Any]]) -> None:
        if self._error is not None:
            raise self._error
        columns = list(rows[0])
        text = "".join("\t".join(_copy_field(row[c]) for c in columns) + "\n" for row in rows)
        self._jobs.put((model.__table__.name, columns, text))  # type: ignore[attr-defined]

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            if self._error is not None:
                continue  # drain: after a failure nothing more is sent
            table, columns, text = job
            try:
                with self._connection.cursor() as cur:
                    with cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
                        copy.write(text)
            except BaseException as exc:  # handed to the caller's thread, which rolls back
                self._error = exc

    def close(self, *, raise_error: bool = True) -> None:
        """Wait until every chunk sent is written; raise the first error unless told not to."""
        if self._thread.is_alive():
            self._jobs.put(None)
            self._thread.join()
        if raise_error and self._error is not None:
            raise self._error
