"""Assay's library of deterministic metrics for the generic kind; importing it registers them.

Every metric is version 1, scores items of kind ``generic`` and takes a pydantic args model
(unknown arguments are refused). Arguments marked so in each args model may name a per-item value
instead of a constant: ``{from: expected}``, ``{from: input}``, ``{from: metadata.KEY}``.
"""

from assay.scoring.metrics.library import json_checks, lists, numeric, similarity, text

__all__ = ["json_checks", "lists", "numeric", "similarity", "text"]
