"""Batch ingest: a streamed JSONL (or JSON array) body becomes a batch, its items and pending scores.

The whole upload is one transaction: a bad line (by default), a cut-off stream or a crash leaves
nothing behind. Rows go to the store in chunks (COPY on Postgres), so memory stays flat whatever
the size of the upload.
"""

from __future__ import annotations

import hashlib
import json
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
from sqlalchemy import delete, func, insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from assay.scoring.errors import AssayError, InvalidInput, NotFound, PayloadTooLarge
from assay.scoring.intake import datasets, idempotency, strict_json
from assay.scoring.intake.idempotency import IdempotencyKey
from assay.scoring.intake.strict_json import JsonRejected
from assay.scoring.kinds import Kind
from assay.scoring.store.models import Batch, Item, Score, SuiteRecord, utcnow
from assay.scoring.suites.loader import canonical_json

WRITE_CHUNK = 2000
# A \u0000 escape (an odd run of backslashes before u0000): Postgres text and JSONB cannot store NUL.
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
# A UTF-8 byte order mark: RFC 8259 lets a parser ignore one that starts the body (Windows tools write it).
_BOM = b"\xef\xbb\xbf"


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

    A body whose first non-blank byte is ``[`` is a JSON array: its items are split out as they
    stream in by :class:`ArraySplitter`, and numbered by their index.
    """

    def __init__(self, max_line_bytes: int, max_body_bytes: int) -> None:
        self.max_line_bytes = max_line_bytes
        self.max_body_bytes = max_body_bytes
        self._buf = bytearray()
        self._line_no = 0
        self._oversize = False
        self._body_bytes = 0
        self._mode: str | None = None  # "jsonl" or "array"
        self._array: ArraySplitter | None = None

    @property
    def is_array(self) -> bool:
        return self._array is not None

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
            if stripped[:1] == b"[":
                self._mode = "array"
                self._array = ArraySplitter(self.max_line_bytes)
                chunk, self._buf = bytes(self._buf), bytearray()
            else:
                self._mode = "jsonl"
        if self._array is not None:
            yield from self._array.feed(chunk)
            return
        self._buf += chunk
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
        if self._array is not None:
            yield from self._array.close()
            return
        self._buf += b"\n"
        yield from self._split()


# A string's body: everything up to its closing quote, or up to the end of the data (an escape cut
# off by the end of a chunk stops before its backslash).
_STRING_BODY = re.compile(rb'[^"\\]*+(?:\\.[^"\\]*+)*+', re.DOTALL)
# Inside an item, what changes the nesting: a whole string, a bracket, or a lone quote that starts
# a string the data does not finish.
_TOKEN = re.compile(rb'"' + _STRING_BODY.pattern + rb'"|["\[\]{}]', re.DOTALL)
_WHITESPACE = re.compile(rb"[ \t\r\n]*+")
# An item that is no object, array or string (a number, true, null, or junk): up to a delimiter.
_SCALAR = re.compile(rb'[^ \t\r\n,\[\]{}"]*+')
_QUOTE, _BACKSLASH = ord('"'), ord("\\")


class ArraySplitter:
    """Incremental byte-stream of one JSON array → (index, item bytes), like :class:`LineSplitter`.

    It reads only what separates the items (strings, brackets, commas) and hands each item's bytes
    to the parser every JSONL line goes through, so an item is refused for the same reasons as a
    line, and named while the rest of the body is still streaming in; memory holds one chunk and
    one item. An item over the size cap is dropped as it streams and reported when it ends. A body
    that breaks the array's own syntax (a missing comma, a trailing comma, data after the closing
    bracket, a cut-off end) is refused whole, with its line and column. (ijson was considered: its
    parser stops at the first bad item, and turns lone surrogates into "?".)
    """

    def __init__(self, max_item_bytes: int) -> None:
        self.max_item_bytes = max_item_bytes
        self._buf = bytearray()
        self._pos = 0  # the next byte to read, in _buf
        self._expect = "open"  # "open" '[', "first" an item or ']', "item", "next" ',' or ']', "done"
        self._index = 0
        # The item being read: where it starts in _buf, its nesting depth, whether a string is open.
        self._item_start: int | None = None
        self._scalar = False
        self._depth = 0
        self._in_string = False
        self._oversize = False
        # Where _buf starts in the body, for messages: its byte offset, line, and that line's offset.
        self._offset = 0
        self._line = 1
        self._line_offset = 0

    def feed(self, chunk: bytes) -> Iterator[tuple[int, bytes | BadLine]]:
        self._buf += chunk
        yield from self._items(final=False)
        self._drop_read_bytes()

    def close(self) -> Iterator[tuple[int, bytes | BadLine]]:
        yield from self._items(final=True)
        if self._item_start is not None:
            raise self._invalid(len(self._buf), f"the body ended inside item {self._index}")
        if self._expect != "done":
            raise self._invalid(len(self._buf), "the body ended before the array's closing ']'")

    def _items(self, final: bool) -> Iterator[tuple[int, bytes | BadLine]]:
        buf = self._buf
        while True:
            if self._item_start is not None:
                if not self._read_item(final):
                    return
                yield self._index, self._finish_item()
                self._expect = "next"
                continue
            pos = self._pos = _WHITESPACE.match(buf, self._pos).end()
            if pos == len(buf):
                return
            byte = buf[pos]
            if self._expect == "open":  # LineSplitter hands over a body that starts with '['
                self._pos, self._expect = pos + 1, "first"
            elif self._expect == "next" and byte in b",]":
                self._pos, self._expect = pos + 1, "item" if byte == ord(",") else "done"
            elif self._expect == "first" and byte == ord("]"):
                self._pos, self._expect = pos + 1, "done"
            elif self._expect in ("first", "item") and byte not in b",]":
                self._start_item(pos)
            elif self._expect == "next":
                raise self._invalid(pos, f"expected ',' or ']' after item {self._index}, found {_shown(byte)}")
            elif self._expect == "done":
                raise self._invalid(pos, f"unexpected {_shown(byte)} after the array's closing ']'")
            else:
                raise self._invalid(pos, f"expected an item, found {_shown(byte)}")

    def _start_item(self, pos: int) -> None:
        self._index += 1
        self._item_start = pos
        self._oversize = False
        byte = self._buf[pos]
        self._scalar = byte not in b'[{"'
        self._depth = 1 if byte in b"[{" else 0
        self._in_string = byte == _QUOTE
        self._pos = pos if self._scalar else pos + 1

    def _read_item(self, final: bool) -> bool:
        """Read on through the current item; True once it has ended (at ``_pos``)."""
        ended = self._read_scalar(final) if self._scalar else self._read_nested()
        assert self._item_start is not None
        if not ended and self._pos - self._item_start > self.max_item_bytes:
            # Keep reading the item for its end, but not its bytes.
            self._oversize = True
            self._item_start = self._pos
        return ended

    def _read_scalar(self, final: bool) -> bool:
        self._pos = _SCALAR.match(self._buf, self._pos).end()
        return self._pos < len(self._buf) or final

    def _read_nested(self) -> bool:
        """An object, an array or a string: read until its nesting closes."""
        buf, pos = self._buf, self._pos
        if self._in_string:  # a string cut off by the end of the previous chunk
            pos = _STRING_BODY.match(buf, pos).end()
            if pos == len(buf) or buf[pos] == _BACKSLASH:  # cut off again
                self._pos = pos
                return False
            pos += 1
            self._in_string = False
            if self._depth == 0:
                self._pos = pos
                return True
        for token in _TOKEN.finditer(buf, pos):
            byte = buf[token.start()]
            if byte == _QUOTE:
                if token.end() - token.start() == 1:  # a string that does not end in this chunk
                    self._in_string = True
                    self._pos = token.end()
                    return False
            elif byte in b"[{":
                self._depth += 1
            else:
                self._depth -= 1
                if self._depth == 0:
                    self._pos = token.end()
                    return True
        self._pos = len(buf)
        return False

    def _finish_item(self) -> bytes | BadLine:
        assert self._item_start is not None
        start, self._item_start = self._item_start, None
        if self._oversize or self._pos - start > self.max_item_bytes:
            return BadLine(self._index, f"item longer than {self.max_item_bytes} bytes")
        return bytes(self._buf[start : self._pos])

    def _drop_read_bytes(self) -> None:
        keep_from = self._pos if self._item_start is None else self._item_start
        newlines = self._buf.count(b"\n", 0, keep_from)
        if newlines:
            self._line += newlines
            self._line_offset = self._offset + self._buf.rfind(b"\n", 0, keep_from) + 1
        self._offset += keep_from
        del self._buf[:keep_from]
        self._pos -= keep_from
        if self._item_start is not None:
            self._item_start -= keep_from

    def _invalid(self, pos: int, problem: str) -> InvalidInput:
        newlines = self._buf.count(b"\n", 0, pos)
        line = self._line + newlines
        line_offset = self._offset + self._buf.rfind(b"\n", 0, pos) + 1 if newlines else self._line_offset
        column = self._offset + pos - line_offset + 1
        return InvalidInput(f"the body is not a valid JSON array: {problem} at line {line} column {column}")


def _shown(byte: int) -> str:
    return repr(chr(byte)) if 0x20 <= byte < 0x7F else f"byte 0x{byte:02x}"


def contains_nul(value: Any) -> bool:
    """Whether any string in a JSON-like value (keys included) holds NUL, which Postgres cannot store."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any("\x00" in str(key) or contains_nul(inner) for key, inner in value.items())
    if isinstance(value, list):
        return any(contains_nul(inner) for inner in value)
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
        idempotency: IdempotencyKey | None = None,
        budget_usd: float | None = None,
    ) -> None:
        self.session = session
        self.budget_usd = budget_usd
        self.suite = suite
        self.kind = kind
        self.created_by = created_by
        self.limits = limits
        self.partial = partial
        self.idempotency = idempotency
        # The body's hash, for the key's fingerprint: known only once the body has been read whole.
        self._body_digest = hashlib.sha256() if idempotency is not None else None
        self.splitter = LineSplitter(limits.max_item_bytes, limits.max_body_bytes)
        self._items: list[dict[str, Any]] = []
        self._scores: list[dict[str, Any]] = []
        self.result: IngestResult | None = None
        self.criteria = self._load_criteria()
        self._components_total = len(self.criteria.rows)
        self._datasets: dict[str, str] = {}
        self._copier: _CopyThread | None = None

    def _load_criteria(self) -> Any:
        from assay.scoring.suites.criteria import load_criteria

        return load_criteria(self.session, self.suite.current_criteria_hash)

    def _parse(self, line: bytes) -> Any:
        """One line as the kind's item. A kind with ``prepare_payload`` (the generic kind's field
        mapping) gets the parsed object first, so the stored item is the canonical one."""
        if self.kind.prepare_payload is None:
            return strict_json.validate(self.kind.item_model, line)
        payload = self.kind.prepare_payload(strict_json.loads(line), self.criteria)
        return self.kind.item_model.model_validate(payload)

    def begin(self) -> IngestResult:
        """Create the batch row, or find the batch a previous upload with the same key created (then
        the body is only hashed, and :meth:`finish` checks that it is the same upload)."""
        if self.idempotency is not None:
            idempotency.hold(self.session, self.idempotency)
            existing = idempotency.batch_for(self.session, self.idempotency)
            if existing is not None:
                return self._replay(existing)
        batch = Batch(
            id=uuid.uuid4(),
            suite_name=self.suite.name,
            criteria_hash=self.suite.current_criteria_hash,
            status="planning",
            idempotency_key=self.idempotency.key if self.idempotency else None,
            idempotency_scope=self.idempotency.scope if self.idempotency else None,
            created_by=self.created_by,
            total_items=0,
            planned_position=-1,
            budget_usd=self.budget_usd,
            spent_usd=0.0,
            created_at=utcnow(),
        )
        self.session.add(batch)
        try:
            # Flush now: on SQLite, which has no lock to hold the key with, a concurrent upload with
            # the same key meets the unique index here.
            with self.session.begin_nested():
                self.session.flush()
        except IntegrityError:
            self.session.expunge(batch)
            assert self.idempotency is not None
            existing = idempotency.batch_for(self.session, self.idempotency)
            assert existing is not None
            return self._replay(existing)
        self.result = IngestResult(batch, created=True)
        return self.result

    def _replay(self, existing: Batch) -> IngestResult:
        self.result = IngestResult(existing, created=False, accepted=existing.total_items)
        return self.result

    def feed(self, chunk: bytes) -> None:
        if self._body_digest is not None:
            self._body_digest.update(chunk)
        assert self.result is not None
        if self.result.created:
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
                item = self._parse(line)
            except ValidationError as exc:
                self._bad(BadLine(line_no, _format_validation_error(exc)))
                continue
            except JsonRejected as exc:
                self._bad(BadLine(line_no, exc.message))
                continue
            except AssayError as exc:  # the kind's prepare_payload: a mapping that does not fit the line
                self._bad(BadLine(line_no, exc.message))
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
        fingerprint = None
        if self.idempotency is not None:
            assert self._body_digest is not None
            fingerprint = self.idempotency.fingerprint(self._body_digest.hexdigest())
            if not self.result.created:
                idempotency.check_retry(self.result.batch, self.idempotency, fingerprint)
                return self.result
        self._take(self.splitter.close())
        self._flush_rows()
        if self._copier is not None:
            self._copier.close()
        self._refuse_duplicate_ids()
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
        result.batch.idempotency_fingerprint = fingerprint
        if result.bad_line_count:
            result.batch.summary = {"rejected_lines": result.bad_line_count}
        self.session.flush()
        return result

    def _refuse_duplicate_ids(self) -> None:
        """A line whose id an earlier line of the upload has is a bad line: ids pair the items of one
        batch with another's, so they are unique within a batch (lines without an id are not
        compared). The store finds them among the rows written, so memory stays flat."""
        assert self.result is not None
        result, batch_id = self.result, self.result.batch.id
        repeated = (
            select(Item.external_id)
            .where(Item.origin_batch_id == batch_id, Item.external_id.is_not(None))
            .group_by(Item.external_id)
            .having(func.count() > 1)
        )
        ranked = (
            select(
                Score.id.label("score_id"),
                Score.position,
                Item.external_id,
                func.min(Score.position).over(partition_by=Item.external_id).label("first"),
            )
            .join(Item, Item.id == Score.item_id)
            .where(Score.batch_id == batch_id, Item.external_id.in_(repeated))
            .subquery()
        )
        later = select(ranked).where(ranked.c.position > ranked.c.first)
        count = self.session.scalar(select(func.count()).select_from(later.subquery())) or 0
        if not count:
            return
        unit = "item" if self.splitter.is_array else "line"
        shown = self.session.execute(later.order_by(ranked.c.position).limit(self.limits.max_reported_bad_lines))
        found = [BadLine(row.position, f"duplicate id {row.external_id!r}: {unit} {row.first} has the same id") for row in shown]
        result.bad_lines = sorted(result.bad_lines + found, key=lambda bad: bad.line)[: self.limits.max_reported_bad_lines]
        result.bad_line_count += count
        if self.partial:  # the later duplicates go; the first of each id stays
            unsynced = {"synchronize_session": False}
            later_scores = select(later.subquery().c.score_id)
            self.session.execute(delete(Score).where(Score.id.in_(later_scores)).execution_options(**unsynced))
            orphaned = ~select(Score.id).where(Score.item_id == Item.id).exists()
            self.session.execute(
                delete(Item).where(Item.origin_batch_id == batch_id, orphaned).execution_options(**unsynced)
            )
            result.accepted -= count


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
