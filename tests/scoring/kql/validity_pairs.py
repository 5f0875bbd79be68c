"""Validity pairs for the KQL metrics: (expected query, rewrite, equivalent?).

Written for this project in the style of NL2KQL / Sentinel hunting queries over a StormEvents-like
table (``StormEvents``: StartTime, EndTime, State, EventType, Source, DamageProperty, DamageCrops,
InjuriesDirect; ``PopulationData``: State, Population). An equivalent rewrite returns the same rows
for every dataset; a non-equivalent one changes what the query means.

``design_blind`` marks the non-equivalent rewrites the design's 40 / 30 / 30 split cannot see
(sort, take, join kind, projection): only ``strict`` tells them apart.
"""

from __future__ import annotations

from typing import NamedTuple


class ValidityPair(NamedTuple):
    name: str
    expected: str
    rewrite: str
    equivalent: bool
    design_blind: bool = False


S = "StormEvents"

EQUIVALENT = [
    ValidityPair(
        "days as hours",
        f"{S} | where StartTime > ago(1d) | count",
        f"{S} | where StartTime > ago(24h) | count",
        True,
    ),
    ValidityPair(
        "week as hours",
        f"{S} | where StartTime > ago(7d) | count",
        f"{S} | where StartTime > ago(168h) | count",
        True,
    ),
    ValidityPair(
        "day as minutes",
        f"{S} | where StartTime > ago(1d) | count",
        f"{S} | where StartTime > ago(1440m) | count",
        True,
    ),
    ValidityPair(
        "fractional hours",
        f"{S} | where StartTime > ago(90m) | count",
        f"{S} | where StartTime > ago(1.5h) | count",
        True,
    ),
    ValidityPair(
        "single quotes",
        f'{S} | where State == "TEXAS" | count',
        f"{S} | where State == 'TEXAS' | count",
        True,
    ),
    ValidityPair(
        "verbatim string",
        f'{S} | where Source == "Law Enforcement" | count',
        f'{S} | where Source == @"Law Enforcement" | count',
        True,
    ),
    ValidityPair(
        "in as or",
        f'{S} | where State in ("TEXAS", "IOWA") | summarize count() by State',
        f'{S} | where State == "IOWA" or State == "TEXAS" | summarize count() by State',
        True,
    ),
    ValidityPair(
        "!in as and",
        f'{S} | where State !in ("TEXAS", "IOWA") | count',
        f'{S} | where State != "TEXAS" and State != "IOWA" | count',
        True,
    ),
    ValidityPair(
        "in~ as =~ or",
        f'{S} | where State in~ ("texas", "iowa") | count',
        f'{S} | where State =~ "iowa" or State =~ "texas" | count',
        True,
    ),
    ValidityPair(
        "literal first",
        f'{S} | where State == "TEXAS" | count',
        f'{S} | where "TEXAS" == State | count',
        True,
    ),
    ValidityPair(
        "mirrored comparison",
        f"{S} | where StartTime > ago(1d) | count",
        f"{S} | where ago(1d) < StartTime | count",
        True,
    ),
    ValidityPair(
        "and operand order",
        f'{S} | where State == "TEXAS" and DamageProperty > 0 | count',
        f'{S} | where DamageProperty > 0 and State == "TEXAS" | count',
        True,
    ),
    ValidityPair(
        "split where",
        f'{S} | where State == "TEXAS" and DamageProperty > 0 | count',
        f'{S} | where DamageProperty > 0 | where State == "TEXAS" | count',
        True,
    ),
    ValidityPair(
        "redundant parentheses",
        f'{S} | where State == "TEXAS" and DamageProperty > 0 | count',
        f'{S} | where (State == "TEXAS") and ((DamageProperty > 0)) | count',
        True,
    ),
    ValidityPair(
        "aggregation alias",
        f"{S} | summarize Count = count() by State",
        f"{S} | summarize count() by State",
        True,
    ),
    ValidityPair(
        "alias used by sort",
        f"{S} | summarize Events = count() by State | sort by Events desc | take 3",
        f"{S} | summarize count() by State | sort by count_ desc | take 3",
        True,
    ),
    ValidityPair(
        "default aggregate name in filter",
        f"{S} | summarize Total = sum(DamageProperty) by State | where Total > 1000",
        f"{S} | summarize sum(DamageProperty) by State | where sum_DamageProperty > 1000",
        True,
    ),
    ValidityPair(
        "whitespace and comments",
        f'{S} | where State == "TEXAS" | summarize count() by EventType',
        f'{S}\n  // storms in Texas\n  |   where   State=="TEXAS"\n  | summarize\n      count()\n    by EventType',
        True,
    ),
    ValidityPair("count(*)", f"{S} | summarize count() by State", f"{S} | summarize count(*) by State", True),
    ValidityPair(
        "between",
        f"{S} | where DamageProperty between (1000 .. 5000) | count",
        f"{S} | where DamageProperty >= 1000 and DamageProperty <= 5000 | count",
        True,
    ),
    ValidityPair(
        "real literal",
        f"{S} | where DamageProperty > 1000 | count",
        f"{S} | where DamageProperty > 1000.0 | count",
        True,
    ),
    ValidityPair(
        "default sort direction",
        f"{S} | sort by DamageProperty | take 5 | project State, DamageProperty",
        f"{S} | sort by DamageProperty desc | take 5 | project State, DamageProperty",
        True,
    ),
    ValidityPair(
        "order by is sort by",
        f"{S} | order by StartTime asc | take 3 | project StartTime, State",
        f"{S} | sort by StartTime asc | take 3 | project StartTime, State",
        True,
    ),
    ValidityPair(
        "limit is take",
        f"{S} | sort by StartTime | take 10 | project State",
        f"{S} | sort by StartTime | limit 10 | project State",
        True,
    ),
    ValidityPair(
        "top is sort and take",
        f"{S} | top 5 by DamageProperty desc | project State, DamageProperty",
        f"{S} | sort by DamageProperty desc | take 5 | project State, DamageProperty",
        True,
    ),
    ValidityPair(
        "anti is leftanti",
        f"{S} | join kind=anti (PopulationData) on State | count",
        f"{S} | join kind=leftanti (PopulationData) on State | count",
        True,
    ),
    ValidityPair(
        "extended column in filter",
        f"{S} | where DamageProperty + DamageCrops > 0 | count",
        f"{S} | extend Total = DamageProperty + DamageCrops | where Total > 0 | count",
        True,
    ),
    ValidityPair(
        "scalar let",
        f"{S} | where DamageProperty > 1000 | count",
        f"let threshold = 1000; {S} | where DamageProperty > threshold | count",
        True,
    ),
    ValidityPair(
        "tabular let",
        f'{S} | where State == "TEXAS" | count',
        f'let Texas = {S} | where State == "TEXAS"; Texas | count',
        True,
    ),
    ValidityPair("distinct is summarize by", f"{S} | distinct State", f"{S} | summarize by State", True),
    ValidityPair(
        "datetime spelling",
        f"{S} | where StartTime >= datetime(2007-01-01) | count",
        f'{S} | where StartTime >= datetime("2007-01-01 00:00:00") | count',
        True,
    ),
    ValidityPair(
        "escaped column name",
        f'{S} | where State == "TEXAS" | count',
        f"{S} | where ['State'] == \"TEXAS\" | count",
        True,
    ),
]

