"""Intake: uploads become batches, items and pending scores; datasets; idempotency; the one JSON reader."""
