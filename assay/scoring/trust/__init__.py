"""How far to trust a score: compare, statistics, the judge's noise, calibration, labels, agreement, review."""

# How many items a report lists at most (compare's moved and flipped items, a diff page, their --limit):
# one bound for the CLI and the API; every item is in the CSV exports.
LIST_LIMIT = 100
