"""Human labels: a person's pass/fail and/or 0-1 score on an item of a suite.

An upload is CSV (``text/csv``, a header row naming the columns) or JSONL (``application/x-ndjson``,
one object per line) with these fields:

- ``item_id`` — the item's id; or ``batch_id`` and ``external_id`` — the item with that external id
  in that batch of the suite;
- ``passed`` (true/false; in CSV also pass/fail, yes/no, 1/0) and/or ``score`` (0..1);
- ``annotator`` (1-255 characters, optional): whose verdict the row is;
- ``comment`` (optional, up to 10,000 characters).

Labels belong to who wrote them (``Label.written_by``, the uploading principal, ``key:NAME`` or
``proxy:NAME``; see ``assay.scoring.principals``):

- A row without an annotator, or naming the uploader (its stored form or its bare name), is the
  uploader's own label (source ``upload``, annotator the uploader's principal). It replaces the
  uploader's earlier upload on the item; a label the uploader's review recorded changes only through
  a review, and is reported as skipped.
- A row naming anyone else is an **import** of that annotator's label (source ``import``, recorded
  as written by the uploader). An import never replaces a label: when the annotator already has one
  on the item (under that name, or as ``key:NAME`` / ``proxy:NAME``), the row is skipped with the
  reason. An import may not name another principal's stored form (``key:…``, ``proxy:…``): only that
  principal writes its own labels (a bad row).

The upload is one transaction: by default any bad row rejects it all (422, the bad rows listed with
their line numbers, nothing written); with ``partial`` the good rows are stored and the bad ones
reported. Skipped rows are not bad: the answer lists them with their reasons. Two rows of one upload
labelling the same item by the same annotator are a bad row (which one should win is the uploader's
to say).
"""

from __future__ import annotations

import csv
import io
import json
import math
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session

from assay.scoring import principals
from assay.scoring.errors import InvalidInput, NotFound
from assay.scoring.intake import strict_json
from assay.scoring.intake.ingest import BadLine
from assay.scoring.store.db import dialect_insert
from assay.scoring.store.models import Batch, Item, Label, Score, SuiteRecord, utcnow

FIELDS = ("item_id", "batch_id", "external_id", "passed", "score", "annotator", "comment")
COMMENT_MAX = 10_000
ANNOTATOR_MAX = 255
LOOKUP_CHUNK = 1000
_BOM = "\ufeff"
_TRUE = {"true", "pass", "passed", "yes", "1"}
_FALSE = {"false", "fail", "failed", "no", "0"}


@dataclass(frozen=True)
class LabelRow:
    line: int
    annotator: str | None  # as the row names it (None: the uploader)
    passed: bool | None
    score: float | None
    comment: str | None
    item_id: uuid.UUID | None = None
    batch_id: uuid.UUID | None = None
    external_id: str | None = None


@dataclass
class LabelResult:
    suite: str
    created: int = 0  # the uploader's own labels, new
    imported: int = 0  # other annotators' labels, new
    replaced: int = 0  # the uploader's own labels, replacing their earlier upload
    bad_lines: list[BadLine] = field(default_factory=list)
    bad_line_count: int = 0
    skipped_lines: list[BadLine] = field(default_factory=list)
    skipped_count: int = 0

    @property
    def accepted(self) -> int:
        return self.created + self.imported + self.replaced

    def to_dict(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "accepted": self.accepted,
            "created": self.created,
            "imported": self.imported,
            "replaced": self.replaced,
            "skipped": self.skipped_count,
            "skipped_lines": [b.to_dict() for b in self.skipped_lines],
            "rejected": self.bad_line_count,
            "bad_lines": [b.to_dict() for b in self.bad_lines],
        }


class RowError(ValueError):
    """A row that cannot be a label (its message is the reason reported with its line)."""


def labelled_suite(session: Session, name: str) -> SuiteRecord:
    """The suite's record (a disabled suite still takes labels; a deleted or unknown one does not)."""
    record = session.get(SuiteRecord, name)
    if record is None or record.state == "deleted":
        known = session.scalars(
            select(SuiteRecord.name).where(SuiteRecord.state != "deleted").order_by(SuiteRecord.name)
        ).all()
        gone = " was deleted" if record is not None else ""
        raise NotFound(f"no suite named {name!r}{gone}; available: {', '.join(known) or 'none'}")
    return record


def _passed(value: Any, csv_text: bool) -> bool | None:
    if value is None or (csv_text and value.strip() == ""):
        return None
    if isinstance(value, bool):
        return value
    if csv_text:
        word = value.strip().lower()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
        raise RowError(f"passed must be true or false (or pass/fail, yes/no, 1/0), not {value.strip()[:40]!r}")
    raise RowError(f"passed must be true, false or null, not {json.dumps(value)[:40]}")


