"""Scoring generated pandas code (the pandas code-generation design): question and code analysis, result comparison,
quality and performance bands, error recovery, and the metrics.json / metrics_summary.json files.
The code itself only ever runs in :mod:`assay.scoring.sandbox`."""
