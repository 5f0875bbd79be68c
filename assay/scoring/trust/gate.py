"""The CI gate: does a candidate run regress against a baseline, beyond the judge's noise?

Both sides are plain :class:`GateItem` lists, so the rule is the same whatever they were read from: a
batch in the store (PostgreSQL behind the API, or the embedded SQLite file) or a results file that
``assay run`` / ``assay results`` wrote (:func:`items_from_results`).

Pairing
    Items are matched by external id. Items without one, or whose id repeats on a side, are counted and
    never guessed. A baseline item that is not usable (errored, failed, partial, cancelled) leaves its
    pair out: the baseline says nothing about it. A candidate item that is not usable **counts as a
    failure** (not passed, total 0): a change that makes items error must not pass the gate.

The rule (:func:`evaluate`)
    The gate cannot pass on nothing: it fails with the reason when a side has unfinished items
    (``incomplete``), when the two sides were scored under different criteria hashes
    (``criteria_hash``), or when fewer than ``min_pairs`` pairs were compared (``too_few_pairs``).
    Otherwise it fails on a regression, when

    - ``mcnemar``: McNemar's exact p < α and more pairs went pass→fail than fail→pass, or
    - ``max_drop``: the upper end of the paired bootstrap interval of the mean total difference
      (candidate − baseline) is below −D,

    **and**, when the judge's noise was measured for the criteria hash (``assay calibrate``), the mean
    total dropped by more than the noise floor over those n pairs (1.96·σw·√(2/n)); a drop inside it
    passes, with that said.

Slices (``by="metadata.KEY"``)
    Each slice of at least ``min_pairs`` pairs is gated too, and the gate fails when one fails. Slices
    are many tests at once, so McNemar's p-values are Holm-corrected (step-down: the i-th smallest of m
    is compared with α/(m − i + 1), stopping at the first that is not below) and each slice's bootstrap
    interval is widened to 1 − 0.05/m (Bonferroni). Smaller slices are listed, flagged, not gated.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from assay.scoring.errors import BadRequest
from assay.scoring.intake import batches
from assay.scoring.store.filters import machine_scores
from assay.scoring.store.models import Score
from assay.scoring.trust import stats
from assay.scoring.trust.noise import latest_noise

DEFAULT_ALPHA = 0.05
DEFAULT_MAX_DROP = 0.0
DEFAULT_MIN_PAIRS = 10
METADATA_PREFIX = "metadata."
USABLE = "usable"
UNFINISHED_STATUSES = frozenset({"pending", "in_progress"})
# The rules a gate can fail on, as its report names them.
RULE_INCOMPLETE, RULE_HASH, RULE_TOO_FEW = "incomplete", "criteria_hash", "too_few_pairs"
RULE_MCNEMAR, RULE_DROP = "mcnemar", "max_drop"


@dataclass(frozen=True)
class GateItem:
    """One scored item as the gate needs it."""

    external_id: str | None
    criteria_hash: str
    status: str  # the score's status: completed, failed, timed_out, cancelled, pending, in_progress
    partial: bool
    passed: bool | None
    total: float | None
    slice: str | None = None  # the value of the ``by`` key, as text (None: the item lacks it)
    reason: str | None = None  # why it errored or failed, when stored
    suite: str | None = None

    @property
    def usable(self) -> bool:
        return self.status == "completed" and not self.partial and self.passed is not None and self.total is not None

    @property
    def unfinished(self) -> bool:
        return self.status in UNFINISHED_STATUSES


@dataclass(frozen=True)
class GateOptions:
    alpha: float = DEFAULT_ALPHA
    max_drop: float = DEFAULT_MAX_DROP
    min_pairs: int = DEFAULT_MIN_PAIRS
    by: str | None = None

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1:
            raise BadRequest(f"alpha must be between 0 and 1 (exclusive), got {self.alpha}")
        if not 0 <= self.max_drop <= 1:
            raise BadRequest(f"max drop must be between 0 and 1, got {self.max_drop}")
        if self.min_pairs < 1:
            raise BadRequest(f"the minimum number of pairs must be at least 1, got {self.min_pairs}")
        if self.by is not None:
            slice_key(self.by)


@dataclass(frozen=True)
class Failure:
    rule: str  # one of the RULE_* names
    message: str


@dataclass(frozen=True)
class Verdicts:
    """The statistics of one set of pairs (the whole gate, or a slice)."""

    pairs: int
    baseline_pass_rate: float | None
    candidate_pass_rate: float | None
    mean_difference: float | None  # candidate − baseline, of the total
    ci_low: float | None
    ci_high: float | None
    confidence: float
    pass_to_fail: int
    fail_to_pass: int
    p_value: float
    adjusted_alpha: float  # α for this test (Holm's level for a slice)
    noise_floor: float | None
    failures: list[Failure]
    notes: list[str]

    @property
    def passed(self) -> bool:
        return not self.failures


@dataclass(frozen=True)
class SliceVerdict:
    name: str  # the slice's value ("(none)" for items without the key)
    gated: bool  # False: under min_pairs, flagged rather than over-read
    verdicts: Verdicts


@dataclass(frozen=True)
class ItemOutcome:
    """One candidate item as a CI report shows it: a test case that passed or failed, with why."""

    external_id: str | None
    passed: bool
    reason: str | None


@dataclass(frozen=True)
class GateReport:
    baseline: str  # what the baseline was read from (a batch id, a file)
    candidate: str
    criteria_hash: str | None  # the shared hash (None when they differ or a side is empty)
    options: GateOptions
    counts: dict[str, int]
    overall: Verdicts
    slices: list[SliceVerdict]
    items: list[ItemOutcome] = field(repr=False)

    @property
    def failures(self) -> list[Failure]:
        out = list(self.overall.failures)
        for s in self.slices:
            out += [Failure(f.rule, f"slice {s.name!r}: {f.message}") for f in s.verdicts.failures if s.gated]
        return out

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def incomplete(self) -> bool:
        return any(f.rule == RULE_INCOMPLETE for f in self.overall.failures)

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "failures": [asdict(f) for f in self.failures],
            "baseline": self.baseline,
            "candidate": self.candidate,
            "criteria_hash": self.criteria_hash,
            "options": asdict(self.options),
            "counts": self.counts,
            "overall": _verdicts_dict(self.overall),
            "slices": [{"name": s.name, "gated": s.gated, **_verdicts_dict(s.verdicts)} for s in self.slices],
            "failing_items": [asdict(i) for i in self.items if not i.passed],
        }


def _verdicts_dict(v: Verdicts) -> dict[str, Any]:
    return {**{k: value for k, value in asdict(v).items() if k != "failures"}, "passed": v.passed,
            "failures": [asdict(f) for f in v.failures]}


def slice_key(by: str) -> str:
    """The metadata key a ``by`` value names (``metadata.KEY``)."""
    if not by.startswith(METADATA_PREFIX) or len(by) == len(METADATA_PREFIX):
        raise BadRequest(f"slice by 'metadata.KEY' (a key of the items' metadata), not {by!r}")
    return by[len(METADATA_PREFIX):]


def slice_value(metadata: Any, by: str | None) -> str | None:
    """The text of an item's ``by`` key (None without ``by`` or without the key)."""
    if by is None or not isinstance(metadata, dict):
        return None
    value = metadata.get(slice_key(by))
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


