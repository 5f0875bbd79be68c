"""Batch reports: JSON, CSV and Excel, written a chunk of results at a time (flat memory for big batches).

Each suite's kind names its report columns (``Kind.report_row``: for KQL, the KQL scoring design's seven fields
then the prompt, both queries and the execution error); kinds that name none (``generic``) get columns
derived from the suite's components (``generic_columns``): the verdict, then per component
``<name>_score``, ``<name>_status`` and ``<name>_reason`` (why it failed or was skipped), and for each
rubric judge component its ``<name>_reasoning`` and its answer: ``<name>_verdict`` (the 0-1 score, the
scale value, true/false or the label) or, for a ``criteria`` verdict, ``<name>.<criterion>`` (the
criterion's scale value) and ``<name>.<criterion>_reasoning`` per criterion. A kind's row is followed by
four columns that say which result it is: ``Position``, ``External ID``, ``Item ID``, ``Score ID``.
Every report ends with the human verdict columns (``assay.scoring.trust.review.HUMAN_COLUMNS``): the item's
latest review in the suite (``human_reviewer``, ``human_passed``, ``human_score``, ``human_comment``,
``human_reviewed_at``), how many labels it has (``human_labels``) and their majority
(``human_majority``: pass, fail or tie). They sit beside the machine verdict; the summary's pass
rate and every other aggregate count only the machine score.

- JSON: one document, ``{"batch": ..., "summary": ..., "columns": [...], "rows": [...]}``, streamed.
- CSV: a header and one line per result, streamed through ``assay.scoring.reports.csv_writer`` (the one CSV
  writer): a text cell that a spreadsheet would run as a formula (it starts with ``=``, ``+``, ``-``,
  ``@``, a tab or a carriage return) is prefixed with ``'`` (OWASP's CSV-injection rule); JSON and
  Excel keep the text as it is.
- Excel: a ``Summary`` sheet (the batch, its counts, pass rate, cost, tokens, per-component means and
  medians, errors by kind), then a ``Results`` sheet; openpyxl's write-only mode keeps memory flat
  however many rows there are. Text is always stored as text (a value starting with ``=`` is never
  turned into a formula), characters XML cannot hold are dropped, and a cell longer than Excel's
  32,767 characters is cut with a note.
"""

from __future__ import annotations

import importlib
import json
import re
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from assay.scoring.intake import batches as svc
from assay.scoring.judge.rubrics import VerdictSpec
from assay.scoring.kinds import Kind, get_kind
from assay.scoring.pipeline.summaries import batch_summary
from assay.scoring.reports import csv_writer
from assay.scoring.reports.views import batch_view
from assay.scoring.store.models import Item, Score, ScoreComponent
from assay.scoring.suites.criteria import load_criteria
from assay.scoring.suites.jury import JuryJudge
from assay.scoring.suites.loader import Criteria, RubricJudge
from assay.scoring.trust.review import HUMAN_COLUMNS, human_cells, with_human_verdicts

__all__ = [
    "FORMATS",
    "MEDIA_TYPES",
    "ReportContext",
    "csv_chunks",
    "generic_columns",
    "generic_row",
    "json_chunks",
    "open_report",
    "report_row",
    "write_xlsx",
]

FORMATS = ("json", "csv", "xlsx")
MEDIA_TYPES = {
    "json": "application/json",
    "csv": "text/csv; charset=utf-8",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
}
ID_COLUMNS = ("Position", "External ID", "Item ID", "Score ID")
EXCEL_CELL_LIMIT = 32_767
_CUT_NOTE = " … [cut at Excel's cell limit]"
# Characters an XML 1.0 document cannot hold (openpyxl refuses them).
_ILLEGAL_XML = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")


@dataclass(frozen=True)
class ReportContext:
    """What every format needs before the first row: the batch, its summary and the columns."""

    batch_id: uuid.UUID
    batch: dict[str, Any]
    summary: dict[str, Any]
    criteria: Criteria
    kind: Kind
    columns: list[str]
    metadata_keys: list[str]


def open_report(session: Session, batch_id: uuid.UUID) -> ReportContext:
    """Read the batch, its live summary and its criteria (raises ``NotFound`` for an unknown batch, ``Pruned`` for a pruned one)."""
    batch = svc.scored_batch(session, batch_id)
    criteria = load_criteria(session, batch.criteria_hash)
    kind = get_kind(criteria.kind)
    view = batch_view(batch, svc.progress(session, batch))
    keys = metadata_keys(session, batch.id)
    return ReportContext(
        batch_id=batch.id,
        batch=view,
        summary=batch_summary(session, batch.id),
        criteria=criteria,
        kind=kind,
        columns=_columns(kind, criteria, keys),
        metadata_keys=keys,
    )


