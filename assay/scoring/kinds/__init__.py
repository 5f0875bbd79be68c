"""Item kinds. A kind fixes what an item looks like, which metrics can score it, and how the judge
sees it (placeholder values)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from pydantic import BaseModel

from assay.scoring.errors import CriteriaError


@dataclass(frozen=True)
class Kind:
    name: str
    item_model: type[BaseModel]
    # Placeholder name -> text, for the judge prompt. (Verdicts register themselves in
    # ``judge.verdicts``; how a verdict becomes a score belongs to the verdict, not the kind.)
    judge_inputs: Callable[[BaseModel], dict[str, str]]
    # Why an item cannot pass whatever its total, e.g. a KQL query that did not run; None: nothing can
    # block a pass (finalizing then never reads the item).
    pass_blockers: Callable[[BaseModel], list[str]] | None = None
    # The kind's report columns for one stored score (exports and reports); None: the generic columns.
    report_row: Callable[[Any], dict[str, Any]] | None = None
    # The judge's placeholder values fitted to the judge model's context window, and details to store
    # beside the verdict: ``prepare_judge(item, *, template, verdict_model, model, max_tokens,
    # context_window) -> (inputs, details)``; an AssayError fails the judge component with its message.
    # None: ``judge_inputs`` as is.
    prepare_judge: Callable[..., tuple[dict[str, str], dict[str, Any]]] | None = None
    # Called in the transaction that finalizes a score (any outcome): ``on_finalized(session, score,
    # components, criteria)``, e.g. to write the verdict's feedback as rows.
    on_finalized: Callable[[Any, Any, list[Any], Any], None] | None = None
    # The item's external id (batch uploads); None: the payload's ``id``.
    external_id: Callable[[BaseModel], str | None] | None = None
    # The kind's live-result lines for one finished score (CLI progress, batch API); None: one generic line.
    live_lines: Callable[[Any, float], list[str]] | None = None
    # Which stored items of the kind re-scoring may take, as a SQL condition on ``Item`` (sessions: only
    # the current version of a completed session); None: every item.
    rescore_filter: Callable[[], Any] | None = None
    # An uploaded object -> the canonical payload, by the suite's criteria (the generic kind's
    # ``fields`` mapping), applied at ingest before the item is validated: ``prepare_payload(raw,
    # criteria)``; raises InvalidInput / CriteriaError saying what is wrong. None: lines are payloads.
    prepare_payload: Callable[[Any, Any], dict[str, Any]] | None = None
    # Checks a suite's ``fields`` mapping when the suite is resolved (CriteriaError naming the entry),
    # so a bad mapping makes the suite invalid rather than failing every upload. None: the kind takes
    # no mapping, and a suite of it with ``fields`` is refused.
    check_fields: Callable[[dict[str, str]], None] | None = None
    # The judge placeholders the kind's items can have under a suite's ``fields`` mapping:
    # ``placeholders(fields) -> (names, open_prefix)``, ``open_prefix`` a prefix whose keys the suite does
    # not declare (``metadata.``), or None. Lets ``assay suite validate`` catch a placeholder typo before
    # every item fails on it. None: not checked until items are given.
    placeholders: Callable[[dict[str, str] | None], tuple[frozenset[str], str | None]] | None = None
    # Items of the kind are made by Assay itself (the pairs of a pairwise run), never uploaded: a suite
    # may not name it.
    internal: bool = False


_KIND_MODULES = {
    "kql": "assay.scoring.kinds.kql",
    "alert_session": "assay.scoring.kinds.alert_session",
    "pandas_codegen": "assay.scoring.kinds.pandas_codegen",
    "generic": "assay.scoring.kinds.generic",
    "pairwise": "assay.scoring.kinds.pairwise",
}


# Kinds already imported: every component's work asks for its kind, and import_module, even of a
# module already imported, takes the import system's locks (a visible share of a judge worker's CPU).
_loaded: dict[str, Kind] = {}


def get_kind(name: str) -> Kind:
    kind = _loaded.get(name)
    if kind is not None:
        return kind
    module = _KIND_MODULES.get(name)
    if module is None:
        raise CriteriaError(f"unknown suite kind {name!r}; known: {', '.join(sorted(_KIND_MODULES))}")
    kind = _loaded[name] = importlib.import_module(module).KIND
    return kind


def known_kinds() -> list[str]:
    return sorted(_KIND_MODULES)