# --- reading a side -------------------------------------------------------------------------------


def items_from_results(lines: Iterable[str], *, by: str | None, source: str) -> list[GateItem]:
    """The items of a results file (JSON lines as ``assay run --out`` and ``assay results`` write)."""
    items = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            items.append(
                GateItem(
                    external_id=row["external_id"],
                    criteria_hash=row["criteria_hash"],
                    status=row["status"],
                    partial=bool(row.get("partial")),
                    passed=row["passed"],
                    total=row["total_score"],
                    slice=slice_value((row.get("item") or {}).get("metadata"), by),
                    reason=row.get("error_message"),
                    suite=row.get("suite"),
                )
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            what = f"no {exc} field" if isinstance(exc, KeyError) else "not a JSON object"
            raise BadRequest(
                f"{source}, line {number}: not a results line ({what}); give a file that `assay run --out` "
                "or `assay results` wrote"
            ) from None
    return items


def items_from_file(path: Path, *, by: str | None) -> list[GateItem]:
    try:
        with path.open(encoding="utf-8") as handle:
            return items_from_results(handle, by=by, source=str(path))
    except (OSError, UnicodeDecodeError) as exc:
        raise BadRequest(f"cannot read the results file {path}: {exc}") from None


def items_from_scores(scores: Iterable[Any], *, by: str | None) -> Iterator[GateItem]:
    """The items of stored scores (each loaded with its item)."""
    for score in scores:
        payload = score.item.payload if score.item is not None else {}
        yield GateItem(
            external_id=score.item.external_id if score.item is not None else None,
            criteria_hash=score.criteria_hash,
            status=score.status,
            partial=bool(score.partial),
            passed=score.passed,
            total=score.total,
            slice=slice_value((payload or {}).get("metadata"), by),
            reason=score.error_message,
            suite=score.suite_name,
        )


# --- the rule -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Pair:
    external_id: str
    base_passed: bool
    base_total: float
    cand_passed: bool
    cand_total: float
    slice: str | None


def _by_id(items: Sequence[GateItem]) -> tuple[dict[str, GateItem], int, int]:
    """Items keyed by external id, with how many had none and how many repeat an id."""
    counts = Counter(i.external_id for i in items if i.external_id is not None)
    keyed = {i.external_id: i for i in items if i.external_id is not None and counts[i.external_id] == 1}
    no_id = sum(1 for i in items if i.external_id is None)
    repeated = sum(n for n in counts.values() if n > 1)
    return keyed, no_id, repeated


def _not_usable_reason(item: GateItem) -> str:
    if item.status != "completed":
        return f"{item.status}: {item.reason}" if item.reason else item.status
    if item.partial:
        return "partial: a component was skipped, so the item cannot pass"
    return "no verdict"


def item_outcome(item: GateItem) -> ItemOutcome:
    """The item on its own: passed, or failed with why (errored, partial and blocked items fail)."""
    if item.usable and item.passed:
        return ItemOutcome(item.external_id, True, None)
    if item.usable:
        why = f"failed: total {item.total:.3f} below the pass threshold" + (f" ({item.reason})" if item.reason else "")
        return ItemOutcome(item.external_id, False, why)
    return ItemOutcome(item.external_id, False, _not_usable_reason(item))


def _verdicts(pairs: Sequence[_Pair], options: GateOptions, sigma: float | None, alpha: float, confidence: float) -> Verdicts:
    n = len(pairs)
    base = np.array([[p.base_total, p.base_passed] for p in pairs], dtype=np.float64).reshape(-1, 2)
    cand = np.array([[p.cand_total, p.cand_passed] for p in pairs], dtype=np.float64).reshape(-1, 2)
    difference = stats.paired_bootstrap(cand[:, 0] - base[:, 0], confidence=confidence)
    mcnemar = stats.mcnemar_from_pairs(base[:, 1].astype(bool), cand[:, 1].astype(bool))
    floor = None if sigma is None else stats.mean_diff_floor(sigma, sigma, n, same_hash=True)
    failures, notes = [], []
    if n < options.min_pairs:
        failures.append(Failure(RULE_TOO_FEW, f"{n} pair(s) compared, fewer than the {options.min_pairs} the gate needs"))
    else:
        regressions = []
        if mcnemar.p_value < alpha and mcnemar.pass_to_fail > mcnemar.fail_to_pass:
            regressions.append(Failure(
                RULE_MCNEMAR,
                f"{mcnemar.pass_to_fail} pass→fail against {mcnemar.fail_to_pass} fail→pass: "
                f"McNemar p = {mcnemar.p_value:.4g} < α = {alpha:.4g}",
            ))
        if difference.ci_high is not None and difference.ci_high < -options.max_drop:
            regressions.append(Failure(
                RULE_DROP,
                f"mean total {difference.mean:+.4f}, {100 * confidence:g} % interval "
                f"[{difference.ci_low:+.4f}, {difference.ci_high:+.4f}] lies wholly below −{options.max_drop:g}",
            ))
        drop = -(difference.mean or 0.0)
        if regressions and floor is not None and drop <= floor:
            notes.append(
                f"{', '.join(f.rule for f in regressions)} would fail, but the drop {drop:.4f} is within the "
                f"judge's noise floor ±{floor:.4f} over {n} pairs: passed"
            )
            regressions = []
        failures += regressions
    return Verdicts(
        pairs=n,
        baseline_pass_rate=float(base[:, 1].mean()) if n else None,
        candidate_pass_rate=float(cand[:, 1].mean()) if n else None,
        mean_difference=difference.mean,
        ci_low=difference.ci_low,
        ci_high=difference.ci_high,
        confidence=confidence,
        pass_to_fail=mcnemar.pass_to_fail,
        fail_to_pass=mcnemar.fail_to_pass,
        p_value=mcnemar.p_value,
        adjusted_alpha=alpha,
        noise_floor=floor,
        failures=failures,
        notes=notes,
    )


def holm_levels(p_values: Sequence[float], alpha: float) -> list[float]:
    """Holm's step-down: the α each test is held to. The i-th smallest of m p-values is held to
    α/(m − i + 1); after the first that is not below its level, every larger one is held to 0 (none of
    them can be rejected)."""
    m = len(p_values)
    levels = [0.0] * m
    rejecting = True
    for rank, index in enumerate(sorted(range(m), key=lambda i: p_values[i])):
        levels[index] = alpha / (m - rank) if rejecting else 0.0
        rejecting = rejecting and p_values[index] < levels[index]
    return levels


def _refused(failure: Failure, options: GateOptions) -> Verdicts:
    return Verdicts(0, None, None, None, None, None, stats.CONFIDENCE, 0, 0, 1.0, options.alpha, None, [failure], [])


def evaluate(
    baseline: Sequence[GateItem],
    candidate: Sequence[GateItem],
    options: GateOptions,
    *,
    sigma_w_total: float | None = None,
    baseline_name: str = "baseline",
    candidate_name: str = "candidate",
) -> GateReport:
    """Gate ``candidate`` against ``baseline`` (``sigma_w_total``: the judge's measured σw of the total
    under the shared criteria hash, or None when not measured)."""
    base_by_id, base_no_id, base_repeated = _by_id(baseline)
    cand_by_id, cand_no_id, cand_repeated = _by_id(candidate)
    hashes_b = sorted({i.criteria_hash for i in baseline})
    hashes_c = sorted({i.criteria_hash for i in candidate})
    shared = hashes_b[0] if hashes_b == hashes_c and len(hashes_b) == 1 else None
    pairs, outcomes = [], []
    excluded = 0
    for external_id, cand in sorted(cand_by_id.items()):
        outcome = item_outcome(cand)
        base = base_by_id.get(external_id)
        if base is None or not base.usable:
            excluded += base is not None
            outcomes.append(outcome)
            continue
        pair = _Pair(
            external_id, bool(base.passed), float(base.total or 0.0),
            bool(cand.passed) if cand.usable else False, float(cand.total) if cand.usable else 0.0, cand.slice,
        )
        pairs.append(pair)
        if outcome.passed:
            outcomes.append(outcome)
        else:
            history = "pass→fail" if pair.base_passed else "failed in the baseline too"
            outcomes.append(ItemOutcome(external_id, False, f"{history}: {outcome.reason}"))
    outcomes += [item_outcome(i) for i in candidate if i.external_id is None]
    counts = {
        "baseline_items": len(baseline),
        "candidate_items": len(candidate),
        "pairs": len(pairs),
        "excluded_baseline_not_usable": excluded,
        "only_in_baseline": sum(1 for k in base_by_id if k not in cand_by_id),
        "only_in_candidate": sum(1 for k in cand_by_id if k not in base_by_id),
        "without_external_id": base_no_id + cand_no_id,
        "repeated_external_id": base_repeated + cand_repeated,
        "candidate_not_usable": sum(1 for i in candidate if not i.usable),
    }

    def report(overall: Verdicts, slices: list[SliceVerdict]) -> GateReport:
        return GateReport(baseline_name, candidate_name, shared, options, counts, overall, slices, outcomes)

    unfinished = [(name, sum(1 for i in side if i.unfinished)) for name, side in ((baseline_name, baseline), (candidate_name, candidate))]
    unfinished = [(name, n) for name, n in unfinished if n]
    if unfinished:
        what = "; ".join(f"{name} has {n} unfinished item(s)" for name, n in unfinished)
        return report(_refused(Failure(RULE_INCOMPLETE, f"{what}: gate a finished run"), options), [])
    if shared is None:
        message = (
            f"the sides were scored under different criteria: baseline {_hashes(hashes_b)}, candidate {_hashes(hashes_c)}; "
            "a difference would mix the rubric with the outputs (re-score the baseline under the current criteria)"
        )
        return report(_refused(Failure(RULE_HASH, message), options), [])
    overall = _verdicts(pairs, options, sigma_w_total, options.alpha, stats.CONFIDENCE)
    return report(overall, _slices(pairs, options, sigma_w_total) if options.by else [])


def _hashes(hashes: list[str]) -> str:
    return " and ".join(h[:12] + "…" for h in hashes) if hashes else "(no items)"


def _slices(pairs: Sequence[_Pair], options: GateOptions, sigma: float | None) -> list[SliceVerdict]:
    grouped: dict[str, list[_Pair]] = {}
    for pair in pairs:
        grouped.setdefault(pair.slice if pair.slice is not None else "(none)", []).append(pair)
    gated = sorted(name for name, members in grouped.items() if len(members) >= options.min_pairs)
    m = max(1, len(gated))
    confidence = 1 - (1 - stats.CONFIDENCE) / m
    p_values = [stats.mcnemar_from_pairs([p.base_passed for p in grouped[name]], [p.cand_passed for p in grouped[name]]).p_value
                for name in gated]
    levels = dict(zip(gated, holm_levels(p_values, options.alpha)))
    out = []
    for name in sorted(grouped):
        if name in levels:
            out.append(SliceVerdict(name, True, _verdicts(grouped[name], options, sigma, levels[name], confidence)))
        else:
            out.append(SliceVerdict(name, False, _verdicts(grouped[name], options, sigma, options.alpha, stats.CONFIDENCE)))
    return out


# --- a stored batch -------------------------------------------------------------------------------


def batch_items(session: Session, batch_id: uuid.UUID, *, by: str | None, chunk: int = 1000) -> list[GateItem]:
    """A stored batch's machine scores (never calibration repeats) as gate items, PostgreSQL or the
    embedded SQLite store; read a chunk at a time."""
    batches.get_batch(session, batch_id)  # NotFound names a missing batch
    query = (
        select(Score)
        .where(Score.batch_id == batch_id, machine_scores())
        .options(selectinload(Score.item))
        .execution_options(yield_per=chunk)
    )
    return list(items_from_scores(session.scalars(query), by=by))


def noise_sigma(session: Session, criteria_hash: str | None) -> float | None:
    """The judge's measured σw of the total under ``criteria_hash`` (None when not measured)."""
    floor = latest_noise(session, criteria_hash) if criteria_hash else None
    return None if floor is None else floor.total


def gate_batches(session: Session, baseline: uuid.UUID, candidate: uuid.UUID, options: GateOptions) -> GateReport:
    """Gate one stored batch against another, with the noise floor of their shared criteria."""
    if baseline == candidate:
        raise BadRequest("the baseline and the candidate are the same batch; gate two different batches")
    base = batch_items(session, baseline, by=options.by)
    cand = batch_items(session, candidate, by=options.by)
    hashes = {i.criteria_hash for i in (*base, *cand)}
    sigma = noise_sigma(session, next(iter(hashes))) if len(hashes) == 1 else None
    return evaluate(base, cand, options, sigma_w_total=sigma, baseline_name=f"batch {baseline}", candidate_name=f"batch {candidate}")
