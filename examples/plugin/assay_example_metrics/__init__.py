"""An example Assay plug-in: two metrics for the ``generic`` kind.

- ``example.word_overlap``: the share of the reference's distinct words that the output contains
  (the reference is the item's ``expected`` unless the suite names another value).
- ``example.polite_tone``: whether the output uses enough polite phrases.

Assay finds them through the ``assay.metrics`` entry point in ``pyproject.toml``, which names
:data:`METRICS`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, Field, field_validator

from assay.scoring.metrics.plugins import (
    ComponentResult,
    ItemRef,
    MetricContext,
    PluginArgs,
    PluginMetric,
    resolve_arg,
)

_WORD = re.compile(r"\w+")
MAX_LISTED = 20  # words listed in a result's details: enough to see why, bounded for long references


def _text(value: Any) -> str:
    # The generic item's output may be any JSON value; a non-string is matched as its JSON text.
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


class WordOverlapArgs(PluginArgs):
    reference: str | ItemRef = Field(
        ItemRef(from_="expected"), description="the text whose words the output should contain; default: the item's expected"
    )
    case_sensitive: bool = False
    min_word_length: int = Field(1, ge=1, le=50, description="shorter words of the reference are not counted")


def word_overlap(item: BaseModel, args: WordOverlapArgs, context: MetricContext) -> float | ComponentResult:
    """The share of the reference's distinct words (of at least ``min_word_length`` characters) that
    appear as words in the output."""

    def words(text: str) -> set[str]:
        found = {w for w in _WORD.findall(text) if len(w) >= args.min_word_length}
        return found if args.case_sensitive else {w.casefold() for w in found}

    wanted = words(_text(resolve_arg(args.reference, item)))
    if not wanted:
        return ComponentResult.skipped("the reference has no words to look for")
    missing = sorted(wanted - words(_text(item.output)))  # type: ignore[attr-defined]
    score = 1 - len(missing) / len(wanted)
    return ComponentResult.ok(score, {"reference_words": len(wanted), "missing": missing[:MAX_LISTED]})


class PoliteToneArgs(PluginArgs):
    phrases: list[str] = Field(
        ["please", "thank you", "thanks", "sorry", "happy to help"],
        min_length=1,
        max_length=100,
        description="the polite phrases looked for (whole words, any case)",
    )
    required: int = Field(1, ge=1, le=100, description="how many different phrases make a fully polite answer")

    @field_validator("phrases")
    @classmethod
    def _real_phrases(cls, phrases: list[str]) -> list[str]:
        if any(not p.strip() for p in phrases):
            raise ValueError("a phrase is some text, not an empty string")
        return phrases


def _phrase(phrase: str) -> re.Pattern[str]:
    # Literal words, any run of whitespace between them, not inside a longer word.
    words = r"\s+".join(re.escape(w) for w in phrase.split())
    return re.compile(rf"(?<!\w){words}(?!\w)", re.IGNORECASE)


def polite_tone(item: BaseModel, args: PoliteToneArgs, context: MetricContext) -> float:
    """The number of different polite phrases in the output, over ``required`` (at most 1)."""
    text = _text(item.output)  # type: ignore[attr-defined]
    found = [p for p in args.phrases if _phrase(p).search(text)]
    return min(1.0, len(found) / args.required)


METRICS = [
    PluginMetric(name="example.word_overlap", version=1, args_model=WordOverlapArgs, function=word_overlap),
    PluginMetric(name="example.polite_tone", version=1, args_model=PoliteToneArgs, function=polite_tone),
]
