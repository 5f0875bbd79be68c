"""A suite's ``online:`` block: which traces an application exports are scored by the suite, and how.

Operational, like ``rescore:``, ``review:`` and ``retention:``: not part of the criteria, not hashed;
changing a rule restales no score. The item a rule builds goes through the suite's ``fields`` mapping,
which *is* criteria. See ``assay.scoring.online.sampler`` for what the sampler does with the rules.

::

    online:
      rules:
        - name: chat                      # unique in the suite; names the rule in windows and decisions
          match:
            span_name: chat gpt-4o        # optional; exact span name
            service: checkout-assistant   # optional; the resource's service.name
            attributes:                   # optional; every one must equal (as text)
              gen_ai.operation.name: chat
          per: span                       # span: one item per matching span; trace: one per trace
          quiet_seconds: 5                # a trace is complete when its root span ended and no span came for this long
          sample_rate: 0.25               # drawn from the trace id: the same trace is always in or out
          daily_budget: 5000              # items a day (UTC) at most; past it, traces are decided over_budget
          slice_by: gen_ai.request.model  # optional; an attribute whose value slices the rolling windows
          rescore: false                  # whether the nightly re-score takes this rule's items
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_RULE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SpanMatch(_Strict):
    """Which spans a rule looks at; every condition given must hold (none given: every span)."""

    span_name: str | None = Field(None, min_length=1, max_length=1000)
    service: str | None = Field(None, min_length=1, max_length=255)
    attributes: dict[str, str | int | float | bool] = Field(default_factory=dict, max_length=20)


class OnlineRule(_Strict):
    name: str
    match: SpanMatch = Field(default_factory=SpanMatch)
    per: Literal["span", "trace"] = "span"
    quiet_seconds: float = Field(5.0, ge=0, le=3600)
    sample_rate: float = Field(1.0, ge=0, le=1)
    daily_budget: int | None = Field(None, ge=1)
    slice_by: str | None = Field(None, min_length=1, max_length=255)
    rescore: bool = False

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _RULE_NAME.match(value):
            raise ValueError("a rule name is 1-100 letters, digits, '_', '.' or '-', starting with a letter or digit")
        return value


class OnlineRules(_Strict):
    rules: list[OnlineRule] = Field(default_factory=list, max_length=50)

    @model_validator(mode="after")
    def _unique_names(self) -> OnlineRules:
        names = [rule.name for rule in self.rules]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"rule names must be unique in a suite; repeated: {', '.join(repeated)}")
        return self

    @property
    def active(self) -> bool:
        return bool(self.rules)

    def rescored(self) -> list[str]:
        """The rules whose items the nightly re-score takes."""
        return [rule.name for rule in self.rules if rule.rescore]
