"""The built-in ``pairwise`` kind: one item is two systems' outputs for the same input, A and B.

A pairwise run (``assay.scoring.trust.pairwise``) builds these items from stored batches matched by
external id; nobody uploads them, and no suite may name the kind (``internal``). The judge sees the
first system's item as it would be judged alone (``{{input}}``, ``{{expected}}``, ``{{metadata.KEY}}``
and any other placeholder its kind gives), without ``{{output}}``, plus ``{{output_a}}`` and
``{{output_b}}``. Which output goes in which slot is the component's business: the two components of
a pairwise criteria are the two orders, the second with the placeholders swapped in its template.

An item whose text does not fit the judge model's context window fails the judge components with the
sizes (:class:`ItemTooLong`): an output is never cut, since a cut output would lose the comparison.
"""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from assay.scoring.judge.governor import estimate_tokens
from assay.scoring.judge.prompt import template_placeholders
from assay.scoring.kinds import Kind
from assay.scoring.kinds.alert_session import input_budget
from assay.scoring.kinds.generic import ITEM_CHARS, ItemTooLong
from assay.scoring.suites.pairwise import OUTPUT_A, OUTPUT_B

KIND_NAME = "pairwise"
# The two judge components of pairwise criteria: the two orders the outputs are shown in.
A_FIRST, B_FIRST = "a_first", "b_first"


class PairSide(BaseModel):
    """Where one side of the pair comes from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    batch_id: uuid.UUID
    item_id: uuid.UUID


class PairItem(BaseModel):
    """Two outputs for one input, with the first system's other placeholder values."""

    model_config = ConfigDict(extra="forbid", str_max_length=2 * ITEM_CHARS)

    id: str = Field(..., min_length=1, max_length=255, description="The external id both outputs share.")
    a: PairSide
    b: PairSide
    inputs: dict[str, str] = Field(..., description="The placeholder values of A's item, its output left out.")
    output_a: str
    output_b: str
    metadata: dict[str, Any] | None = Field(None, description="A's item metadata (slices read it).")


def judge_inputs(item: PairItem) -> dict[str, str]:
    return {**item.inputs, OUTPUT_A: item.output_a, OUTPUT_B: item.output_b}


def prepare_judge(
    item: PairItem,
    *,
    template: str,
    verdict_model: type[BaseModel],
    model: str,
    max_tokens: int,
    context_window: int,
) -> tuple[dict[str, str], dict[str, Any]]:
    """The placeholder values when they fit the judge model's context window; ItemTooLong otherwise."""
    inputs = judge_inputs(item)
    budget = input_budget(template, verdict_model, max_tokens=max_tokens, context_window=context_window)
    sizes = {name: estimate_tokens(inputs[name]) for name in template_placeholders(template) if name in inputs}
    total = sum(sizes.values())
    record = {"estimated_tokens": total, "budget_tokens": budget, "context_window": context_window, "model": model}
    if total > budget:
        largest = ", ".join(f"{{{{{name}}}}} ~{tokens}" for name, tokens in sorted(sizes.items(), key=lambda s: -s[1]))
        raise ItemTooLong(
            f"the pair is too long for judge model {model}: about {total} tokens of item text ({largest}), over the "
            f"{budget} tokens available in its {context_window}-token context window (outputs are never cut)",
            judge_input=record,
        )
    return inputs, {"judge_input": record}


def external_id(item: PairItem) -> str:
    return item.id


KIND = Kind(
    name=KIND_NAME,
    item_model=PairItem,
    judge_inputs=judge_inputs,  # type: ignore[arg-type]
    prepare_judge=prepare_judge,
    external_id=external_id,  # type: ignore[arg-type]
    internal=True,
)
