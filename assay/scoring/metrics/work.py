"""Bounded work per item (invariant 11): what one item may cost a metric, checked before it runs.

A metric registers a :class:`WorkBound`: a unit of work (``"LCS cells"``), the most one item may
cause, and a ``measure`` that computes, cheaply and from the sizes alone, how much work an item would
cause (``Work``: the amount and the sizes it comes from). The registry checks the bound before it
calls the metric, for every built metric alike (Assay's, a kind's or a plug-in's): over the bound,
the component fails with a reason naming the sizes and the bound, and the metric is never called.

A measure must itself be linear in the item (count, do not compute): it runs on every item.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from assay.scoring.errors import AssayError


@dataclass(frozen=True)
class Work:
    """How much work one item would cause, and the sizes it was computed from."""

    amount: int
    sizes: str  # e.g. "2,000 output tokens x 40,000 reference tokens (20 references)"


@dataclass(frozen=True)
class WorkBound:
    """The most ``unit`` one item may cost a metric; ``measure(args, item)`` counts it beforehand."""

    unit: str
    limit: int
    measure: Callable[[Any, Any], Work]
    hint: str = ""  # what to do instead, appended to the reason ("use chrf for long texts")

    def __post_init__(self) -> None:
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1:
            raise ValueError(f"a work bound's limit is an integer >= 1, got {self.limit!r}")

    def check(self, args: Any, item: Any) -> None:
        """Raise :class:`WorkTooLarge` when ``item`` would cost more than the bound."""
        work = self.measure(args, item)
        if work.amount > self.limit:
            raise WorkTooLarge(self, work)


class WorkTooLarge(AssayError):
    """An item would cost a metric more work than its bound allows; the component fails with this."""

    status_code = 422
    code = "work_bound_exceeded"

    def __init__(self, bound: WorkBound, work: Work) -> None:
        super().__init__(
            f"too much work for one item: {work.sizes} = {work.amount:,} {bound.unit}, over the bound of "
            f"{bound.limit:,} {bound.unit} per item" + (f"; {bound.hint}" if bound.hint else ""),
            work_bound={"unit": bound.unit, "amount": work.amount, "limit": bound.limit, "sizes": work.sizes},
        )


def check_bounds(bounds: tuple[WorkBound, ...], args: Any, item: Any) -> None:
    """Check every bound of a metric, in order, before the metric runs."""
    for bound in bounds:
        bound.check(args, item)
