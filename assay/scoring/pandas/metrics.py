"""Design 002's six metrics for one pandas code-generation item, computed honestly:
structure from the AST (:mod:`.code`), intent from the question (:mod:`.question`), behaviour from
real sandboxed runs (:mod:`.execution`), results compared by documented rules (:mod:`.compare`).

Each function takes the item and the metric context and returns a
:class:`~assay.scoring.metrics.registry.ComponentResult` with the design's ``details`` fields
(plus a few more that say where the numbers came from).
"""

from __future__ import annotations

from typing import Any

from assay.scoring.metrics.registry import ComponentResult, MetricContext
from assay.scoring.pandas.code import CodeFacts, analyse_code
from assay.scoring.pandas.compare import Tolerance, compare, from_encoded
from assay.scoring.pandas.execution import (
    TIMED_RUNS,
    ReferenceFailed,
    classify_error,
    error_text,
    frames_info,
    is_correct,
    predefined_names,
    resolve_truth,
    run_code,
)
from assay.scoring.pandas.performance import performance_score
from assay.scoring.pandas.quality import RuffUnavailable, quality_score, ruff_version
from assay.scoring.pandas.question import QuestionFacts, analyse_question
from assay.scoring.pandas.requirements import (
    STAT_SATISFIERS,
    Requirements,
    from_question,
    from_reference,
    orders_rows,
    ranked,
    selection_columns,
    selects_rows,
)
from assay.scoring.sandbox import SandboxError


def _loader(ctx: MetricContext) -> Any:
    return ctx.dataset_loader


def _ordered(item: Any, question: QuestionFacts) -> bool:
    return item.order_matters if item.order_matters is not None else question.asks_order


def _question(item: Any, ctx: MetricContext) -> QuestionFacts:
    frames = frames_info(item, _loader(ctx))
    return analyse_question(item.question, [c for cols in frames.values() for c in cols])


def _facts(item: Any, ctx: MetricContext) -> tuple[dict[str, list[str]], Requirements, CodeFacts]:
    """The item's tables, its requirements (from the reference's AST, else the question) and the
    facts of the code the model ended with."""
    frames = frames_info(item, _loader(ctx))
    columns = [c for cols in frames.values() for c in cols]
    names = predefined_names(frames)
    if item.reference_code:
        requirements = from_reference(analyse_code(item.reference_code, set(columns), names))
    else:
        requirements = from_question(analyse_question(item.question, columns), frames)
    code = analyse_code(item.final_code, set(columns), names)
    return frames, requirements, code


def _sandbox_failure(exc: SandboxError) -> ComponentResult:
    return ComponentResult.failed(f"the sandbox could not run the code: {exc}")


# --- prompt understanding (the pandas code-generation design, 1) ------------------------------------------


