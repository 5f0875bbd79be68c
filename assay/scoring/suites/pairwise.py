"""A suite's ``pairwise:`` section: the rubric that compares two outputs of the same item.

::

    pairwise:
      rubric: Which answer is more helpful and correct?
      prompt: |                      # optional; DEFAULT_PROMPT shows the input and both outputs
        ### Question
        {{input}}

        ### Output A
        {{output_a}}

        ### Output B
        {{output_b}}
      provider: anthropic            # optional, as a rubric judge's
      model: claude-haiku-4-5        # optional: the provider's default model
      max_tokens: 1024               # optional

The verdict is fixed: ``label`` one of ``a | b | tie``, with ``reasoning``. The prompt names both
``{{output_a}}`` and ``{{output_b}}`` and may name any placeholder of the compared items' kind. The
section is checked when the suite is loaded (here) and resolved into the criteria of a pairwise run
by ``assay.scoring.trust.pairwise``; it is an operational option of the suite, outside its criteria
hash, so editing it never makes the suite's absolute scores stale. A run hashes it on its own.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from assay.scoring.errors import CriteriaError
from assay.scoring.judge.prompt import PLACEHOLDER, template_placeholders
from assay.scoring.judge.rubrics import VerdictSpec, compose_template
from assay.scoring.suites.providers import ReasoningEffort

# The placeholders of the two outputs (the ``pairwise`` kind fills them).
OUTPUT_A, OUTPUT_B = "output_a", "output_b"
DEFAULT_PROMPT = "### Input\n{{input}}\n\n### Output A\n{{output_a}}\n\n### Output B\n{{output_b}}\n"
DEFAULT_MAX_TOKENS = 1024
# Fixed text after the rubric, the same in both orders: what the labels mean.
LABELS_RULE = (
    "Compare Output A with Output B. Answer `a` when Output A is better, `b` when Output B is better, "
    "and `tie` when neither is better."
)
# The verdict's labels, in the order the judge reads them.
LABELS = ("a", "b", "tie")


class PairwiseSection(BaseModel):
    """The ``pairwise:`` section as written."""

    model_config = ConfigDict(extra="forbid")

    rubric: str = Field(..., min_length=1)
    prompt: str = DEFAULT_PROMPT
    provider: str = "anthropic"
    model: str = ""
    max_tokens: int = Field(DEFAULT_MAX_TOKENS, gt=0, le=64_000)
    temperature: float | None = Field(None, ge=0, le=2)
    seed: int | None = None
    reasoning_effort: ReasoningEffort | None = None

    @property
    def parameters(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in ("temperature", "seed", "reasoning_effort") if getattr(self, name) is not None}


def order_verdict(b_first: bool) -> VerdictSpec:
    """The verdict of one order, scored as B's share of the pair: 1 when B wins, 0 when A does, ½ a tie.
    In the B-first order B's output sits in the ``a`` slot, so ``a`` is B's win."""
    return VerdictSpec(type="labels", labels={"a": 1.0 if b_first else 0.0, "b": 0.0 if b_first else 1.0, "tie": 0.5})


def swapped(prompt: str) -> str:
    """``prompt`` with ``{{output_a}}`` and ``{{output_b}}`` exchanged: the B-first order."""
    swap = {OUTPUT_A: OUTPUT_B, OUTPUT_B: OUTPUT_A}
    return PLACEHOLDER.sub(lambda m: "{{" + swap.get(m.group(1), m.group(1)) + "}}", prompt)


def parse_section(raw: Any) -> PairwiseSection:
    """The section, or CriteriaError naming what is wrong (its fields, a missing output placeholder, a
    placeholder in the rubric)."""
    try:
        section = PairwiseSection.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise CriteriaError(f"pairwise{'.' + where if where else ''}: {first['msg']}") from None
    missing = [name for name in (OUTPUT_A, OUTPUT_B) if name not in template_placeholders(section.prompt)]
    if missing:
        raise CriteriaError(
            f"pairwise.prompt: must show both outputs; it lacks {', '.join('{{' + n + '}}' for n in missing)}"
        )
    try:
        compose_template(full_rubric(section), section.prompt, order_verdict(False))
    except CriteriaError as exc:
        raise CriteriaError(f"pairwise.{exc.message}") from None
    return section


def full_rubric(section: PairwiseSection) -> str:
    return f"{section.rubric.strip()}\n\n{LABELS_RULE}"


def check_section(raw: Any, catalog: Any) -> None:
    """Check the section when its suite is loaded: its shape, its prompt, its provider, model and
    parameters against the model catalog (``ModelCatalog``)."""
    section = parse_section(raw)
    try:
        model = catalog.resolve(section.provider, section.model)
        catalog.check_parameters(section.provider, model, section.parameters)
    except CriteriaError as exc:
        raise CriteriaError(f"pairwise: {exc.message}") from None
