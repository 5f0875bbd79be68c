"""Performance: run time (best of 3) and peak memory, measured by the sandbox's executor, mapped to
coarse bands so machine noise does not move the score.

With reference code, each figure is a ratio to the reference's, after a floor (times under
``time_floor_ms``, memory under ``memory_floor_mb`` count as the floor: both are noise at that size):

==============  =====
ratio ≤ 2       1.00
ratio ≤ 5       0.75
ratio ≤ 20      0.50
ratio ≤ 100     0.25
more            0.00
==============  =====

Without reference code (an item with only an expected result), absolute bands: time ≤ 100 ms 1.0,
≤ 500 ms 0.75, ≤ 2 s 0.5, ≤ 8 s 0.25, else 0; memory ≤ 64 MB 1.0, ≤ 256 MB 0.75, ≤ 1 GB 0.5,
else 0.25. Score = ``time_weight × time band + (1 − time_weight) × memory band`` (0.7 / 0.3).
"""

from __future__ import annotations

from typing import Any

RATIO_BANDS = ((2.0, 1.0), (5.0, 0.75), (20.0, 0.5), (100.0, 0.25))
TIME_BANDS_MS = ((100.0, 1.0), (500.0, 0.75), (2000.0, 0.5), (8000.0, 0.25))
MEMORY_BANDS_MB = ((64.0, 1.0), (256.0, 0.75), (1024.0, 0.5))


def _band(value: float, bands: tuple[tuple[float, float], ...], last: float = 0.0) -> float:
    for limit, score in bands:
        if value <= limit:
            return score
    return last


def performance_score(
    generated: dict[str, Any],
    reference: dict[str, Any] | None,
    *,
    time_weight: float = 0.7,
    time_floor_ms: float = 50.0,
    memory_floor_mb: float = 32.0,
) -> tuple[float, dict[str, Any]]:
    """``generated`` / ``reference``: ``wall_ms``, ``wall_ms_runs``, ``peak_memory_kb``,
    ``peak_memory_kb_runs`` of successful runs."""
    gen_ms = float(generated.get("wall_ms") or 0.0)
    gen_mb = float(generated.get("peak_memory_kb") or 0) / 1024
    details: dict[str, Any] = {
        "generated_wall_ms": round(gen_ms, 3),
        "generated_wall_ms_runs": generated.get("wall_ms_runs"),
        "generated_peak_memory_mb": round(gen_mb, 3),
        "generated_cpu_ms": generated.get("cpu_ms"),
        "time_floor_ms": time_floor_ms,
        "memory_floor_mb": memory_floor_mb,
        "time_weight": time_weight,
    }
    if reference is not None:
        ref_ms = float(reference.get("wall_ms") or 0.0)
        ref_mb = float(reference.get("peak_memory_kb") or 0) / 1024
        time_ratio = max(gen_ms, time_floor_ms) / max(ref_ms, time_floor_ms)
        memory_ratio = max(gen_mb, memory_floor_mb) / max(ref_mb, memory_floor_mb)
        time_band = _band(time_ratio, RATIO_BANDS)
        memory_band = _band(memory_ratio, RATIO_BANDS)
        details.update(
            basis="relative to the reference",
            reference_wall_ms=round(ref_ms, 3),
            reference_wall_ms_runs=reference.get("wall_ms_runs"),
            reference_peak_memory_mb=round(ref_mb, 3),
            time_ratio=round(time_ratio, 4),
            memory_ratio=round(memory_ratio, 4),
        )
    else:
        time_band = _band(gen_ms, TIME_BANDS_MS)
        memory_band = _band(gen_mb, MEMORY_BANDS_MB, last=0.25)
        details["basis"] = "absolute (no reference code)"
    score = time_weight * time_band + (1 - time_weight) * memory_band
    details.update(time_band=time_band, memory_band=memory_band, performance_score=round(score, 6))
    return score, details