def prompt_understanding(item: Any, ctx: MetricContext, weights: tuple[float, float, float]) -> ComponentResult:
    w_columns, w_nl, w_stats = weights
    try:
        frames, required, code = _facts(item, ctx)
    except SandboxError as exc:
        return _sandbox_failure(exc)
    base = {
        "mentioned_columns": required.columns,
        "extracted_columns": code.columns,
        "requirements_source": required.source,
        "code_scored": item.final_code_label,
    }
    if not code.parsed:
        return ComponentResult.ok(0.0, {
            "understanding_score": 0.0, "column_extraction_score": 0.0, "nl_parsing_score": 0.0,
            "statistical_understanding_score": 0.0, **base, "statistical_operations": [],
            "reason": f"the code does not parse: {code.syntax_error}",
        })
    uses = code.uses_data
    if required.columns:
        hit = [c for c in required.columns if c in code.columns]
        column_score = w_columns * len(hit) / len(required.columns)
    else:
        column_score = w_columns if uses else 0.0
    patterns: list[dict[str, Any]] = []
    for ranking in required.rankings:
        expects = "nlargest / sort descending + head" if ranking.descending else "nsmallest / sort ascending + head"
        patterns.append({"pattern": ranking.label, "expects": expects, "satisfied": ranked(code, ranking.n, ranking.descending)})
    if required.filter:
        patterns.append({"pattern": "filter", "expects": "a boolean mask, query(), loc[], isin or a join", "satisfied": 1.0 if selects_rows(code, required.filter_columns) else 0.0})
    if patterns:
        nl_score = w_nl * sum(p["satisfied"] for p in patterns) / len(patterns)
    else:
        nl_score = w_nl if uses else 0.0
    found = sorted(op for op, satisfiers in STAT_SATISFIERS.items() if satisfiers & code.operations)
    if required.stats:
        satisfied = [op for op in required.stats if STAT_SATISFIERS[op] & code.operations]
        stat_score = w_stats * len(satisfied) / len(required.stats)
    else:
        satisfied = []
        stat_score = w_stats if uses else 0.0
    total = column_score + nl_score + stat_score
    details = {
        "understanding_score": round(total, 6),
        "column_extraction_score": round(column_score, 6),
        "nl_parsing_score": round(nl_score, 6),
        "statistical_understanding_score": round(stat_score, 6),
        **base,
        "statistical_operations": found,
        "required_statistical_operations": required.stats,
        "missing_statistical_operations": [op for op in required.stats if op not in satisfied],
        "missing_columns": [c for c in required.columns if c not in code.columns],
        "nl_patterns": patterns,
        "uses_dataset": uses,
        "dead_code_lines": code.dead_lines,
        "tables": sorted(frames),
    }
    if not uses:
        details["note"] = "the code's answer does not depend on the dataset"
    return ComponentResult.ok(total, details)


# --- requirement coverage (the pandas code-generation design, 2) ------------------------------------------


def requirement_coverage(item: Any, ctx: MetricContext, weights: tuple[float, float, float, float]) -> ComponentResult:
    w_filter, w_group, w_sort, w_join = weights
    try:
        _, required, code = _facts(item, ctx)
    except SandboxError as exc:
        return _sandbox_failure(exc)
    if not code.parsed:
        return ComponentResult.ok(0.0, {
            "coverage_score": 0.0, "filter_conditions_coverage": 0.0, "groupby_columns_coverage": 0.0,
            "sorting_coverage": 0.0, "join_conditions_coverage": 0.0,
            "missing_requirements": [f"the code does not parse: {code.syntax_error}"], "code_scored": item.final_code_label,
        })
    missing: list[str] = []
    uses = code.uses_data
    free = 1.0 if uses else 0.0  # a requirement the item does not state is met by code that uses the data

    if required.filter_columns:
        selected = selection_columns(code)
        absent = [c for c in required.filter_columns if c not in selected]
        filter_cov = 1.0 - len(absent) / len(required.filter_columns)
        if absent:
            missing.append(f"Filter condition(s) missing: on {', '.join(absent)}")
    elif required.filter:
        filter_cov = 1.0 if selects_rows(code, []) else 0.0
        if not filter_cov:
            missing.append("Filter condition(s) missing")
    else:
        filter_cov = free

    if required.groupby_columns:
        present = [c for c in required.groupby_columns if c in code.groupby_columns]
        group_cov = len(present) / len(required.groupby_columns)
        absent = [c for c in required.groupby_columns if c not in present]
        if absent:
            missing.append(f"Groupby column(s) missing: {', '.join(absent)}")
    else:
        group_cov = free

    if required.sort:
        sort_cov = 1.0 if orders_rows(code) else 0.0
        if not sort_cov:
            missing.append("Sorting missing")
    else:
        sort_cov = free

    if required.join:
        if not code.joins:
            join_cov = 0.0
            missing.append("Join/merge operation missing")
        else:
            keys = [k for k in required.join_keys if k not in code.join_keys and k not in code.columns]
            join_cov = 1.0 if not keys else 0.5
            if keys:
                missing.append(f"Join key(s) missing: {', '.join(keys)}")
    else:
        join_cov = free

    if not uses:
        missing.append("The code's answer does not use the dataset")
    total = w_filter * filter_cov + w_group * group_cov + w_sort * sort_cov + w_join * join_cov
    return ComponentResult.ok(total, {
        "coverage_score": round(total, 6),
        "filter_conditions_coverage": round(filter_cov, 6),
        "groupby_columns_coverage": round(group_cov, 6),
        "sorting_coverage": sort_cov,
        "join_conditions_coverage": join_cov,
        "missing_requirements": missing,
        "code_scored": item.final_code_label,
        "requirements_source": required.source,
        "required": required.describe(),
        "found": {
            "filter_columns": code.filter_columns,
            "filter_conditions": code.conditions,
            "groupby_columns": code.groupby_columns,
            "sorting": sorted(code.sort_calls),
            "join": sorted(code.joins),
            "join_keys": code.join_keys,
        },
    })


