"""The ``generic`` kind: any LLM output, scored by the metrics and judge rubrics its suite declares.

**The item** (:class:`GenericItem`) is ``{id?, input, output, expected?, context?, metadata?}``:
``input`` and ``expected`` are strings, ``output`` is a string or any JSON value (the JSON metrics
need one), ``context`` is a string or a list of strings (retrieved passages), ``metadata`` a JSON
object. An unknown key is refused, as for every kind.

**Field mapping** (:func:`prepare_payload`, applied at ingest). A suite may name where each canonical
field is in the objects its users upload, so they upload their files as they are::

    fields:
      id: qid                       # an integer id is taken as its decimal text
      input: question
      output: response.choices[0].text
      expected: gold.text
      context: retrieved            # a string or a list of strings
      metadata.difficulty: level    # one metadata key (``metadata: PATH`` maps a whole object)

A path is written as in the JSON metrics (``a.b[0].c``: keys separated by dots, ``[N]`` list indexes
counting from 0; a key holding ``.``, ``[`` or ``]`` cannot be named). The mapping is part of the
criteria and the *stored* item is canonical: a canonical field the mapping does not name is taken
from the top-level key of the same name, and every other key of the uploaded object is left out (map
what you need into ``metadata``; with ``metadata.KEY`` entries, metadata holds exactly those keys).
Without ``fields`` a line must be the canonical item itself. A path that is not in the object is an
error for ``input`` and ``output`` (the line is rejected with the path and where it stops matching);
for the optional fields it leaves the field unset (a metric that needs it is then skipped with the
reason). A ``null`` value is the same as a missing one.

**What the judge sees** (:func:`judge_inputs`): ``{{input}}``, ``{{output}}`` (non-string output as
indented JSON), ``{{expected}}``, ``{{context}}`` (a list as numbered passages ``[1] ...``, blank line
between) and ``{{metadata.KEY}}`` for each metadata key (non-string values as JSON). A field the item
does not have provides no placeholder, so a template that uses it fails that judge component with a
reason naming it.

**Items too long for the judge model** (:func:`prepare_judge`). The per-item text the template uses is
measured (``estimate_tokens``, about four characters a token) against the room the judge model's
context window leaves (the same budget as ``alert_session``: ``(context_window - max_tokens) *
SAFETY_RATIO`` minus the template's fixed text and output schema). Over it, when the template shows a
list ``context``, **trailing passages are dropped, last first**, down to the first one, and the
context says how many were left out (``[passages 4-9 of 9 left out to fit the judge's context
window]``); the judge component's details record it (``judge_input``). An item that still does not
fit (or whose context is one string, which is never cut) fails the judge component with the sizes
(:class:`ItemTooLong`); nothing is ever cut silently.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from assay.scoring.errors import AssayError, CriteriaError, InvalidInput
from assay.scoring.judge.governor import estimate_tokens, tokens_for_chars
from assay.scoring.judge.prompt import template_placeholders
from assay.scoring.kinds import Kind
from assay.scoring.kinds.alert_session import input_budget
from assay.scoring.metrics.library.json_checks import PathStep, lookup, parse_path

KIND_NAME = "generic"
ITEM_CHARS = 200_000
CANONICAL_FIELDS = ("id", "input", "output", "expected", "context", "metadata")
REQUIRED_FIELDS = frozenset({"input", "output"})
METADATA_PREFIX = "metadata."
TRUNCATION_RULE = "trailing context passages first"
INPUT_CHARS = 200  # of the input shown in a live line


class GenericItem(BaseModel):
    """One LLM output to score, with what it answered and what it is compared against."""

    model_config = ConfigDict(extra="forbid", str_max_length=ITEM_CHARS)

    id: str | None = Field(
        None, min_length=1, max_length=255, description="Your identifier for the item (kept as its external id)."
    )
    input: str = Field(..., description="What the model was asked (the prompt, the question).")
    output: Any = Field(..., description="What the model answered: a string or any JSON value.")
    expected: str | None = Field(None, description="The reference answer, when there is one.")
    context: str | list[str] | None = Field(
        None, description="What the answer should be grounded in: one text or a list of retrieved passages."
    )
    metadata: dict[str, Any] | None = Field(
        None, description="Anything else about the item; metric args and judge templates can name its keys."
    )

    @field_validator("output")
    @classmethod
    def _has_output(cls, value: Any) -> Any:
        if value is None:
            raise ValueError("output is null: an item needs the output to score")
        return value


# --- field mapping ---------------------------------------------------------------------------------


def _target_ok(target: str) -> bool:
    if target.startswith(METADATA_PREFIX):
        return len(target) > len(METADATA_PREFIX)
    return target in CANONICAL_FIELDS


def check_fields(fields: Mapping[str, str]) -> None:
    """Refuse a ``fields`` mapping that names no canonical field or holds a path that is not one."""
    for target, path in fields.items():
        if not _target_ok(target):
            raise CriteriaError(
                f"fields.{target}: not a field of a generic item; map one of {', '.join(CANONICAL_FIELDS)} "
                "or metadata.KEY"
            )
        try:
            parse_path(path)
        except (TypeError, ValueError) as exc:
            raise CriteriaError(f"fields.{target}: {exc}") from None
    if "metadata" in fields and any(t.startswith(METADATA_PREFIX) for t in fields):
        raise CriteriaError("fields: map either metadata as a whole or metadata.KEY entries, not both")


@lru_cache(maxsize=64)
def _compiled(fields: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str, tuple[PathStep, ...]], ...]:
    check_fields(dict(fields))
    return tuple((target, path, parse_path(path)) for target, path in fields)


def prepare_payload(raw: Any, criteria: Any) -> dict[str, Any]:
    """The canonical item payload of one uploaded object, through the suite's ``fields`` mapping.
    Raises :class:`InvalidInput` saying what is wrong (a required path missing, not an object)."""
    if not isinstance(raw, dict):
        raise InvalidInput(f"an item is a JSON object, got {_json_type(raw)}")
    fields = getattr(criteria, "fields", None)
    if not fields:
        return raw
    payload: dict[str, Any] = {}
    mapped = _compiled(tuple(sorted(fields.items())))
    # metadata.KEY entries make metadata exactly those keys: a top-level metadata object is not merged.
    targets = {target.split(".", 1)[0] for target, _, _ in mapped}
    for name in CANONICAL_FIELDS:
        if name not in targets and raw.get(name) is not None:
            payload[name] = raw[name]
    metadata: dict[str, Any] = {}
    for target, path, steps in mapped:
        found, value, why = lookup(raw, steps)
        if not found or value is None:
            if target in REQUIRED_FIELDS:
                raise InvalidInput(f"{target} (mapped from {path}) " + (f"is not in the item: {why}" if not found else "is null"))
            continue
        if target == "id" and isinstance(value, int) and not isinstance(value, bool):
            value = str(value)  # files often number their items
        if target.startswith(METADATA_PREFIX):
            metadata[target[len(METADATA_PREFIX) :]] = value
        else:
            payload[target] = value
    if metadata:
        payload["metadata"] = metadata
    return payload


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    return "a number"


# --- what the judge sees ---------------------------------------------------------------------------


def as_text(value: Any) -> str:
    """A value as a judge reads it: strings as they are, anything else as indented JSON."""
    return value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False)


_PASSAGE_SEPARATOR = "\n\n"


def _passage(number: int, passage: str) -> str:
    return f"[{number}] {passage}"


def _left_out(kept: int, total: int) -> str:
    return f"{_PASSAGE_SEPARATOR}[passages {kept + 1}-{total} of {total} left out to fit the judge's context window]"


def render_context(context: str | list[str], keep: int | None = None) -> str:
    """``{{context}}``: one text as is; a list as numbered passages. ``keep`` passages of a list are
    shown and the rest named as left out."""
    if isinstance(context, str):
        return context
    shown = context if keep is None else context[:keep]
    text = _PASSAGE_SEPARATOR.join(_passage(number, passage) for number, passage in enumerate(shown, 1))
    if len(shown) < len(context):
        text += _left_out(len(shown), len(context))
    return text


def _rendered_lengths(context: list[str]) -> list[int]:
    """``lengths[k]``: the length of the first ``k`` passages as :func:`render_context` shows them,
    without the left-out note. Each passage is measured once, so fitting a context is linear in it."""
    lengths = [0]
    for number, passage in enumerate(context, 1):
        lengths.append(lengths[-1] + len(_passage(number, passage)) + (len(_PASSAGE_SEPARATOR) if number > 1 else 0))
    return lengths


def judge_inputs(item: GenericItem) -> dict[str, str]:
    """The placeholder values the item has (a field it lacks provides none)."""
    inputs = {"input": item.input, "output": as_text(item.output)}
    if item.expected is not None:
        inputs["expected"] = item.expected
    if item.context is not None:
        inputs["context"] = render_context(item.context)
    for key, value in (item.metadata or {}).items():
        inputs[f"{METADATA_PREFIX}{key}"] = as_text(value)
    return inputs


def placeholders(fields: Mapping[str, str] | None) -> tuple[frozenset[str], str | None]:
    """The placeholders an item can fill: its fields, and ``metadata.KEY`` for the keys a ``fields``
    mapping names (without ``metadata.KEY`` entries the keys are the items' own: any may be named)."""
    names = {"input", "output", "expected", "context"}
    keys = {target for target in (fields or {}) if target.startswith(METADATA_PREFIX)}
    return frozenset(names | keys), None if keys else METADATA_PREFIX


class ItemTooLong(AssayError):
    """The item does not fit the judge model's context window by the documented rule."""

    status_code = 422
    code = "item_too_long"


def prepare_judge(
    item: GenericItem,
    *,
    template: str,
    verdict_model: type[BaseModel],
    model: str,
    max_tokens: int,
    context_window: int,
) -> tuple[dict[str, str], dict[str, Any]]:
    """The placeholder values fitted to the judge model's context window (see the module docstring),
    and what was measured and cut, to store beside the verdict. Raises :class:`ItemTooLong`."""
    inputs = judge_inputs(item)
    used = [name for name in template_placeholders(template) if name in inputs]
    budget = input_budget(template, verdict_model, max_tokens=max_tokens, context_window=context_window)
    sizes = {name: estimate_tokens(inputs[name]) for name in used}
    before = sum(sizes.values())
    record: dict[str, Any] = {
        "estimated_tokens": before,
        "budget_tokens": budget,
        "context_window": context_window,
        "max_tokens": max_tokens,
        "model": model,
        "truncated": False,
    }
    if before <= budget:
        return inputs, {"judge_input": record}
    context = item.context
    total = before
    if "context" in sizes and isinstance(context, list) and len(context) > 1:
        others = before - sizes["context"]
        lengths = _rendered_lengths(context)
        keep = len(context)
        # Token estimates depend on the length only: measure each cut from the passages' lengths and
        # render the one that fits, once.
        while keep > 1 and total > budget:
            keep -= 1
            total = others + tokens_for_chars(lengths[keep] + len(_left_out(keep, len(context))))
        inputs["context"] = render_context(context, keep)
        record.update(
            truncated=True,
            rule=TRUNCATION_RULE,
            estimated_tokens=total,
            estimated_tokens_before=before,
            passages_kept=keep,
            passages_total=len(context),
        )
    if total > budget:
        largest = ", ".join(f"{{{{{name}}}}} ~{tokens}" for name, tokens in sorted(sizes.items(), key=lambda s: -s[1]))
        cut = f", {total} with every context passage but the first left out" if record["truncated"] else ""
        raise ItemTooLong(
            f"the item is too long for judge model {model}: about {before} tokens of item text ({largest}){cut}, "
            f"over the {budget} tokens available in its {context_window}-token context window "
            f"(rule: {TRUNCATION_RULE}; a single-text context, the input and the output are never cut)",
            judge_input=record,
        )
    return inputs, {"judge_input": record}


# --- live results ----------------------------------------------------------------------------------


def live_lines(score: Any, threshold: float) -> list[str]:
    """The item's input on one line, then the score and each component (``views.live_line``)."""
    from assay.scoring.reports.views import live_line

    payload = score.item.payload if score.item is not None else {}
    text = " ".join(str(payload.get("input") or "").split())
    return [f"Input: {textwrap.shorten(text, INPUT_CHARS, placeholder=' …') if text else '(none)'}", live_line(score, threshold)]


KIND = Kind(
    name=KIND_NAME,
    item_model=GenericItem,
    judge_inputs=judge_inputs,  # type: ignore[arg-type]
    prepare_judge=prepare_judge,
    prepare_payload=prepare_payload,
    check_fields=check_fields,
    live_lines=live_lines,
    placeholders=placeholders,
)