NOT_EQUIVALENT = [
    ValidityPair(
        "dropped filter",
        f'{S} | where State == "TEXAS" and EventType == "Flood" | count',
        f'{S} | where State == "TEXAS" | count',
        False,
    ),
    ValidityPair(
        "changed filter value",
        f'{S} | where State == "TEXAS" | count',
        f'{S} | where State == "IOWA" | count',
        False,
    ),
    ValidityPair(
        "changed time window",
        f"{S} | where StartTime > ago(1d) | count",
        f"{S} | where StartTime > ago(7d) | count",
        False,
    ),
    ValidityPair(
        "strict vs inclusive comparison",
        f"{S} | where DamageProperty > 1000 | count",
        f"{S} | where DamageProperty >= 1000 | count",
        False,
    ),
    ValidityPair(
        "sum instead of avg",
        f"{S} | summarize avg(DamageProperty) by State",
        f"{S} | summarize sum(DamageProperty) by State",
        False,
    ),
    ValidityPair(
        "count instead of dcount",
        f"{S} | summarize dcount(EventType) by State",
        f"{S} | summarize count() by State",
        False,
    ),
    ValidityPair("wrong group-by", f"{S} | summarize count() by State", f"{S} | summarize count() by EventType", False),
    ValidityPair("missing group-by", f"{S} | summarize count() by State", f"{S} | summarize count()", False),
    ValidityPair(
        "extra group key",
        f"{S} | summarize count() by State",
        f"{S} | summarize count() by State, EventType",
        False,
    ),
    ValidityPair(
        "in list shortened",
        f'{S} | where State in ("TEXAS", "IOWA") | count',
        f'{S} | where State in ("TEXAS") | count',
        False,
    ),
    ValidityPair(
        "has instead of contains",
        f'{S} | where EventType contains "Flood" | count',
        f'{S} | where EventType has "Flood" | count',
        False,
    ),
    ValidityPair(
        "case-insensitive equality",
        f'{S} | where State == "texas" | count',
        f'{S} | where State =~ "texas" | count',
        False,
    ),
    ValidityPair(
        "or instead of and",
        f'{S} | where State == "TEXAS" and EventType == "Flood" | count',
        f'{S} | where State == "TEXAS" or EventType == "Flood" | count',
        False,
    ),
    ValidityPair(
        "negated equality",
        f'{S} | where State == "TEXAS" | count',
        f'{S} | where State != "TEXAS" | count',
        False,
    ),
    ValidityPair(
        "wrong table",
        f"{S} | summarize count() by State",
        "PopulationData | summarize count() by State",
        False,
    ),
    ValidityPair(
        "wrong joined table",
        f"{S} | join kind=inner (PopulationData) on State | count",
        f"{S} | join kind=inner (StormEventsArchive) on State | count",
        False,
    ),
    ValidityPair(
        "flipped sort",
        f"{S} | sort by DamageProperty desc | take 5 | project State, DamageProperty",
        f"{S} | sort by DamageProperty asc | take 5 | project State, DamageProperty",
        False,
        design_blind=True,
    ),
    ValidityPair(
        "different sort key",
        f"{S} | sort by DamageProperty desc | take 5 | project State, DamageProperty",
        f"{S} | sort by DamageCrops desc | take 5 | project State, DamageProperty",
        False,
        design_blind=True,
    ),
    ValidityPair(
        "sort keys swapped",
        f"{S} | sort by State asc, DamageProperty desc | project State, DamageProperty",
        f"{S} | sort by DamageProperty desc, State asc | project State, DamageProperty",
        False,
        design_blind=True,
    ),
    ValidityPair(
        "different take",
        f"{S} | sort by DamageProperty desc | take 10 | project State",
        f"{S} | sort by DamageProperty desc | take 5 | project State",
        False,
        design_blind=True,
    ),
    ValidityPair(
        "missing take",
        f"{S} | where State == \"TEXAS\" | take 3",
        f"{S} | where State == \"TEXAS\"",
        False,
        design_blind=True,
    ),
    ValidityPair(
        "different top size",
        f"{S} | top 5 by DamageProperty desc | project State",
        f"{S} | top 3 by DamageProperty desc | project State",
        False,
        design_blind=True,
    ),
    ValidityPair(
        "wrong join kind",
        f"{S} | join kind=inner (PopulationData) on State | count",
        f"{S} | join kind=leftouter (PopulationData) on State | count",
        False,
        design_blind=True,
    ),
    ValidityPair(
        "projection differs",
        f"{S} | where State == \"TEXAS\" | project State, EventType",
        f"{S} | where State == \"TEXAS\" | project State",
        False,
        design_blind=True,
    ),
]

PAIRS = EQUIVALENT + NOT_EQUIVALENT