def _score(value: Any, csv_text: bool) -> float | None:
    if value is None or (csv_text and value.strip() == ""):
        return None
    if csv_text:
        try:
            number = float(value.strip())
        except ValueError:
            raise RowError(f"score must be a number from 0 to 1, not {value.strip()[:40]!r}") from None
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    else:
        raise RowError(f"score must be a number from 0 to 1 or null, not {json.dumps(value)[:40]}")
    if not math.isfinite(number) or not 0 <= number <= 1:
        raise RowError(f"score must be from 0 to 1, not {value if csv_text else number}")
    return number


def _text(value: Any, name: str, limit: int, csv_text: bool) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        if csv_text or isinstance(value, bool) or not isinstance(value, int) or name != "external_id":
            raise RowError(f"{name} must be a string")
        value = str(value)
    value = value.strip()
    if "\x00" in value:
        raise RowError(f"{name} holds a NUL character")
    if len(value) > limit:
        raise RowError(f"{name} is longer than {limit} characters")
    return value or None


def _uuid(value: Any, name: str, csv_text: bool) -> uuid.UUID | None:
    text = _text(value, name, 64, csv_text)
    if text is None:
        return None
    try:
        return uuid.UUID(text)
    except ValueError:
        raise RowError(f"{name} {text[:40]!r} is not a UUID") from None


def make_row(line: int, raw: dict[str, Any], *, csv_text: bool) -> LabelRow:
    """One upload row as a label (RowError naming the problem otherwise)."""
    unknown = sorted(set(raw) - set(FIELDS))
    if unknown:
        raise RowError(f"unknown field {unknown[0]!r}; the fields are {', '.join(FIELDS)}")
    item_id = _uuid(raw.get("item_id"), "item_id", csv_text)
    batch_id = _uuid(raw.get("batch_id"), "batch_id", csv_text)
    external_id = _text(raw.get("external_id"), "external_id", 255, csv_text)
    if item_id is not None and (batch_id is not None or external_id is not None):
        raise RowError("give either item_id, or batch_id and external_id, not both")
    if item_id is None and (batch_id is None or external_id is None):
        raise RowError("an item is named by item_id, or by batch_id and external_id")
    passed = _passed(raw.get("passed"), csv_text)
    score = _score(raw.get("score"), csv_text)
    if passed is None and score is None:
        raise RowError("a label needs passed (true/false) or a score (0..1), or both")
    annotator = _text(raw.get("annotator"), "annotator", ANNOTATOR_MAX, csv_text)
    comment = _text(raw.get("comment"), "comment", COMMENT_MAX, csv_text)
    return LabelRow(line, annotator, passed, score, comment, item_id, batch_id, external_id)


def _decode(body: bytes) -> str:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"the body is not UTF-8 (byte {exc.start})") from None
    return text[1:] if text.startswith(_BOM) else text


def csv_rows(body: bytes) -> Iterator[LabelRow | BadLine]:
    """The rows of a CSV upload (line numbers count the header as line 1)."""
    reader = csv.DictReader(io.StringIO(_decode(body), newline=""), strict=True)
    try:
        header = reader.fieldnames
    except csv.Error as exc:
        raise InvalidInput(f"the CSV header cannot be read: {exc}") from None
    if not header:
        raise InvalidInput("the CSV body is empty: it needs a header row naming its columns")
    unknown = [name for name in header if name not in FIELDS]
    if unknown:
        raise InvalidInput(f"unknown CSV column {unknown[0]!r}; the columns are {', '.join(FIELDS)}")
    if len(set(header)) != len(header):
        raise InvalidInput("a CSV column is named twice in the header")
    start = reader.line_num + 1
    while True:
        try:
            raw = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            yield BadLine(start, f"not valid CSV: {exc}")
            return  # the reader cannot resynchronise after a broken quote
        line, start = start, reader.line_num + 1
        if None in raw:
            yield BadLine(line, f"more fields than the header's {len(header)} columns")
            continue
        if all(value in (None, "") for value in raw.values()):
            continue
        try:
            yield make_row(line, {k: v for k, v in raw.items() if v is not None}, csv_text=True)
        except RowError as exc:
            yield BadLine(line, str(exc))


