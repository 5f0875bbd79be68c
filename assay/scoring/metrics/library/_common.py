"""What the library's metrics share: the args base model and reading the generic item.

The metrics read the item's attributes by name (``input``, ``output``, ``expected``, ``context``,
``metadata``), so they score any item model of that shape.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import re2
from pydantic import BaseModel, ConfigDict

from assay.scoring.metrics.registry import ItemRef, resolve_arg

KINDS = ("generic",)

# The default of every argument that compares with the reference answer.
EXPECTED = ItemRef.model_validate({"from": "expected"})


class Args(BaseModel):
    """Base of every library args model: an unknown argument is an error, never ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def as_text(value: Any) -> str:
    """Text as it is; any other JSON value as JSON text (the judge shows non-strings the same way)."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def output_text(item: BaseModel) -> str:
    return as_text(getattr(item, "output", None))


def text_arg(value: str | ItemRef, item: BaseModel) -> str:
    return as_text(resolve_arg(value, item))


def output_json(item: BaseModel) -> tuple[Any, str | None]:
    """The output as a JSON value: a string output is JSON text to parse, anything else already is
    one. Returns ``(value, None)`` or ``(None, why it is not JSON)``."""
    output = getattr(item, "output", None)
    if not isinstance(output, str):
        return output, None
    try:
        return json.loads(output, parse_constant=_no_constant), None
    except ValueError as exc:  # JSONDecodeError is one
        return None, f"the output is not valid JSON: {exc}"


def _no_constant(name: str) -> Any:
    # Python's json reads NaN and Infinity; JSON (RFC 8259) has neither.
    raise ValueError(f"{name} is not a JSON value")


def canonical(value: Any) -> str:
    """One JSON spelling per value, for comparing and counting JSON values."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: 1 equals 1.0, but true is not 1 and "1" is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def json_values(value: Any) -> int:
    """How many JSON values ``value`` holds, itself included (iteratively: no recursion limit)."""
    count, stack = 0, [value]
    while stack:
        node = stack.pop()
        count += 1
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return count


# The memory RE2 may use for one compiled pattern (its program and match caches): with the cache's
# size it bounds what compiled patterns hold in a worker (RE2's own default is 8 MiB each).
RE2_MAX_MEM = 1 << 20
COMPILED_PATTERNS_CACHED = 32


@functools.lru_cache(maxsize=COMPILED_PATTERNS_CACHED)
def compile_re2(pattern: str, case_sensitive: bool) -> Any:
    """RE2 has no backtracking: matching is linear in the output (times the pattern's program size,
    which the regex metrics bound), so no pattern can hang a worker. Perl features that need
    backtracking (backreferences, lookaround) do not compile."""
    options = re2.Options()
    options.case_sensitive = case_sensitive
    options.log_errors = False
    options.max_mem = RE2_MAX_MEM
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        message = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise ValueError(f"not a valid RE2 pattern ({message}); RE2 has no backreferences or lookaround") from exc
