"""A tiny StormEvents-like dataset, inline and deterministic, with a pinned "now"."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

NOW = datetime(2007, 1, 31, 12, 0, 0)

_STATES = ["TEXAS", "IOWA", "KANSAS", "FLORIDA"]
# Every state has its own storm count (16, 12, 8, 4 of 40), so a sort by count has no ties.
_STATE_CYCLE = [0, 0, 0, 0, 1, 1, 1, 2, 2, 3]
_EVENTS = ["Flood", "Hail", "Tornado", "Flash Flood", "Thunderstorm Wind"]
_SOURCES = ["Law Enforcement", "Trained Spotter", "Public"]


def storm_events(rows: int = 40) -> list[dict[str, Any]]:
    """``rows`` storms spread over the 10 days before NOW, every value derived from the index.

    Sorting columns are free of ties (StartTime, DamageProperty), so sorted results are unique."""
    out = []
    for i in range(rows):
        start = NOW - timedelta(hours=6 * i + 1)
        out.append(
            {
                "StartTime": start,
                "EndTime": start + timedelta(minutes=30 + i),
                "State": _STATES[_STATE_CYCLE[i % len(_STATE_CYCLE)]],
                "EventType": _EVENTS[(i * 3) % len(_EVENTS)],
                "Source": _SOURCES[i % len(_SOURCES)],
                "DamageProperty": (i * 37 % 40) * 100,  # 37 is coprime to 40: a permutation
                "DamageCrops": (i % 3) * 250,
                "InjuriesDirect": i % 2,
            }
        )
    return out


POPULATION = [
    {"State": "TEXAS", "Population": 29_000_000},
    {"State": "IOWA", "Population": 3_200_000},
    {"State": "KANSAS", "Population": 2_900_000},
]


@pytest.fixture(scope="session")
def storm_tables() -> dict[str, list[dict[str, Any]]]:
    return {"StormEvents": storm_events(), "PopulationData": POPULATION}