# --- error recovery (the pandas code-generation design, 3) ------------------------------------------------


def error_recovery(item: Any, ctx: MetricContext, max_attempts: int, weights: tuple[float, float, float]) -> ComponentResult:
    w_rate, w_fix, w_attempts = weights
    loader = _loader(ctx)
    try:
        generated = run_code(item.generated_code, item, loader, repeat=TIMED_RUNS)
    except SandboxError as exc:
        return _sandbox_failure(exc)
    attempts = list(item.recovery_attempts or [])
    if generated.ok:
        return ComponentResult.skipped(
            "the generated code ran without error: there is no error to recover from",
            {
                "has_error": False,
                "error_message": None,
                "recovery_attempts_count": 0,
                "recovery_success": None,
                "recovery_success_rate": None,
                "recovery_score": None,
                "recovery_details": [],
                **({"attempts_ignored": len(attempts)} if attempts else {}),
            },
        )
    first_class = classify_error(generated.error)
    considered = attempts[:max_attempts]
    truth = None
    if any(True for _ in considered):
        try:
            truth = resolve_truth(item, loader)
        except ReferenceFailed as exc:
            return ComponentResult.failed(str(exc))
        except SandboxError as exc:
            return _sandbox_failure(exc)
    try:
        ordered = _ordered(item, _question(item, ctx)) if truth is not None else False
    except SandboxError as exc:
        return _sandbox_failure(exc)
    details_rows = []
    previous = first_class
    for number, attempt in enumerate(considered, start=1):
        try:
            outcome = run_code(attempt.code, item, loader, repeat=1)
        except SandboxError as exc:
            return _sandbox_failure(exc)
        if outcome.ok:
            if truth is None:
                return ComponentResult.skipped(
                    "a recovery attempt ran, but the item has no reference code or expected result to check it against",
                    {"has_error": True, "error_message": error_text(generated.error), "error_type": first_class},
                )
            success, similarity = is_correct(outcome, truth, ordered)
            error_class = None if success else "wrong_result"
            error = None if success else "the code ran but its result is not the expected one"
        else:
            success, similarity = False, 0.0
            error_class = classify_error(outcome.error)
            error = error_text(outcome.error)
        fix_quality = 1.0 if success else (0.5 if error_class != previous else 0.1)
        details_rows.append({
            "attempt_number": number,
            "success": success,
            "error": error,
            "error_type": error_class,
            "fix_quality": fix_quality,
            "result_similarity": round(similarity, 6),
            "reported_error": attempt.error,
        })
        previous = error_class or previous
    count = len(details_rows)
    successes = sum(1 for row in details_rows if row["success"])
    rate = successes / count if count else 0.0
    fix = sum(row["fix_quality"] for row in details_rows) / count if count else 0.0
    attempts_made = min(count / 3.0, 1.0)
    score = w_rate * rate + w_fix * fix + w_attempts * attempts_made
    details = {
        "has_error": True,
        "error_message": error_text(generated.error),
        "error_type": first_class,
        "error_category": (generated.error or {}).get("category"),
        "recovery_attempts_count": count,
        "recovery_success": successes > 0,
        "recovery_success_rate": round(rate, 6),
        "error_fix_quality": round(fix, 6),
        "attempts_made_score": round(attempts_made, 6),
        "recovery_score": round(score, 6),
        "recovery_details": details_rows,
        "max_recovery_attempts": max_attempts,
    }
    if len(attempts) > max_attempts:
        details["attempts_ignored"] = len(attempts) - max_attempts
    return ComponentResult.ok(score, details)