def metadata_keys(session: Session, batch_id: uuid.UUID) -> list[str]:
    """The union of the batch's items' metadata keys, sorted: read before the rows stream, so every
    row has the same ``metadata.KEY`` columns."""
    keys: set[str] = set()
    query = select(Item.payload).join(Score, Score.item_id == Item.id).where(Score.batch_id == batch_id)
    for payload in session.scalars(query.execution_options(yield_per=1000)):
        metadata = (payload or {}).get("metadata")
        if isinstance(metadata, dict):
            keys.update(metadata)
    return sorted(keys)


def metadata_columns(keys: Iterable[str]) -> list[str]:
    return [METADATA_PREFIX + key for key in keys]


def metadata_cells(score: Score, keys: Iterable[str]) -> dict[str, Any]:
    metadata = ((score.item.payload if score.item is not None else None) or {}).get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    return {METADATA_PREFIX + key: metadata.get(key) for key in keys}


def _columns(kind: Kind, criteria: Criteria, keys: list[str]) -> list[str]:
    named = getattr(kind, "report_columns", None)
    if named:
        return [*named, *ID_COLUMNS, *metadata_columns(keys), *HUMAN_COLUMNS]
    if kind.report_row is not None:
        # The kind's module may declare its columns (KQL's ``REPORT_COLUMNS``); else the first row says.
        declared = getattr(importlib.import_module(kind.report_row.__module__), "REPORT_COLUMNS", None)
        if declared:
            return [*declared, *ID_COLUMNS, *metadata_columns(keys), *HUMAN_COLUMNS]
        return []  # learnt from the first row
    return [*generic_columns(criteria, keys), *HUMAN_COLUMNS]


# --- columns derived from the suite's components (kinds without their own report) -------------------------

_SCORE_HEAD = ("position", "score_id", "external_id", "status", "total_score", "passed", "partial")
_SCORE_TAIL = ("error_message", "cost_usd")
# A generic item's content, beside its verdict (other kinds name their own item fields in their rows).
ITEM_COLUMNS = ("input", "output", "expected", "context")
METADATA_PREFIX = "metadata."
# The details key holding a rubric verdict's answer, per verdict type (judge.rubrics' score functions).
_VERDICT_VALUE = {"score": "score", "scale": "scale", "pass_fail": "passed", "labels": "label"}

Cell = Callable[[ScoreComponent | None], Any]


def _details(component: ScoreComponent | None) -> dict[str, Any]:
    return (component.details or {}) if component is not None else {}


def _criterion(name: str, key: str) -> Cell:
    def cell(component: ScoreComponent | None) -> Any:
        answer = _details(component).get("criteria")
        entry = answer.get(name) if isinstance(answer, dict) else None
        return entry.get(key) if isinstance(entry, dict) else None

    return cell


def _row_verdict(criteria: Criteria, row: str) -> tuple[VerdictSpec | None, bool]:
    """The rubric verdict of a component row (a rubric judge's, a jury's or a jury member's), and
    whether the row is a jury member (whose own cost is a column of its own)."""
    spec = criteria.components.get(row)
    if spec is not None:
        judge = spec.judge
        return (judge.verdict if isinstance(judge, RubricJudge | JuryJudge) else None), False
    jury = criteria.components[row.partition("@")[0]].jury
    assert jury is not None  # criteria.rows names only components and jury members
    return jury.verdict, True


def _component_cells(name: str, verdict: VerdictSpec | None, member: bool = False) -> list[tuple[str, Cell]]:
    """One component row's (column, cell) pairs: what every component has, then a rubric judge's
    answer (a jury's, or each of its members' with its cost)."""
    cells: list[tuple[str, Cell]] = [
        (f"{name}_score", lambda c: c.score if c is not None else None),
        (f"{name}_status", lambda c: c.status if c is not None else None),
        (f"{name}_reason", lambda c: c.reason if c is not None else None),
    ]
    if member:
        cells.append((f"{name}_cost_usd", lambda c: c.cost_usd if c is not None else None))
    if verdict is None:
        return cells
    if verdict.type == "criteria":
        for criterion in verdict.criteria or []:
            cells.append((f"{name}.{criterion.name}", _criterion(criterion.name, "score")))
            cells.append((f"{name}.{criterion.name}_reasoning", _criterion(criterion.name, "reasoning")))
    else:
        key = _VERDICT_VALUE[verdict.type]
        cells.append((f"{name}_verdict", lambda c: _details(c).get(key)))
    cells.append((f"{name}_reasoning", lambda c: _details(c).get("reasoning")))
    return cells


