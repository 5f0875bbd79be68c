"""The sampler: completed traces become items and scores of the suites whose online rules take them.

A trace is *complete for a rule* when its root span (the one without a parent) has arrived and no span
of it has arrived for the rule's ``quiet_seconds``. Each run (beat's tick, :func:`sample`) takes the
oldest traces that may be complete (rows locked with ``SKIP LOCKED``, so two runs share the work
rather than repeat it) and decides, per enabled suite and rule, once (``online_decisions`` is keyed
by trace, suite and rule):

- ``no_match``: no span of the trace matches the rule's ``match``;
- ``sampled_out``: the trace id falls outside the rule's ``sample_rate`` (:func:`sampled`: the id's
  low 56 bits, which W3C trace context makes random, as a fraction; the same trace is always in or
  out, in every process and every rule with the same rate);
- ``over_budget``: the rule already made ``daily_budget`` items today (UTC);
- ``invalid``: the suite's ``fields`` mapping does not fit what the spans hold (the reason says why);
- ``scored``: one item per matching span (``per: span``) or one for the trace (``per: trace``), each
  with a pending score under the suite's current criteria whose components go on the online queues,
  and an ``online_scores`` row linking the score to its trace and span.

A span stored after its trace was decided (*late*) re-opens the trace (``assay.scoring.online.spans``).
Once the trace is quiet again, a per-span rule that scored it, or that found nothing to match, decides
the matching spans it has not made an item of yet, as above (budget and mapping included; sampling,
drawn from the trace id, cannot change); a per-trace rule keeps the item it made, and
``online_traces.late_spans`` counts what that item did not see; a trace decided ``sampled_out``,
``over_budget`` or ``invalid`` stays so. The run's report counts the late items (``late``).

Everything a decision makes commits together with the decision; the caller publishes the returned
component refs after the commit (a lost publish is re-sent by the reconciler, like any other).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from assay.scoring.errors import AssayError
from assay.scoring.intake.ingest import item_content_hash
from assay.scoring.kinds import get_kind
from assay.scoring.online.items import span_source, trace_source
from assay.scoring.online.spans import spans_of
from assay.scoring.pipeline.components import ComponentRef, pending_score
from assay.scoring.pipeline.planning import create_components
from assay.scoring.store.db import dialect_insert
from assay.scoring.store.models import Item, Score, SuiteRecord
from assay.scoring.store.online_models import OnlineDecision, OnlineScore, OnlineTrace, Span
from assay.scoring.suites.criteria import load_criteria
from assay.scoring.suites.loader import canonical_json
from assay.scoring.suites.online_rules import OnlineRule, OnlineRules

_SAMPLE_BITS = 56


def sampled(trace_id: str, rate: float) -> bool:
    """Whether a trace is in a sample of ``rate``: decided by the trace id alone."""
    if rate >= 1:
        return True
    return int(trace_id[-_SAMPLE_BITS // 4 :], 16) < rate * (1 << _SAMPLE_BITS)


def matches(rule: OnlineRule, span: Span) -> bool:
    match = rule.match
    if match.span_name is not None and span.name != match.span_name:
        return False
    if match.service is not None and span.service_name != match.service:
        return False
    attributes = span.attributes or {}
    return all(_same(attributes.get(key), expected) for key, expected in match.attributes.items())


def _same(found: Any, expected: Any) -> bool:
    if found is None:
        return False
    if isinstance(expected, bool) or isinstance(found, bool):
        return str(found).lower() == str(expected).lower()
    return str(found) == str(expected)


@dataclass(frozen=True)
class OnlineSuite:
    record: SuiteRecord
    rules: OnlineRules


def online_suites(session: Session) -> list[OnlineSuite]:
    """The enabled suites with online rules, as their current records say."""
    found = []
    for record in session.scalars(select(SuiteRecord).where(SuiteRecord.state == "active").order_by(SuiteRecord.name)):
        options = record.options or {}
        rules = OnlineRules.model_validate(options.get("online") or {})
        if rules.active and options.get("enabled", True):
            found.append(OnlineSuite(record, rules))
    return found


@dataclass
class SampleReport:
    traces: int = 0
    decided: int = 0
    items: int = 0
    decisions: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    refs: list[ComponentRef] = field(default_factory=list)


def sample(session: Session, now: datetime, limit: int) -> SampleReport:
    """Decide the rules of up to ``limit`` traces that may be complete; the caller commits, then
    publishes ``report.refs``."""
    report = SampleReport()
    suites = online_suites(session)
    if not suites:
        return report
    quiet = min(rule.quiet_seconds for suite in suites for rule in suite.rules.rules)
    query = (
        select(OnlineTrace)
        .where(
            OnlineTrace.decided.is_(False),
            OnlineTrace.root_ended_at.is_not(None),
            OnlineTrace.last_received_at <= now - timedelta(seconds=quiet),
        )
        .order_by(OnlineTrace.last_received_at)
        .limit(limit)
    )
    if session.get_bind().dialect.name == "postgresql":
        query = query.with_for_update(skip_locked=True)
    traces = session.scalars(query).all()
    if not traces:
        return report
    report.traces = len(traces)
    trace_ids = [trace.trace_id for trace in traces]
    spans = spans_of(session, trace_ids)
    done = {
        (row.trace_id, row.suite_name, row.rule): row
        for row in session.scalars(select(OnlineDecision).where(OnlineDecision.trace_id.in_(trace_ids)))
    }
    scored_spans = _scored_spans(session, trace_ids) if done else defaultdict(set)
    day = now.date().isoformat()
    budgets = _used_today(session, day)
    decided_traces = []
    for trace in traces:
        waiting = False
        for suite in suites:
            for rule in suite.rules.rules:
                if trace.last_received_at > now - timedelta(seconds=rule.quiet_seconds):
                    waiting = True
                    continue
                key = (trace.trace_id, suite.record.name, rule.name)
                if key in done:
                    _revisit(session, suite, rule, done[key], spans[trace.trace_id], scored_spans[key], budgets, day, now, report)
                    continue
                decision, count, reason = _decide(session, suite, rule, trace.trace_id, spans[trace.trace_id], budgets, day, now, report)
                session.add(
                    OnlineDecision(
                        trace_id=trace.trace_id, suite_name=suite.record.name, rule=rule.name, decision=decision,
                        items=count, reason=reason, day=day, decided_at=now,
                    )
                )
                report.decisions[decision] += 1
                report.items += count
        if not waiting:
            decided_traces.append(trace.trace_id)
    if decided_traces:
        session.execute(update(OnlineTrace).where(OnlineTrace.trace_id.in_(decided_traces)).values(decided=True))
    report.decided = len(decided_traces)
    return report


def _scored_spans(session: Session, trace_ids: Sequence[str]) -> dict[tuple[str, str, str], set[str]]:
    """The spans each (trace, suite, rule) already made an item of."""
    found: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    rows = session.execute(
        select(OnlineScore.trace_id, OnlineScore.suite_name, OnlineScore.rule, OnlineScore.span_id).where(
            OnlineScore.trace_id.in_(trace_ids), OnlineScore.span_id.is_not(None)
        )
    )
    for trace_id, suite_name, rule, span_id in rows:
        found[(trace_id, suite_name, rule)].add(span_id)
    return found


def _revisit(
    session: Session,
    suite: OnlineSuite,
    rule: OnlineRule,
    decided: OnlineDecision,
    spans: Sequence[Span],
    scored: set[str],
    budgets: dict[tuple[str, str], int],
    day: str,
    now: datetime,
    report: SampleReport,
) -> None:
    """A rule already decided this trace and spans came after (late): a per-span rule that scored the
    trace, or found nothing to match, decides the spans it has not made an item of; a per-trace rule
    keeps its item (``online_traces.late_spans`` says what it missed), and a trace decided sampled out,
    over budget or invalid stays so."""
    if rule.per != "span" or decided.decision not in ("scored", "no_match"):
        return
    decision, count, reason = _decide(
        session, suite, rule, decided.trace_id, spans, budgets, day, now, report, skip=scored
    )
    if decision == "scored":
        decided.decision, decided.reason = "scored", None
        decided.items += count
        report.decisions["late"] += count
        report.items += count
    elif decided.decision == "no_match":
        decided.decision, decided.reason = decision, reason
    elif reason is not None:  # late spans over the budget, or that the mapping does not fit: said beside the score
        decided.reason = f"late span(s): {reason}"


def _used_today(session: Session, day: str) -> dict[tuple[str, str], int]:
    rows = session.execute(
        select(OnlineDecision.suite_name, OnlineDecision.rule, func.sum(OnlineDecision.items))
        .where(OnlineDecision.day == day, OnlineDecision.decision == "scored")
        .group_by(OnlineDecision.suite_name, OnlineDecision.rule)
    )
    return defaultdict(int, {(suite, rule): int(total or 0) for suite, rule, total in rows})


def _decide(
    session: Session,
    suite: OnlineSuite,
    rule: OnlineRule,
    trace_id: str,
    spans: Sequence[Span],
    budgets: dict[tuple[str, str], int],
    day: str,
    now: datetime,
    report: SampleReport,
    skip: Collection[str] = (),
) -> tuple[str, int, str | None]:
    matched = [span for span in spans if span.span_id not in skip and matches(rule, span)]
    if not matched:
        return "no_match", 0, None
    if not sampled(trace_id, rule.sample_rate):
        return "sampled_out", 0, None
    units: list[tuple[Span | None, list[Span]]] = (
        [(span, [span]) for span in matched] if rule.per == "span" else [(None, matched)]
    )
    key = (suite.record.name, rule.name)
    if rule.daily_budget is not None:
        room = rule.daily_budget - budgets[key]
        if room <= 0:
            return "over_budget", 0, f"the rule made its daily budget of {rule.daily_budget} item(s) on {day}"
        units = units[:room]
    record = suite.record
    criteria = load_criteria(session, record.current_criteria_hash)
    kind = get_kind(record.kind)
    assert kind.prepare_payload is not None  # the loader refuses online rules for a kind without fields
    built = []
    try:
        for span, unit_spans in units:
            source = span_source(span) if span is not None else trace_source(spans, unit_spans)
            item = kind.item_model.model_validate(kind.prepare_payload(source, criteria))
            built.append((span, unit_spans, item.model_dump(mode="json", exclude_none=True)))
    except (AssayError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
        return "invalid", 0, str(exc)[:2000]
    scores: list[tuple[uuid.UUID, str]] = []
    for span, unit_spans, payload in built:
        payload_json = canonical_json(payload)
        item_id = uuid.uuid4()
        session.add(
            Item(
                id=item_id,
                kind=record.kind,
                external_id=f"{trace_id}/{span.span_id}" if span is not None else trace_id,
                payload=payload,
                content_hash=item_content_hash(payload_json),
                created_at=now,
            )
        )
        values = pending_score(
            item_id=item_id, suite=record.name, criteria_hash=record.current_criteria_hash, criteria=criteria,
            triggered_by=f"online:{rule.name}", created_at=now,
        )
        session.flush()
        session.execute(dialect_insert(session)(Score).values(**values))
        session.add(
            OnlineScore(
                score_id=values["id"], item_id=item_id, suite_name=record.name, rule=rule.name, trace_id=trace_id,
                span_id=span.span_id if span is not None else None, slice=_slice(rule, unit_spans), created_at=now,
            )
        )
        scores.append((values["id"], record.current_criteria_hash))
    session.flush()
    report.refs.extend(create_components(session, scores, now, online=True))
    budgets[key] += len(built)
    return "scored", len(built), None


def _slice(rule: OnlineRule, spans: Sequence[Span]) -> str | None:
    if rule.slice_by is None:
        return None
    for span in spans:
        value = (span.attributes or {}).get(rule.slice_by, (span.resource or {}).get(rule.slice_by))
        if value is not None:
            return str(value)[:255]
    return None