def jsonl_rows(body: bytes) -> Iterator[LabelRow | BadLine]:
    """The rows of a JSONL upload, numbered by line (blank lines skipped)."""
    for number, line in enumerate(_decode(body).split("\n"), start=1):
        if not line.strip():
            continue
        try:
            raw = strict_json.loads(line.encode())
        except strict_json.JsonRejected as exc:
            yield BadLine(number, f"not valid JSON: {exc}")
            continue
        if not isinstance(raw, dict):
            yield BadLine(number, "each line must be a JSON object")
            continue
        try:
            yield make_row(number, raw, csv_text=False)
        except RowError as exc:
            yield BadLine(number, str(exc))


def _chunks(values: list[Any]) -> Iterator[list[Any]]:
    for start in range(0, len(values), LOOKUP_CHUNK):
        yield values[start : start + LOOKUP_CHUNK]


def _resolve(session: Session, suite: str, rows: list[LabelRow]) -> dict[int, uuid.UUID | str]:
    """Each row's item id in the suite, or the reason it has none (keyed by line)."""
    by_id = sorted({r.item_id for r in rows if r.item_id is not None})
    in_suite: set[uuid.UUID] = set()
    for chunk in _chunks(by_id):
        in_suite |= set(
            session.scalars(select(Score.item_id).where(Score.item_id.in_(chunk), Score.suite_name == suite).distinct())
        )
    existing: set[uuid.UUID] = set()
    missing = [i for i in by_id if i not in in_suite]
    for chunk in _chunks(missing):
        existing |= set(session.scalars(select(Item.id).where(Item.id.in_(chunk))))
    batch_ids = sorted({r.batch_id for r in rows if r.batch_id is not None})
    batch_suites: dict[uuid.UUID, str] = {}
    for chunk in _chunks(batch_ids):
        batch_suites.update(session.execute(select(Batch.id, Batch.suite_name).where(Batch.id.in_(chunk))).all())
    pairs = sorted({(r.batch_id, r.external_id) for r in rows if r.batch_id is not None and batch_suites.get(r.batch_id) == suite})
    by_external: dict[tuple[uuid.UUID, str], uuid.UUID] = {}
    for chunk in _chunks(pairs):
        found = session.execute(
            select(Score.batch_id, Item.external_id, Item.id)
            .join(Item, Item.id == Score.item_id)
            .where(tuple_(Score.batch_id, Item.external_id).in_(chunk))
            .distinct()
        ).all()
        by_external.update({(b, e): i for b, e, i in found})
    out: dict[int, uuid.UUID | str] = {}
    for row in rows:
        if row.item_id is not None:
            if row.item_id in in_suite:
                out[row.line] = row.item_id
            elif row.item_id in existing:
                out[row.line] = f"item {row.item_id} has no score in suite {suite!r}"
            else:
                out[row.line] = f"no item {row.item_id}"
        elif row.batch_id not in batch_suites:
            out[row.line] = f"no batch {row.batch_id}"
        elif batch_suites[row.batch_id] != suite:
            out[row.line] = f"batch {row.batch_id} is a batch of suite {batch_suites[row.batch_id]!r}, not {suite!r}"
        else:
            item = by_external.get((row.batch_id, row.external_id))
            out[row.line] = item if item is not None else f"batch {row.batch_id} has no item {row.external_id!r}"
    return out


@dataclass(frozen=True)
class _Write:
    """A row to store: its item, whose label it is, and whether it is the uploader's own or an import."""

    row: LabelRow
    item: uuid.UUID
    annotator: str
    source: str  # "upload" or "import"


def _annotator(row: LabelRow, uploader: str) -> tuple[str, str]:
    """Whose label the row is and its source, for a row uploaded by the principal ``uploader``."""
    named = row.annotator
    if named is None or named in (uploader, principals.name_of(uploader)):
        return uploader, "upload"
    if principals.split(named) is not None:
        raise RowError(
            f"annotator {named!r} is another principal: only it writes its own labels (to import someone's "
            "labels, name them without key: or proxy:)"
        )
    return named, "import"


def _existing(session: Session, suite: str, items: set[uuid.UUID]) -> dict[uuid.UUID, dict[str, tuple[str, str]]]:
    """The labels already on ``items`` in the suite: item -> annotator -> (written by, source)."""
    found: dict[uuid.UUID, dict[str, tuple[str, str]]] = {}
    for chunk in _chunks(sorted(items)):
        rows = session.execute(
            select(Label.item_id, Label.annotator, Label.written_by, Label.source).where(
                Label.suite_name == suite, Label.item_id.in_(chunk)
            )
        )
        for item, annotator, written_by, source in rows:
            found.setdefault(item, {})[annotator] = (written_by, source)
    return found


