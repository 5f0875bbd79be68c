"""What a judge call costs: token usage times the model catalog's prices.

Its own small module so that the judge service and ``assay.observability`` both use it without
importing each other (observability imports no judge module; the judge imports observability)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

# The token counts a provider reports for one answer (Anthropic's ``message.usage`` field names).
USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


class Price(Protocol):
    """USD per million tokens (``assay.scoring.suites.catalog.ModelPrice`` is one)."""

    input_per_mtok: float
    output_per_mtok: float
    cache_read_per_mtok: float
    cache_write_per_mtok: float


def cost_usd(usage: Mapping[str, int], price: Price) -> float:
    return (
        usage.get("input_tokens", 0) * price.input_per_mtok
        + usage.get("output_tokens", 0) * price.output_per_mtok
        + usage.get("cache_read_input_tokens", 0) * price.cache_read_per_mtok
        + usage.get("cache_creation_input_tokens", 0) * price.cache_write_per_mtok
    ) / 1_000_000
