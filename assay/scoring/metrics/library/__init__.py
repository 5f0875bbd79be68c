"""Assay's library of deterministic metrics for the generic kind (importing it registers them)."""