def generic_columns(criteria: Criteria, keys: Iterable[str] = ()) -> list[str]:
    """The columns of ``generic_row`` for this suite and these metadata keys, in order."""
    cells = [column for name in criteria.rows for column, _ in _component_cells(name, *_row_verdict(criteria, name))]
    return [*_SCORE_HEAD, *ITEM_COLUMNS, *metadata_columns(keys), *cells, *_SCORE_TAIL]


def generic_row(score: Score, criteria: Criteria, keys: Iterable[str] = ()) -> dict[str, Any]:
    """One result as the suite's components describe it (``generic_columns``)."""
    by_name = {c.component: c for c in score.components}
    row: dict[str, Any] = {
        "position": score.position,
        "score_id": str(score.id),
        "external_id": score.item.external_id if score.item is not None else None,
        "status": score.status,
        "total_score": score.total,
        "passed": score.passed,
        "partial": score.partial,
    }
    payload = (score.item.payload if score.item is not None else None) or {}
    row.update({column: payload.get(column) for column in ITEM_COLUMNS})
    row.update(metadata_cells(score, keys))
    for name in criteria.rows:
        for column, cell in _component_cells(name, *_row_verdict(criteria, name)):
            row[column] = cell(by_name.get(name))
    row["error_message"] = score.error_message
    row["cost_usd"] = score.cost_usd
    return row


def report_row(score: Score, kind: Kind, criteria: Criteria, keys: Iterable[str] = ()) -> dict[str, Any]:
    """One result's report row: the kind's columns (else the suite's generic ones), then which result it
    is, then the item's ``metadata.KEY`` columns."""
    if kind.report_row is None:
        return generic_row(score, criteria, keys)
    row = dict(kind.report_row(score))
    row.update(
        {
            "Position": score.position,
            "External ID": score.item.external_id if score.item is not None else None,
            "Item ID": str(score.item_id),
            "Score ID": str(score.id),
            **metadata_cells(score, keys),
        }
    )
    return row


def _rows(ctx: ReportContext, scores: Iterable[Score]) -> Iterator[dict[str, Any]]:
    """The report rows; with the human verdict columns when the context's columns name them (or are
    learnt from the first row), as ``open_report``'s always do."""
    if ctx.columns and HUMAN_COLUMNS[0] not in ctx.columns:
        for score in scores:
            yield report_row(score, ctx.kind, ctx.criteria, ctx.metadata_keys)
        return
    for score, human in with_human_verdicts(scores):
        yield {**report_row(score, ctx.kind, ctx.criteria, ctx.metadata_keys), **human_cells(human)}


# --- JSON -------------------------------------------------------------------------------------------------


def json_chunks(ctx: ReportContext, scores: Iterable[Score], *, rows_per_chunk: int = 200) -> Iterator[str]:
    """The JSON report as text chunks; never holds more than ``rows_per_chunk`` rows."""
    head = {"batch": ctx.batch, "summary": ctx.summary, "threshold": ctx.criteria.threshold}
    yield json.dumps(head, default=str)[:-1]
    rows = _rows(ctx, scores)
    first = next(rows, None)
    columns = ctx.columns or (list(first) if first is not None else [])
    yield ', "columns": ' + json.dumps(columns) + ', "rows": ['
    if first is not None:
        sep, buf = "", [json.dumps(first, default=str)]
        for row in rows:
            buf.append(json.dumps(row, default=str))
            if len(buf) >= rows_per_chunk:
                yield sep + ", ".join(buf)
                sep, buf = ", ", []
        if buf:
            yield sep + ", ".join(buf)
    yield "]}\n"


# --- CSV --------------------------------------------------------------------------------------------------


def csv_chunks(ctx: ReportContext, scores: Iterable[Score], *, rows_per_chunk: int = 200) -> Iterator[str]:
    return csv_writer.csv_chunks(_rows(ctx, scores), ctx.columns or None, rows_per_chunk=rows_per_chunk)


# --- Excel ------------------------------------------------------------------------------------------------


def _excel_text(value: str) -> str:
    value = _ILLEGAL_XML.sub("", value)
    if len(value) > EXCEL_CELL_LIMIT:
        value = value[: EXCEL_CELL_LIMIT - len(_CUT_NOTE)] + _CUT_NOTE
    return value


