"""Semantic similarity of two parsed KQL queries (the KQL scoring design's 40 / 30 / 30 split, computed honestly).

Each part compares one aspect of :class:`~assay.scoring.kql.parser.QueryStructure` as a set of
normalised strings, with the Jaccard index::

    part(E, G) = |E ∩ G| / |E ∪ G|        (1.0 when both are empty)

    score = Σ weight_p · part_p / Σ weight_p   over the parts in use

The design's parts, always in use:

- ``tables`` (0.4): every table read, joins, unions and ``let`` bodies included;
- ``filters`` (0.3): the normalised ``where`` conjuncts;
- ``aggregations`` (0.3): aggregation expressions without aliases, together with the group-by keys
  written ``by <key>`` — the design names no group-by part, and a wrong ``by`` is a wrong
  aggregation (its scenario 3 docks "missing grouping" here).

``strict`` adds what that split cannot see, each with its own weight (defaults sum to 0.35, so
the design's parts keep 1 / 1.35 ≈ 74 % of the score):

- ``sort`` (0.1): the main pipeline's sort keys as ``<position>. <key> <direction>``, so a flipped
  direction or a reordered key list differs;
- ``take`` (0.1): the main pipeline's ``take`` / ``top`` size;
- ``join_kind`` (0.05): the kinds of every ``join`` / ``lookup``;
- ``projection`` (0.1): the expressions of the main pipeline's last ``project`` (aliases dropped,
  as for aggregations: renaming a column is the schema match's business).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from assay.scoring.kql.parser import QueryStructure


@dataclass(frozen=True)
class SimilarityWeights:
    tables: float = 0.4
    filters: float = 0.3
    aggregations: float = 0.3
    strict: bool = False
    sort: float = 0.1
    take: float = 0.1
    join_kind: float = 0.05
    projection: float = 0.1

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name != "strict" and (isinstance(value, bool) or not isinstance(value, int | float) or value < 0):
                raise ValueError(f"weight {f.name!r} must be a number >= 0, got {value!r}")
        if sum(w for _, w, _ in self.parts()) <= 0:
            raise ValueError("the similarity weights in use add up to 0")

    def parts(self) -> list[tuple[str, float, Callable[[QueryStructure], frozenset[str]]]]:
        parts = [
            ("tables", self.tables, lambda q: q.tables),
            ("filters", self.filters, lambda q: q.filters),
            ("aggregations", self.aggregations, _aggregation_items),
        ]
        if self.strict:
            parts += [
                ("sort", self.sort, _sort_items),
                ("take", self.take, lambda q: frozenset() if q.take is None else frozenset({f"take {q.take}"})),
                ("join_kind", self.join_kind, lambda q: q.join_kinds),
                ("projection", self.projection, lambda q: q.projected_columns),
            ]
        return parts


def _aggregation_items(query: QueryStructure) -> frozenset[str]:
    return query.aggregations | {f"by {key}" for key in query.group_by}


def _sort_items(query: QueryStructure) -> frozenset[str]:
    return frozenset(f"{position}. {key}" for position, key in enumerate(query.sort_keys, start=1))


def jaccard(expected: frozenset[str], generated: frozenset[str]) -> float:
    union = expected | generated
    return len(expected & generated) / len(union) if union else 1.0


def compare_structures(
    expected: QueryStructure, generated: QueryStructure, weights: SimilarityWeights
) -> tuple[float, dict[str, Any]]:
    """The weighted similarity and, per part, its score and what was missing or extra."""
    total = weighted = 0.0
    parts: dict[str, Any] = {}
    for name, weight, items in weights.parts():
        want, got = items(expected), items(generated)
        score = jaccard(want, got)
        total += weight
        weighted += weight * score
        parts[name] = {
            "score": round(score, 6),
            "weight": weight,
            "missing": sorted(want - got),
            "extra": sorted(got - want),
        }
    return weighted / total, {"strict": weights.strict, "parts": parts}
