"""Reading a suite's YAML text: once, within limits checked while it is read (invariant 11).

libyaml (PyYAML's C parser, when PyYAML was built with it) reads the text into events; PyYAML's own
composer builds the node tree from them, counting as it goes, and its safe constructor builds the
values from the tree. Past a limit the suite is refused with the limit's name and the line, before
anything larger is built:

- ``MAX_NODES`` values in the document, an alias counting as every value it repeats;
- ``MAX_NESTING`` levels of mappings and sequences (the composer recurses per level);
- ``MAX_SCALAR_CHARS`` characters in one value (a prompt's text included);
- ``MAX_NUMBER_CHARS`` characters in a number: Python refuses integers past 4,300 digits, and a YAML
  1.1 base-60 number (``1:0:0:…``) costs quadratic time to read.

A suite sent to the API may not use aliases at all (``allow_aliases=False``).
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent, CollectionStartEvent, ScalarEvent
from yaml.nodes import Node
from yaml.resolver import Resolver

from assay.scoring.errors import CriteriaError

MAX_NODES = 20_000
MAX_NESTING = 32
MAX_SCALAR_CHARS = 200_000
MAX_NUMBER_CHARS = 100
_NUMBER_TAGS = frozenset({"tag:yaml.org,2002:int", "tag:yaml.org,2002:float"})


class SuiteTooLarge(CriteriaError):
    """A suite's YAML past one of this module's limits."""


if yaml.__with_libyaml__:
    # The C parser (an order of magnitude faster than the pure-Python one) under PyYAML's Python
    # composer, so the tree is built under the counters below.
    from yaml.cyaml import CParser

    class _Loader(Composer, CParser, SafeConstructor, Resolver):  # type: ignore[misc]
        def __init__(self, text: str) -> None:
            CParser.__init__(self, text)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

else:  # pragma: no cover - PyYAML without libyaml: its pure-Python loader, same limits
    _Loader = yaml.SafeLoader  # type: ignore[misc,assignment]


class _BoundedLoader(_Loader):
    def __init__(self, text: str, *, source: str, allow_aliases: bool) -> None:
        super().__init__(text)
        self._source = source
        self._allow_aliases = allow_aliases
        self._nodes = 0
        self._depth = 0
        # Values under each anchor, so an alias counts as everything it repeats.
        self._anchored: dict[str, int] = {}

    def _refuse(self, what: str, event: Any) -> SuiteTooLarge:
        line = f" (line {event.start_mark.line + 1})" if getattr(event, "start_mark", None) is not None else ""
        return SuiteTooLarge(f"{self._source}: {what}{line}")

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        event = self.peek_event()
        if isinstance(event, AliasEvent):
            if not self._allow_aliases:
                raise self._refuse(f"YAML aliases (*{event.anchor}) are not accepted in a suite sent to the API", event)
            if event.anchor in self.anchors and event.anchor not in self._anchored:
                raise self._refuse(f"alias *{event.anchor} refers to a value that contains it", event)
            self._count(self._anchored.get(event.anchor, 0), event)
            return super().compose_node(parent, index)
        if isinstance(event, ScalarEvent) and len(event.value) > MAX_SCALAR_CHARS:
            raise self._refuse(
                f"a value of {len(event.value):,} characters is longer than the {MAX_SCALAR_CHARS:,} a suite's value may have",
                event,
            )
        self._count(1, event)
        before = self._nodes
        nested = isinstance(event, CollectionStartEvent)
        if nested:
            self._depth += 1
            if self._depth > MAX_NESTING:
                raise self._refuse(f"nested deeper than {MAX_NESTING} levels", event)
        node = super().compose_node(parent, index)
        if nested:
            self._depth -= 1
        if getattr(event, "anchor", None):
            self._anchored[event.anchor] = self._nodes - before + 1
        if node.tag in _NUMBER_TAGS and len(node.value) > MAX_NUMBER_CHARS:
            raise self._refuse(
                f"a number of {len(node.value):,} characters is longer than the {MAX_NUMBER_CHARS} a suite's number may have",
                event,
            )
        return node

    def _count(self, values: int, event: Any) -> None:
        self._nodes += values
        if self._nodes > MAX_NODES:
            raise self._refuse(f"more than {MAX_NODES:,} values (mappings, sequences and scalars, aliases expanded)", event)


def load_suite_yaml(text: str, *, source: str, allow_aliases: bool = True) -> Any:
    """The value of a suite's YAML text (as ``yaml.safe_load`` reads it), read once within the
    module's limits. CriteriaError says what is wrong, :class:`SuiteTooLarge` which limit was passed."""
    loader = _BoundedLoader(text, source=source, allow_aliases=allow_aliases)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        raise CriteriaError(f"{source}: not valid YAML: {exc}") from None
    except (ValueError, OverflowError) as exc:  # a value PyYAML's constructor cannot build (a date 2024-13-01)
        raise CriteriaError(f"{source}: not valid YAML: {exc}") from None
    finally:
        loader.dispose()
