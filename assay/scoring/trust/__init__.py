"""How far to trust a score: compare, statistics, the judge's noise, calibration, labels, agreement, review."""
