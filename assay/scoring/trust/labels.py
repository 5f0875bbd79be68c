"""Human labels: a person's pass/fail and/or 0-1 score on an item of a suite.

An upload is CSV (``text/csv``, a header row naming the columns) or JSONL (``application/x-ndjson``,
one object per line) with these fields:

- ``item_id`` — the item's id; or ``batch_id`` and ``external_id`` — the item with that external id
  in that batch of the suite;
- ``passed`` (true/false; in CSV also pass/fail, yes/no, 1/0) and/or ``score`` (0..1);
- ``annotator`` (1-255 characters; a row without one is labelled by the uploader's principal name);
- ``comment`` (optional, up to 10,000 characters).

The same annotator labelling the same item of the suite again replaces their label; other
annotators add theirs. The upload is one transaction: by default any bad row rejects it all (422,
the bad rows listed with their line numbers, nothing written); with ``partial`` the good rows are
stored and the bad ones reported. Two rows of one upload labelling the same item by the same
annotator are a bad row (which one should win is the uploader's to say).
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
    annotator: str
    passed: bool | None
    score: float | None
    comment: str | None
    item_id: uuid.UUID | None = None
    batch_id: uuid.UUID | None = None
    external_id: str | None = None


@dataclass
class LabelResult:
    suite: str
    created: int = 0
    replaced: int = 0
    bad_lines: list[BadLine] = field(default_factory=list)
    bad_line_count: int = 0

    @property
    def accepted(self) -> int:
        return self.created + self.replaced

    def to_dict(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "accepted": self.accepted,
            "created": self.created,
            "replaced": self.replaced,
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


def make_row(line: int, raw: dict[str, Any], default_annotator: str, *, csv_text: bool) -> LabelRow:
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
    annotator = _text(raw.get("annotator"), "annotator", ANNOTATOR_MAX, csv_text) or default_annotator[:ANNOTATOR_MAX]
    comment = _text(raw.get("comment"), "comment", COMMENT_MAX, csv_text)
    return LabelRow(line, annotator, passed, score, comment, item_id, batch_id, external_id)


def _decode(body: bytes) -> str:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"the body is not UTF-8 (byte {exc.start})") from None
    return text[1:] if text.startswith(_BOM) else text


def csv_rows(body: bytes, default_annotator: str) -> Iterator[LabelRow | BadLine]:
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
            yield make_row(line, {k: v for k, v in raw.items() if v is not None}, default_annotator, csv_text=True)
        except RowError as exc:
            yield BadLine(line, str(exc))


def jsonl_rows(body: bytes, default_annotator: str) -> Iterator[LabelRow | BadLine]:
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
            yield make_row(number, raw, default_annotator, csv_text=False)
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


def store_labels(
    session: Session,
    suite: str,
    parsed: Iterator[LabelRow | BadLine],
    *,
    partial: bool,
    max_reported_bad_lines: int,
) -> LabelResult:
    """Write an upload's labels in the caller's transaction (InvalidInput, nothing written, when a row
    is bad and ``partial`` is off)."""
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
    good: list[tuple[LabelRow, uuid.UUID]] = []
    for row in rows:
        item = items[row.line]
        if isinstance(item, str):
            bad(BadLine(row.line, item))
            continue
        key = (item, row.annotator)
        if key in first_line:
            bad(BadLine(row.line, f"line {first_line[key]} already labels this item by {row.annotator!r}"))
            continue
        first_line[key] = row.line
        good.append((row, item))
    result.bad_lines.sort(key=lambda b: b.line)
    if result.bad_line_count and not partial:
        raise InvalidInput(
            f"{result.bad_line_count} bad row(s): nothing was stored (partial=true stores the good rows)",
            bad_lines=[b.to_dict() for b in result.bad_lines],
            rejected=result.bad_line_count,
        )
    if not good and not result.bad_line_count:
        raise InvalidInput("the upload holds no labels")
    keys = list(first_line)
    before: set[tuple[uuid.UUID, str]] = set()
    for chunk in _chunks(keys):
        before |= set(
            session.execute(
                select(Label.item_id, Label.annotator).where(
                    Label.suite_name == suite, tuple_(Label.item_id, Label.annotator).in_(chunk)
                )
            ).all()
        )
    insert = dialect_insert(session)
    now = utcnow()
    for chunk in _chunks(good):
        values = [
            {
                "id": uuid.uuid4(),
                "suite_name": suite,
                "item_id": item,
                "annotator": row.annotator,
                "passed": row.passed,
                "score": row.score,
                "comment": row.comment,
                "source": "upload",
                "created_at": now,
                "updated_at": now,
            }
            for row, item in chunk
        ]
        statement = insert(Label).values(values)
        session.execute(
            statement.on_conflict_do_update(
                index_elements=["suite_name", "item_id", "annotator"],
                set_={
                    "passed": statement.excluded.passed,
                    "score": statement.excluded.score,
                    "comment": statement.excluded.comment,
                    "source": statement.excluded.source,
                    "updated_at": statement.excluded.updated_at,
                },
            )
        )
    result.replaced = sum(1 for row, item in good if (item, row.annotator) in before)
    result.created = len(good) - result.replaced
    return result


def label_view(label: Label) -> dict[str, Any]:
    return {
        "item_id": str(label.item_id),
        "annotator": label.annotator,
        "passed": label.passed,
        "score": label.score,
        "comment": label.comment,
        "source": label.source,
        "created_at": label.created_at.isoformat(),
        "updated_at": label.updated_at.isoformat(),
    }
