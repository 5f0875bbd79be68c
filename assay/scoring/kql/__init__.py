"""KQL analysis for the ``kql`` kind: query structure from a real grammar, and offline execution.

``parse_query`` is the only way in to the grammar; :mod:`assay.scoring.kql.execute` runs queries on
small in-memory tables with duckdb-kql; :mod:`assay.scoring.kql.offline` runs dataset-backed items'
queries on a registered dataset, cached per process; :mod:`assay.scoring.kql.report` gives the
columns of KQL reports.
"""

from assay.scoring.kql.parser import KqlParseError, QueryStructure, SortKey, parse_query

__all__ = ["KqlParseError", "QueryStructure", "SortKey", "parse_query"]