def _skip_reason(write: _Write, uploader: str, on_item: dict[str, tuple[str, str]]) -> str | None:
    """Why the row may not be stored over the item's labels, or None (a new label, or the uploader's
    own upload replaced)."""
    if write.source == "upload":
        if write.annotator not in on_item:
            return None
        written_by, source = on_item[write.annotator]
        if source == "review":
            return "your label on this item was recorded by your review: it changes only through a review"
        if written_by != uploader:
            return f"your label on this item was stored by {written_by}; only they replace it"
        return None
    names = [write.annotator] + [principals.identity(kind, write.annotator) for kind in principals.KINDS]
    for name in names:
        if name in on_item:
            written_by, source = on_item[name]
            return (
                f"{name} already has a label on this item ({source}, stored by {written_by}); "
                "an import never replaces a label"
            )
    return None


def store_labels(
    session: Session,
    suite: str,
    parsed: Iterator[LabelRow | BadLine],
    *,
    uploader: str,
    partial: bool,
    max_reported_bad_lines: int,
) -> LabelResult:
    """Write an upload's labels in the caller's transaction, as the principal ``uploader`` (see the
    module: InvalidInput, nothing written, when a row is bad and ``partial`` is off)."""
    labelled_suite(session, suite)
    result = LabelResult(suite)

    def bad(line: BadLine) -> None:
        result.bad_line_count += 1
        if len(result.bad_lines) < max_reported_bad_lines:
            result.bad_lines.append(line)

    rows: list[LabelRow] = []
    for entry in parsed:
        if isinstance(entry, BadLine):
            bad(entry)
        else:
            rows.append(entry)
    items = _resolve(session, suite, rows)
    first_line: dict[tuple[uuid.UUID, str], int] = {}
    writes: list[_Write] = []
    for row in rows:
        item = items[row.line]
        if isinstance(item, str):
            bad(BadLine(row.line, item))
            continue
        try:
            annotator, source = _annotator(row, uploader)
        except RowError as exc:
            bad(BadLine(row.line, str(exc)))
            continue
        key = (item, annotator)
        if key in first_line:
            bad(BadLine(row.line, f"line {first_line[key]} already labels this item by {annotator!r}"))
            continue
        first_line[key] = row.line
        writes.append(_Write(row, item, annotator, source))
    result.bad_lines.sort(key=lambda b: b.line)
    if result.bad_line_count and not partial:
        raise InvalidInput(
            f"{result.bad_line_count} bad row(s): nothing was stored (partial=true stores the good rows)",
            bad_lines=[b.to_dict() for b in result.bad_lines],
            rejected=result.bad_line_count,
        )
    if not writes and not result.bad_line_count:
        raise InvalidInput("the upload holds no labels")
    existing = _existing(session, suite, {w.item for w in writes})
    stored: list[_Write] = []
    for write in writes:
        on_item = existing.get(write.item, {})
        reason = _skip_reason(write, uploader, on_item)
        if reason is not None:
            result.skipped_count += 1
            if len(result.skipped_lines) < max_reported_bad_lines:
                result.skipped_lines.append(BadLine(write.row.line, reason))
            continue
        stored.append(write)
        if write.source == "import":
            result.imported += 1
        elif write.annotator in on_item:
            result.replaced += 1
        else:
            result.created += 1
    insert = dialect_insert(session)
    now = utcnow()
    for chunk in _chunks(stored):
        values = [
            {
                "id": uuid.uuid4(),
                "suite_name": suite,
                "item_id": w.item,
                "annotator": w.annotator,
                "written_by": uploader,
                "passed": w.row.passed,
                "score": w.row.score,
                "comment": w.row.comment,
                "source": w.source,
                "created_at": now,
                "updated_at": now,
            }
            for w in chunk
        ]
        statement = insert(Label).values(values)
        # The checks above read the labels first; this guard holds against a label stored since by
        # another upload: only the same principal's own upload is ever replaced.
        session.execute(
            statement.on_conflict_do_update(
                index_elements=["suite_name", "item_id", "annotator"],
                set_={
                    "passed": statement.excluded.passed,
                    "score": statement.excluded.score,
                    "comment": statement.excluded.comment,
                    "updated_at": statement.excluded.updated_at,
                },
                where=(statement.excluded.source == "upload")
                & (Label.source == "upload")
                & (Label.written_by == statement.excluded.written_by),
            )
        )
    return result


def label_view(label: Label) -> dict[str, Any]:
    return {
        "item_id": str(label.item_id),
        "annotator": label.annotator,
        "written_by": label.written_by,
        "passed": label.passed,
        "score": label.score,
        "comment": label.comment,
        "source": label.source,
        "created_at": label.created_at.isoformat(),
        "updated_at": label.updated_at.isoformat(),
    }
