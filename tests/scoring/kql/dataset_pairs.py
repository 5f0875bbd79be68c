"""Validity pairs run on the shipped ``storm`` dataset (``examples/datasets/storm``): an expected
query, a rewrite, and whether the rewrite is equivalent.

Adapted from :mod:`tests.scoring.kql.validity_pairs` (written in the style of NL2KQL and Sentinel
hunting queries) to the columns and values of the sample dataset, with ``now`` pinned to
:data:`NOW` (every StartTime lies in 2007). Pairs are grouped by expected query, so that every
non-equivalent rewrite has equivalent twins to be compared with.

A non-equivalent rewrite must differ *on this dataset* as well (the test checks it): a wrong query
whose rows happen to be right here (``sum`` vs ``avg`` over groups of one row, a filter value with
the same count) proves nothing about the metrics and is left out.

``category`` names what the rewrite changes, in the issue's words: equivalent rewrites change time
units, quote style, ``in`` vs ``or``, operand order, aliases or whitespace (and a few other
spellings); non-equivalent ones drop or change a filter, aggregate or group wrongly, flip the sort,
take a different number of rows, join with the wrong kind or read the wrong table.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import NamedTuple

NOW = datetime(2007, 12, 31, tzinfo=timezone.utc)


class DatasetPair(NamedTuple):
    group: str
    name: str
    expected: str
    rewrite: str
    equivalent: bool
    category: str

    @property
    def id(self) -> str:
        return f"{self.group}: {self.name}"


S = "StormEvents"

# Equivalent-rewrite categories, and non-equivalent ones, as the issue lists them.
EQUIVALENT_CATEGORIES = {"time units", "quote style", "in vs or", "operand order", "alias", "whitespace"}
NOT_EQUIVALENT_CATEGORIES = {
    "dropped filter",
    "changed filter",
    "wrong aggregation",
    "wrong group-by",
    "flipped sort",
    "different take",
    "wrong join kind",
    "wrong table",
}

_GROUPS: dict[str, tuple[str, list[tuple[str, str, bool, str]]]] = {
    "storms per state in the last 30 days": (
        f"{S} | where StartTime > ago(30d) | summarize count() by State",
        [
            ("days as hours", f"{S} | where StartTime > ago(720h) | summarize count() by State", True, "time units"),
            ("days as minutes", f"{S} | where StartTime > ago(43200m) | summarize count() by State", True, "time units"),
            ("mirrored comparison", f"{S} | where ago(30d) < StartTime | summarize count() by State", True, "operand order"),
            ("aggregation alias", f"{S} | where StartTime > ago(30d) | summarize Storms = count() by State", True, "alias"),
            (
                "whitespace and comments",
                f"{S}\n// the last month\n| where   StartTime>ago(30d)\n|   summarize\n    count()\n  by State",
                True,
                "whitespace",
            ),
            ("changed time window", f"{S} | where StartTime > ago(60d) | summarize count() by State", False, "changed filter"),
            ("dropped time filter", f"{S} | summarize count() by State", False, "dropped filter"),
            ("wrong group-by", f"{S} | where StartTime > ago(30d) | summarize count() by EventType", False, "wrong group-by"),
            (
                "extra group key",
                f"{S} | where StartTime > ago(30d) | summarize count() by State, EventType",
                False,
                "wrong group-by",
            ),
        ],
    ),
    "storms in three states": (
        f'{S} | where State in ("TEXAS", "KANSAS", "IOWA") | project StartTime, State, EventType, DamageProperty',
        [
            (
                "in as or",
                (
                    f"{S} | where State == 'IOWA' or State == 'KANSAS' or State == 'TEXAS' "
                    "| project StartTime, State, EventType, DamageProperty"
                ),
                True,
                "in vs or",
            ),
            (
                "single quotes",
                f"{S} | where State in ('TEXAS', 'KANSAS', 'IOWA') | project StartTime, State, EventType, DamageProperty",
                True,
                "quote style",
            ),
            (
                "literal first",
                (
                    f'{S} | where "TEXAS" == State or "KANSAS" == State or "IOWA" == State '
                    "| project StartTime, State, EventType, DamageProperty"
                ),
                True,
                "operand order",
            ),
            (
                "in list shortened",
                f'{S} | where State in ("TEXAS", "KANSAS") | project StartTime, State, EventType, DamageProperty',
                False,
                "changed filter",
            ),
            (
                "changed filter value",
                f'{S} | where State in ("TEXAS", "KANSAS", "OHIO") | project StartTime, State, EventType, DamageProperty',
                False,
                "changed filter",
            ),
            (
                "negated filter",
                f'{S} | where State !in ("TEXAS", "KANSAS", "IOWA") | project StartTime, State, EventType, DamageProperty',
                False,
                "changed filter",
            ),
        ],
    ),
    "property damage per state": (
        f"{S} | where DamageProperty > 0 | summarize TotalDamage = sum(DamageProperty) by State",
        [
            ("constant first", f"{S} | where 0 < DamageProperty | summarize TotalDamage = sum(DamageProperty) by State", True, "operand order"),
            ("default aggregate name", f"{S} | where DamageProperty > 0 | summarize sum(DamageProperty) by State", True, "alias"),
            ("real literal", f"{S} | where DamageProperty > 0.0 | summarize TotalDamage = sum(DamageProperty) by State", True, "literal spelling"),
            ("avg instead of sum", f"{S} | where DamageProperty > 0 | summarize TotalDamage = avg(DamageProperty) by State", False, "wrong aggregation"),
            ("max instead of sum", f"{S} | where DamageProperty > 0 | summarize max(DamageProperty) by State", False, "wrong aggregation"),
            ("inclusive comparison", f"{S} | where DamageProperty >= 0 | summarize TotalDamage = sum(DamageProperty) by State", False, "changed filter"),
            ("wrong group-by", f"{S} | where DamageProperty > 0 | summarize TotalDamage = sum(DamageProperty) by EventType", False, "wrong group-by"),
        ],
    ),
    "damaging tornadoes": (
        f'{S} | where EventType == "Tornado" and DamageProperty > 0 | count',
        [
            ("and operand order", f'{S} | where DamageProperty > 0 and EventType == "Tornado" | count', True, "operand order"),
            ("split where, single quotes", f"{S} | where DamageProperty > 0 | where EventType == 'Tornado' | count", True, "quote style"),
            ("count as summarize", f'{S} | where EventType == "Tornado" and DamageProperty > 0 | summarize Count = count()', True, "alias"),
            ("dropped filter", f'{S} | where EventType == "Tornado" | count', False, "dropped filter"),
            ("or instead of and", f'{S} | where EventType == "Tornado" or DamageProperty > 0 | count', False, "changed filter"),
            ("changed filter value", f'{S} | where EventType == "Sleet" and DamageProperty > 0 | count', False, "changed filter"),
        ],
    ),
    "the five most damaging storms": (
        f"{S} | top 5 by DamageProperty desc | project State, EventType, DamageProperty",
        [
            ("sort and take", f"{S} | sort by DamageProperty desc | take 5 | project State, EventType, DamageProperty", True, "operator spelling"),
            ("default direction", f"{S} | order by DamageProperty | limit 5 | project State, EventType, DamageProperty", True, "operator spelling"),
            ("flipped sort", f"{S} | top 5 by DamageProperty asc | project State, EventType, DamageProperty", False, "flipped sort"),
            ("different take", f"{S} | top 3 by DamageProperty desc | project State, EventType, DamageProperty", False, "different take"),
            ("different sort key", f"{S} | top 5 by DamageCrops desc | project State, EventType, DamageProperty", False, "flipped sort"),
        ],
    ),
    "damaging storms in populous states": (
        (
            f"{S} | where DamageProperty > 0 | join kind=inner (PopulationData | where Population > 20000000) on State "
            "| summarize count() by State"
        ),
        [
            (
                "operand order in the joined filter",
                (
                    f"{S} | where DamageProperty > 0 | join kind=inner (PopulationData | where 20000000 < Population) on State "
                    "| summarize count() by State"
                ),
                True,
                "operand order",
            ),
            (
                "aggregation alias",
                (
                    f"{S} | where DamageProperty > 0 | join kind=inner (PopulationData | where Population > 20000000) on State "
                    "| summarize Storms = count() by State"
                ),
                True,
                "alias",
            ),
            (
                "left outer instead of inner",
                (
                    f"{S} | where DamageProperty > 0 | join kind=leftouter (PopulationData | where Population > 20000000) on State "
                    "| summarize count() by State"
                ),
                False,
                "wrong join kind",
            ),
            (
                "anti instead of inner",
                (
                    f"{S} | where DamageProperty > 0 | join kind=leftanti (PopulationData | where Population > 20000000) on State "
                    "| summarize count() by State"
                ),
                False,
                "wrong join kind",
            ),
        ],
    ),
    "report sources per event type": (
        f"{S} | summarize Sources = dcount(Source) by EventType",
        [
            ("default aggregate name", f"{S} | summarize dcount(Source) by EventType", True, "alias"),
            ("count instead of dcount", f"{S} | summarize Sources = count() by EventType", False, "wrong aggregation"),
            ("wrong table", "PopulationData | summarize Sources = dcount(State) by State", False, "wrong table"),
        ],
    ),
    "storms per state": (
        f"{S} | summarize count() by State",
        [
            ("alias and whitespace", f"{S}\n| summarize Events = count()\n    by State", True, "whitespace"),
            ("count(*)", f"{S} | summarize count(*) by State", True, "function spelling"),
            ("wrong table", "PopulationData | summarize count() by State", False, "wrong table"),
            ("misspelt table", "StormEvent | summarize count() by State", False, "wrong table"),
            ("missing group-by", f"{S} | summarize count()", False, "wrong group-by"),
        ],
    ),
    "injuries reported by trained spotters": (
        f'{S} | where Source == "Trained Spotter" | summarize AvgInjuries = avg(InjuriesDirect)',
        [
            ("verbatim string", f'{S} | where Source == @"Trained Spotter" | summarize AvgInjuries = avg(InjuriesDirect)', True, "quote style"),
            (
                "single quotes, constant first, default name",
                f"{S} | where 'Trained Spotter' == Source | summarize avg(InjuriesDirect)",
                True,
                "alias",
            ),
            ("sum instead of avg", f'{S} | where Source == "Trained Spotter" | summarize sum(InjuriesDirect)', False, "wrong aggregation"),
            ("changed filter value", f'{S} | where Source == "Public" | summarize AvgInjuries = avg(InjuriesDirect)', False, "changed filter"),
        ],
    ),
    "the two busiest states": (
        f"{S} | summarize Events = count() by State | sort by Events desc | take 2",
        [
            ("default names", f"{S} | summarize count() by State | sort by count_ desc | take 2", True, "alias"),
            ("top", f"{S} | summarize Events = count() by State | top 2 by Events desc", True, "operator spelling"),
            ("flipped sort", f"{S} | summarize Events = count() by State | sort by Events asc | take 2", False, "flipped sort"),
            ("different take", f"{S} | summarize Events = count() by State | sort by Events desc | take 5", False, "different take"),
        ],
    ),
}

PAIRS = [
    DatasetPair(group, name, expected, rewrite, equivalent, category)
    for group, (expected, rewrites) in _GROUPS.items()
    for name, rewrite, equivalent, category in rewrites
]
EQUIVALENT = [p for p in PAIRS if p.equivalent]
NOT_EQUIVALENT = [p for p in PAIRS if not p.equivalent]


def twins(pair: DatasetPair) -> list[DatasetPair]:
    """The equivalent rewrites of the pair's expected query."""
    return [p for p in EQUIVALENT if p.group == pair.group]
