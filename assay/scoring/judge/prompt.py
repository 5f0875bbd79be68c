"""Judge prompts: fill a suite's template and split it for prompt caching.

Placeholders are ``{{NAME}}``, or ``{{NAME.KEY}}`` with one dotted segment (``{{metadata.source}}``).
``{{OUTPUT_SCHEMA}}`` is filled with the verdict model's JSON schema; every other placeholder is
*per item* and filled from the item's inputs. Everything before the first
per-item placeholder is the same for every item of the suite, so it goes into the system prompt
marked for caching; the rest, with the item's data, is the user message.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import re
import threading
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from assay.scoring.errors import CriteriaError
from assay.scoring.judge.governor import estimate_tokens

log = logging.getLogger(__name__)

OUTPUT_SCHEMA = "OUTPUT_SCHEMA"
# One optional dotted segment names a key of a mapping the item has (``{{metadata.KEY}}``).
PLACEHOLDER = re.compile(r"\{\{([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_][A-Za-z0-9_-]*)?)\}\}")


class PromptError(CriteriaError):
    """A template that cannot be filled: an unknown placeholder, or nothing per item in it."""


@dataclass(frozen=True)
class JudgePrompt:
    system: str  # the static prefix; "" when the template starts with item data
    user: str

    def system_blocks(self) -> list[dict[str, Any]]:
        """The system prompt as the Messages API takes it, marked as a prompt-cache breakpoint."""
        if not self.system:
            return []
        return [{"type": "text", "text": self.system, "cache_control": {"type": "ephemeral"}}]


@functools.lru_cache(maxsize=64)
def output_schema_text(verdict_model: type[BaseModel]) -> str:
    return json.dumps(verdict_model.model_json_schema(), indent=2, sort_keys=True)


def _tag(name: str) -> str:
    return "{{" + name + "}}"


def template_placeholders(template: str) -> list[str]:
    return list(dict.fromkeys(PLACEHOLDER.findall(template)))


def render_prompt(
    template: str,
    inputs: dict[str, str],
    verdict_model: type[BaseModel],
    *,
    model: str,
    min_cacheable_tokens: int,
) -> JudgePrompt:
    """Fill ``template`` and split it into the cacheable static prefix and the per-item rest."""
    unknown = [name for name in template_placeholders(template) if name != OUTPUT_SCHEMA and name not in inputs]
    if unknown:
        provided = ", ".join(_tag(n) for n in [*sorted(inputs), OUTPUT_SCHEMA])
        raise PromptError(
            f"the judge prompt uses {', '.join(_tag(n) for n in unknown)}, which this item does not provide "
            f"(it provides {provided})"
        )
    values = {**inputs, OUTPUT_SCHEMA: output_schema_text(verdict_model)}

    first_item = next((m for m in PLACEHOLDER.finditer(template) if m.group(1) != OUTPUT_SCHEMA), None)
    if first_item is None:
        raise PromptError("the judge prompt has no per-item placeholder, so every item would get the same prompt")

    # One pass each: a value that itself contains "{{...}}" (item data can) is never expanded again.
    def fill(text: str) -> str:
        return PLACEHOLDER.sub(lambda m: values[m.group(1)], text)

    system = fill(template[: first_item.start()])
    if not system.strip():
        system = ""
    prompt = JudgePrompt(system=system, user=fill(template[first_item.start() :]))
    if system:
        _warn_if_uncacheable(model, system, min_cacheable_tokens)
    return prompt


_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


def _warn_if_uncacheable(model: str, prefix: str, min_cacheable_tokens: int) -> None:
    tokens = estimate_tokens(prefix)
    if tokens >= min_cacheable_tokens:
        return
    key = (model, hashlib.sha256(prefix.encode()).hexdigest())
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    log.warning(
        "judge prompt prefix for %s is about %d tokens, below the model's minimum cacheable length of %d: "
        "it will be sent uncached on every call",
        model,
        tokens,
        min_cacheable_tokens,
    )