def summary_rows(ctx: ReportContext) -> list[list[Any]]:
    """The Summary sheet, as rows: the batch, its counts and spend, then one row per component."""
    b, s = ctx.batch, ctx.summary
    counts = s.get("counts") or {}
    usage = s.get("usage") or {}
    rows: list[list[Any]] = [
        ["Batch", b["batch_id"]],
        ["Suite", b["suite"]],
        ["Kind", ctx.criteria.kind],
        ["Criteria Hash", b["criteria_hash"]],
        ["Status", b["status"]],
        ["Created By", b["created_by"]],
        ["Created At", b["created_at"]],
        ["Finished At", b["finished_at"]],
        ["Pass Threshold", ctx.criteria.threshold],
        ["Items", b["total_items"]],
        ["Passed", counts.get("passed", 0)],
        ["Failed (below threshold)", counts.get("failed", 0)],
        ["Errored", counts.get("errored", 0)],
        ["Cancelled", counts.get("cancelled", 0)],
        ["Pending", counts.get("pending", 0) + counts.get("in_progress", 0)],
        ["Partial (a component skipped)", counts.get("partial", 0)],
        ["Pass Rate", s.get("pass_rate")],
        ["Mean Total Score", s.get("mean_total")],
        ["Cost (USD)", s.get("cost_usd", 0.0)],
    ]
    for name in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
        rows.append([name.replace("_", " ").title(), usage.get(name, 0)])
    rows.append(["Cache Read Ratio", s.get("cache_read_ratio")])
    rows.append([])
    rows.append(["Component", "Weight", "OK", "Failed", "Skipped", "Mean", "Median", "Judge"])
    components = s.get("components") or {}
    for name, spec in ctx.criteria.components.items():
        c = components.get(name, {})
        # A jury makes no judge call of its own: its members' models are its judges.
        calls = (ctx.criteria.members_of(name) or [name]) if spec.is_judge else []
        judges = ", ".join(f"{judge.provider}/{judge.model}" for judge in map(ctx.criteria.judge_for, calls))
        rows.append(
            [name, spec.weight, c.get("ok", 0), c.get("failed", 0), c.get("skipped", 0), c.get("mean"), c.get("median")]
            + ([judges] if judges else [])
        )
    errors = s.get("errors_by_kind") or {}
    if errors:
        rows.append([])
        rows.append(["Error Kind", "Count"])
        rows.extend([kind or "unknown", n] for kind, n in sorted(errors.items(), key=lambda kv: -kv[1]))
    return rows


def write_xlsx(ctx: ReportContext, scores: Iterable[Score], target: str | IO[bytes]) -> int:
    """Write the Excel report to ``target`` (a path or a binary file). Returns the number of result rows."""
    from openpyxl import Workbook
    from openpyxl.cell import WriteOnlyCell
    from openpyxl.styles import Font, PatternFill

    wb = Workbook(write_only=True)
    bold = Font(bold=True)
    header_fill = PatternFill("solid", fgColor="DDE4EE")

    def cell(ws: Any, value: Any, *, header: bool = False, number_format: str | None = None) -> Any:
        if isinstance(value, (dict, list)):
            value = json.dumps(value, default=str)
        if isinstance(value, str):
            value = _excel_text(value)
        c = WriteOnlyCell(ws, value=value)
        if isinstance(value, str):
            c.data_type = "s"  # text stays text: never a formula
        if header:
            c.font = bold
            c.fill = header_fill
        if number_format and isinstance(value, float):
            c.number_format = number_format
        return c

    summary = wb.create_sheet("Summary")
    summary.column_dimensions["A"].width = 30
    summary.column_dimensions["B"].width = 40
    summary.append([cell(summary, "Batch Report", header=True)])
    for row in summary_rows(ctx):
        is_header = bool(row) and row[0] in ("Component", "Error Kind")
        summary.append([cell(summary, v, header=is_header or i == 0, number_format="0.000") for i, v in enumerate(row)])

    results = wb.create_sheet("Results")
    results.freeze_panes = "A2"
    rows = _rows(ctx, scores)
    first = next(rows, None)
    columns = ctx.columns or (list(first) if first is not None else [])
    wide = {"LLM Reasoning", "Prompt", "Generated Query", "Expected Query", "Execution Error", "error_message"}
    for i, name in enumerate(columns):
        letter = _column_letter(i + 1)
        is_wide = name in wide or name.endswith(("_reasoning", "_reason"))
        results.column_dimensions[letter].width = 60 if is_wide else max(12, min(40, len(name) + 2))
    results.append([cell(results, name, header=True) for name in columns])
    n = 0
    if first is not None:
        for row in _chain(first, rows):
            results.append([cell(results, row.get(name), number_format="0.000") for name in columns])
            n += 1
    wb.save(target)
    return n


def _chain(first: dict[str, Any], rest: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    yield first
    yield from rest


def _column_letter(index: int) -> str:
    from openpyxl.utils import get_column_letter

    return get_column_letter(index)