# --- correctness -----------------------------------------------------------------------------------------


def correctness(item: Any, ctx: MetricContext, tol: Tolerance) -> ComponentResult:
    loader = _loader(ctx)
    try:
        truth = resolve_truth(item, loader)
        if truth is None:
            # Invariant 7: nothing to establish correctness with, so the item cannot pass; its total
            # still shows what the other components measured.
            return ComponentResult.skipped(
                "the item has neither reference code nor an expected result",
                pass_blocker="could not be established: the item has neither reference code nor an expected result",
            )
        generated = run_code(item.final_code, item, loader, repeat=TIMED_RUNS)
    except ReferenceFailed as exc:
        return ComponentResult.failed(str(exc))
    except SandboxError as exc:
        return _sandbox_failure(exc)
    base: dict[str, Any] = {"truth_source": truth.source, "code_scored": item.final_code_label}
    if truth.reference_agrees is not None:
        base["reference_agrees_with_expected_result"] = truth.reference_agrees
    if not generated.ok or generated.result is None:
        return ComponentResult.ok(0.0, {
            "correctness_score": 0.0,
            "executed": False,
            "reason": "the code did not execute",
            "error": error_text(generated.error),
            "error_type": classify_error(generated.error),
            "error_category": (generated.error or {}).get("category"),
            **base,
        })
    try:
        ordered = _ordered(item, _question(item, ctx))
    except SandboxError as exc:
        return _sandbox_failure(exc)
    score, details = compare(truth.table, from_encoded(generated.result), ordered=ordered, tol=tol)
    return ComponentResult.ok(score, {
        "correctness_score": round(score, 6),
        "executed": True,
        "result_kind": generated.result.get("kind"),
        "result_dtypes": generated.result.get("dtypes"),
        **details,
        **base,
    })


# --- quality and performance ------------------------------------------------------------------------


def code_quality(item: Any, ctx: MetricContext) -> ComponentResult:
    names = set(item.frames or {})
    if item.dataset and not names:
        try:
            names = set(frames_info(item, _loader(ctx)))
        except SandboxError:
            names = set()
        except Exception:  # noqa: BLE001 - the table names only silence "undefined name" findings
            names = set()
    predefined = sorted(predefined_names({n: [] for n in names}) | ({"df"} if not names else set()))
    try:
        score, details = quality_score(item.final_code, predefined)
    except RuffUnavailable as exc:
        return ComponentResult.failed(str(exc))
    details["ruff"] = ruff_version()
    details["code_scored"] = item.final_code_label
    return ComponentResult.ok(score, details)


def performance(item: Any, ctx: MetricContext, **bands: Any) -> ComponentResult:
    loader = _loader(ctx)
    try:
        generated = run_code(item.final_code, item, loader, repeat=TIMED_RUNS)
        reference = run_code(item.reference_code, item, loader, repeat=TIMED_RUNS) if item.reference_code else None
    except SandboxError as exc:
        return _sandbox_failure(exc)
    if not generated.ok:
        return ComponentResult.ok(0.0, {
            "performance_score": 0.0,
            "executed": False,
            "reason": "the code did not execute",
            "error": error_text(generated.error),
            "code_scored": item.final_code_label,
        })
    note = None
    if reference is not None and not reference.ok:
        note = f"the reference code did not execute ({error_text(reference.error)}): absolute bands used"
        reference = None
    score, details = performance_score(generated.to_dict(), reference.to_dict() if reference else None, **bands)
    details["executed"] = True
    details["code_scored"] = item.final_code_label
    if note:
        details["note"] = note
    return ComponentResult.ok(score, details)
