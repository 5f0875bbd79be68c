"""``${VAR}``, ``${VAR:-default}`` and nested ``${A:-${B:-c}}`` substitution (the alert-session scoring design, "Configuration Syntax").

A hand-written scanner rather than a regex, because defaults nest. ``$$`` is a literal ``$``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from assay.scoring.errors import CriteriaError


def substitute(text: str, env: Mapping[str, str], *, where: str = "") -> str:
    out, pos = _expand(text, 0, env, where, nested=False)
    assert pos == len(text)
    return out


def substitute_tree(value: Any, env: Mapping[str, str], *, where: str = "") -> Any:
    """Substitute inside every string of a parsed YAML tree (keys are left alone)."""
    if isinstance(value, str):
        return substitute(value, env, where=where)
    if isinstance(value, list):
        return [substitute_tree(v, env, where=f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: substitute_tree(v, env, where=f"{where}.{k}" if where else str(k)) for k, v in value.items()}
    return value


def _expand(text: str, pos: int, env: Mapping[str, str], where: str, *, nested: bool) -> tuple[str, int]:
    """Expand from ``pos`` until the end (or, when ``nested``, until the ``}`` closing a default)."""
    out: list[str] = []
    while pos < len(text):
        ch = text[pos]
        if nested and ch == "}":
            return "".join(out), pos
        if ch == "$" and text.startswith("$$", pos):
            out.append("$")
            pos += 2
        elif ch == "$" and text.startswith("${", pos):
            value, pos = _expand_reference(text, pos + 2, env, where)
            out.append(value)
        else:
            out.append(ch)
            pos += 1
    if nested:
        raise CriteriaError(f"unclosed '${{' in {where or 'value'}: {text!r}")
    return "".join(out), pos


def _expand_reference(text: str, pos: int, env: Mapping[str, str], where: str) -> tuple[str, int]:
    start = pos
    while pos < len(text) and (text[pos].isalnum() or text[pos] == "_"):
        pos += 1
    name = text[start:pos]
    if not name or name[0].isdigit():
        raise CriteriaError(f"bad variable reference in {where or 'value'}: {text!r}")
    if text.startswith(":-", pos):
        default, pos = _expand(text, pos + 2, env, where, nested=True)
        value = env.get(name) or default  # like the shell: unset or empty takes the default
    elif text.startswith("}", pos):
        if name not in env:
            raise CriteriaError(
                f"environment variable {name} is not set (needed by {where or 'the suite'}); "
                f"set it or write ${{{name}:-default}}",
                variable=name,
            )
        value = env[name]
    else:
        raise CriteriaError(f"bad variable reference in {where or 'value'}: {text!r}")
    if not text.startswith("}", pos):
        raise CriteriaError(f"unclosed '${{' in {where or 'value'}: {text!r}")
    return value, pos + 1
