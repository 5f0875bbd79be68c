"""What generated pandas code really does, read from its AST (never from its text).

Comments never reach the AST, and string literals count only where pandas reads them as column
names: a subscript (``df['a']``, ``df[['a', 'b']]``, ``df.loc[:, 'a']``), an argument of a pandas
method or function (``groupby('a')``, ``sort_values(by=...)``, ``merge(on=...)``, ``agg(avg=('a',
'mean'))``, ``pivot_table(index=...)``), or an expression string given to ``query()`` / ``eval()``,
which is parsed as code. Attribute access (``df.a``) counts when ``a`` is a column of the dataset.
A name bound once to a string or a list of strings (``col = 'a'; df[col]``) is resolved.

Columns have a lineage, so that equivalent spellings read as the same operation on the same
column: a derived column stands for the columns it is made from (``assign(year=df['hire_date']
.str[:4])``, ``df['year'] = ...``, ``rename(columns={'a': 'b'})``, ``agg(n=('id', 'size'))``), and
a variable for the column its value is of (``country = customers.set_index('id')['country']``;
``groupby(country)`` groups by ``country``). Conditions are operations on columns whatever their
spelling: a boolean mask, ``query()``, ``loc[]``, ``where``, ``isin``/``between``/``str.contains``,
or a comparison summed (``(df.x > 1).sum()``) are all a filter on ``x``. ``isin`` of another
table's column is a semi-join, like a ``merge``.

Only code that can reach the answer counts: the statements the ``result`` variable (or, without
one, the final expression) depends on, found by a backward slice over assignments, in-place
mutations (``df['x'] = ...``, ``inplace=True``, ``rows.append(...)``) and the conditions and loops
around them. ``df.groupby('dept')`` on a line of its own, or a computation whose value is thrown
away before ``result = 0``, is dead and counts for nothing.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

# Methods whose string arguments are values, not column names.
VALUE_METHODS = {
    "contains", "startswith", "endswith", "match", "fullmatch", "replace", "fillna", "isin", "eq", "ne", "lt",
    "gt", "le", "ge", "split", "rsplit", "strip", "lstrip", "rstrip", "format", "astype", "to_datetime",
    "strftime", "findall", "extract", "count_matches", "pad", "zfill", "cat", "get", "slice", "find",
}
PREDICATE_CALLS = {
    "isin", "between", "contains", "startswith", "endswith", "match", "fullmatch", "isna", "isnull", "notna",
    "notnull", "eq", "ne", "lt", "gt", "le", "ge", "dropna", "duplicated", "isdigit", "isalpha", "isnumeric",
}
FILTER_CALLS = {"query", "where", "mask", "filter", "loc", "dropna", "isin", "between", "drop_duplicates"}
AGG_CALLS = {"agg", "aggregate", "transform", "apply", "pivot_table", "resample", "rolling", "expanding", "crosstab"}
SORT_CALLS = {"sort_values", "sort_index", "nlargest", "nsmallest", "rank", "argsort", "sorted", "value_counts", "categories"}
EXTREME_CALLS = {"idxmax", "idxmin", "max", "min", "argmax", "argmin"}
LABEL_CALLS = {"idxmax", "idxmin", "argmax", "argmin"}  # loc[df.x.idxmax()]: a label looked up, not a filter
JOIN_CALLS = {"merge", "join", "concat", "combine_first", "merge_asof", "merge_ordered"}
MUTATING_METHODS = {"append", "extend", "insert", "update", "pop", "remove", "clear", "add", "discard", "setdefault", "sort", "reverse", "__setitem__"}
MODULE_NAMES = {"pd", "np", "pandas", "numpy", "math", "re", "datetime", "dt", "statistics", "collections", "itertools", "functools"}


@dataclass
class CodeFacts:
    parsed: bool
    syntax_error: str | None = None
    uses_data: bool = False
    columns: list[str] = field(default_factory=list)
    operations: set[str] = field(default_factory=set)
    conditions: int = 0
    filters: bool = False
    groupby_columns: list[str] = field(default_factory=list)
    sort_calls: set[str] = field(default_factory=set)
    sort_descending: set[bool] = field(default_factory=set)
    limits: list[tuple[str, int]] = field(default_factory=list)  # ("head"|"tail"|"nlargest"|"nsmallest"|"slice", n)
    joins: set[str] = field(default_factory=set)
    join_keys: list[str] = field(default_factory=list)
    filter_columns: list[str] = field(default_factory=list)  # columns rows are selected on (a condition's columns)
    count_only_columns: list[str] = field(default_factory=list)  # read only to count rows: df['id'].count()
    statements: int = 0
    relevant_statements: int = 0
    dead_lines: list[int] = field(default_factory=list)


@dataclass
class _Entry:
    nodes: list[ast.AST]  # what to read facts from when the entry is relevant
    targets: set[str]
    uses: set[str]
    line: int
    top_level_expr: bool = False


def _names(node: ast.AST | None) -> set[str]:
    if node is None:
        return set()
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _base_names(target: ast.AST) -> set[str]:
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, ast.Starred):
        return _base_names(target.value)
    if isinstance(target, ast.Tuple | ast.List):
        out: set[str] = set()
        for element in target.elts:
            out |= _base_names(element)
        return out
    if isinstance(target, ast.Subscript | ast.Attribute):
        return _base_names(target.value)
    if isinstance(target, ast.Call):
        return _base_names(target.func)
    return set()


def _mutation_targets(expr: ast.AST) -> set[str]:
    """An expression statement that changes a name in place: ``x.append(...)``, ``inplace=True``."""
    if not isinstance(expr, ast.Call) or not isinstance(expr.func, ast.Attribute):
        return set()
    inplace = any(k.arg == "inplace" and isinstance(k.value, ast.Constant) and k.value.value is True for k in expr.keywords)
    if inplace or expr.func.attr in MUTATING_METHODS:
        return _base_names(expr.func.value)
    return set()


def _flatten(body: list[ast.stmt], control: set[str], out: list[_Entry], top: bool) -> set[str]:
    """Entries for ``body``; returns every name the body binds (for the enclosing header)."""
    bound: set[str] = set()
    for index, stmt in enumerate(body):
        line = getattr(stmt, "lineno", 0)
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.append(_Entry([stmt], {stmt.name}, _names(stmt) | control, line))
            bound.add(stmt.name)
        elif isinstance(stmt, ast.Assign):
            targets: set[str] = set()
            for target in stmt.targets:
                targets |= _base_names(target)
            uses = _names(stmt.value) | control
            for target in stmt.targets:  # df.loc[mask, 'x'] = ...: the subscript reads names too
                if not isinstance(target, ast.Name):
                    uses |= _names(target)
            out.append(_Entry([stmt], targets, uses, line))
            bound |= targets
        elif isinstance(stmt, ast.AugAssign | ast.AnnAssign):
            targets = _base_names(stmt.target)
            out.append(_Entry([stmt], targets, _names(stmt) | control, line))
            bound |= targets
        elif isinstance(stmt, ast.Import | ast.ImportFrom):
            targets = {(a.asname or a.name).split(".")[0] for a in stmt.names}
            out.append(_Entry([stmt], targets, set(), line))
            bound |= targets
        elif isinstance(stmt, ast.Expr):
            targets = _mutation_targets(stmt.value)
            out.append(_Entry([stmt], targets, _names(stmt.value) | control, line, top_level_expr=top and index == len(body) - 1))
            bound |= targets
        elif isinstance(stmt, ast.For | ast.AsyncFor):
            header_uses = _names(stmt.iter) | control
            loop_vars = _base_names(stmt.target)
            inner = _flatten(stmt.body + stmt.orelse, header_uses | loop_vars, out, False)
            out.append(_Entry([stmt.target, stmt.iter], loop_vars | inner, header_uses, line))
            bound |= loop_vars | inner
        elif isinstance(stmt, ast.While | ast.If):
            header_uses = _names(stmt.test) | control
            inner = _flatten(stmt.body + stmt.orelse, header_uses, out, False)
            out.append(_Entry([stmt.test], inner, header_uses, line))
            bound |= inner
        elif isinstance(stmt, ast.With | ast.AsyncWith):
            header_uses = set().union(*(_names(i.context_expr) for i in stmt.items)) | control
            vars_ = set().union(*(_base_names(i.optional_vars) for i in stmt.items if i.optional_vars is not None))
            inner = _flatten(stmt.body, header_uses, out, False)
            out.append(_Entry([i.context_expr for i in stmt.items], vars_ | inner, header_uses, line))
            bound |= vars_ | inner
        elif isinstance(stmt, ast.Try):
            inner = _flatten(stmt.body + stmt.orelse + stmt.finalbody, control, out, False)
            for handler in stmt.handlers:
                inner |= _flatten(handler.body, control, out, False)
            bound |= inner
        elif isinstance(stmt, ast.Match):
            header_uses = _names(stmt.subject) | control
            inner: set[str] = set()
            for case in stmt.cases:
                inner |= _flatten(case.body, header_uses, out, False)
            out.append(_Entry([stmt.subject], inner, header_uses, line))
            bound |= inner
        elif isinstance(stmt, ast.Delete | ast.Global | ast.Nonlocal | ast.Pass | ast.Break | ast.Continue | ast.Return | ast.Raise | ast.Assert):
            out.append(_Entry([stmt], set(), _names(stmt) | control, line))
        else:
            out.append(_Entry([stmt], set(), _names(stmt) | control, line))
    return bound


def _relevant(entries: list[_Entry]) -> list[bool]:
    relevant = [False] * len(entries)
    if any("result" in e.targets for e in entries):
        needed = {"result"}
    else:
        last = next((i for i, e in enumerate(entries) if e.top_level_expr), None)
        if last is None:
            return [True] * len(entries)  # no answer to trace back from: everything may matter
        relevant[last] = True
        needed = set(entries[last].uses)
    changed = True
    while changed:
        changed = False
        for i, entry in enumerate(entries):
            if not relevant[i] and entry.targets & needed:
                relevant[i] = True
                needed |= entry.uses
                changed = True
    return relevant


class _Reader:
    """Reads facts from the relevant nodes."""

    def __init__(self, columns: set[str], frames: set[str], constants: dict[str, list[str]], data_names: set[str], modules: set[str]) -> None:
        self.columns = columns
        self.frames = frames
        self.constants = constants
        self.data_names = data_names
        self.modules = modules
        self.facts = CodeFacts(parsed=True)
        self._columns: dict[str, None] = {}
        self._groupby: dict[str, None] = {}
        self._join_keys: dict[str, None] = {}
        self._index_keys: dict[str, None] = {}  # set_index() columns: the keys of index joins
        self._filter_columns: dict[str, None] = {}
        self._uses: Counter[str] = Counter()
        self._count_uses: Counter[str] = Counter()
        self.derived: dict[str, set[str]] = {}  # a derived column -> the dataset columns it is made from
        self.name_columns: dict[str, list[str]] = {}  # a variable -> the column its value is of
        self.name_frames: dict[str, set[str]] = {}  # a variable -> the tables its value comes from

    # lineage ----------------------------------------------------------------------------------

    def learn(self, node: ast.AST) -> None:
        """Record what ``node`` (a relevant statement) derives, before facts are read."""
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    self.name_columns[target.id] = _trailing_columns(node.value, self)
                    self.name_frames[target.id] = self._frames_of(node.value)
                elif isinstance(target, ast.Subscript):
                    for name in self._strings(target.slice):
                        if name not in self.columns:
                            self.derived.setdefault(name, set()).update(self._column_refs(node.value))
        for sub in ast.walk(node):
            if not (isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute)):
                continue
            if sub.func.attr == "assign":
                for keyword in sub.keywords:
                    if keyword.arg and keyword.arg not in self.columns:
                        self.derived.setdefault(keyword.arg, set()).update(self._column_refs(keyword.value))
            elif sub.func.attr in ("agg", "aggregate"):
                for keyword in sub.keywords:
                    if keyword.arg and keyword.arg not in self.columns:
                        sources = [s for s in self._strings(keyword.value) if s in self.columns]
                        self.derived.setdefault(keyword.arg, set()).update(sources)
            elif sub.func.attr == "rename":
                for keyword in sub.keywords:
                    if keyword.arg == "columns" and isinstance(keyword.value, ast.Dict):
                        for old, new in zip(keyword.value.keys, keyword.value.values):
                            olds = [s for s in self._strings(old) if s in self.columns] if old is not None else []
                            for name in self._strings(new):
                                if name not in self.columns:
                                    self.derived.setdefault(name, set()).update(olds)

    def _frames_of(self, node: ast.AST) -> set[str]:
        found: set[str] = set()
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name):
                if sub.id in self.frames and sub.id != "dfs":
                    found.add(sub.id)
                found |= self.name_frames.get(sub.id, set())
            elif isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Name) and sub.value.id == "dfs":
                found |= {s for s in self._strings(sub.slice) if s in self.frames}
        return found

    def _resolve(self, names: Iterator[str] | list[str]) -> list[str]:
        """Dataset columns that ``names`` stand for (a derived column stands for its sources)."""
        out: list[str] = []
        for name in names:
            if name in self.columns:
                out.append(name)
            else:
                out += sorted(self.derived.get(name, ()))
        return out

    # strings in column positions -------------------------------------------------------------

    def _strings(self, node: ast.AST | None, depth: int = 0) -> Iterator[str]:
        if node is None or depth > 4:
            return
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value
        elif isinstance(node, ast.Name) and node.id in self.constants:
            yield from self.constants[node.id]
        elif isinstance(node, ast.List | ast.Tuple | ast.Set):
            for element in node.elts:
                yield from self._strings(element, depth + 1)
        elif isinstance(node, ast.Dict):
            for key in node.keys:
                yield from self._strings(key, depth + 1)
            for value in node.values:
                if isinstance(value, ast.List | ast.Tuple):
                    continue  # {'a': ['mean', 'sum']}: functions, not columns
                if isinstance(value, ast.Constant):
                    continue
                yield from self._strings(value, depth + 1)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "NamedAgg":
            for keyword in node.keywords:
                if keyword.arg == "column":
                    yield from self._strings(keyword.value, depth + 1)

    def _column_refs(self, node: ast.AST | None) -> list[str]:
        """Dataset columns that ``node`` names: strings in column positions, attribute access,
        subscripts."""
        found: list[str] = self._resolve(list(self._strings(node)))
        if node is not None:
            for sub in ast.walk(node):
                if isinstance(sub, ast.Attribute) and not self._is_module(sub.value):
                    found += self._resolve([sub.attr])
                elif isinstance(sub, ast.Subscript):
                    found += self._resolve(list(self._strings(_subscript_key(sub))))
                elif isinstance(sub, ast.Name) and sub.id in self.name_columns:
                    found += self.name_columns[sub.id]
        return found

    def _is_module(self, node: ast.AST) -> bool:
        return isinstance(node, ast.Name) and (node.id in self.modules or node.id in MODULE_NAMES) and node.id not in self.data_names

    def _add_columns(self, names: list[str]) -> None:
        for name in names:
            self._columns.setdefault(name, None)
            self._uses[name] += 1

    def _add_filter(self, names: list[str]) -> None:
        for name in names:
            self._filter_columns.setdefault(name, None)

    def _touches_data(self, node: ast.AST) -> bool:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and (sub.id in self.data_names or sub.id in self.frames):
                return True
            if isinstance(sub, ast.Attribute) and sub.attr in self.columns:
                return True
            if isinstance(sub, ast.Subscript) and any(s in self.columns for s in self._strings(_subscript_key(sub))):
                return True
        return False

    # the walk ---------------------------------------------------------------------------------

    def read(self, node: ast.AST) -> None:
        # A lambda given to a pandas method (filter, apply, transform, loc, assign) receives data.
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute):
                for arg in [*sub.args, *(k.value for k in sub.keywords)]:
                    if isinstance(arg, ast.Lambda):
                        self.data_names |= {a.arg for a in arg.args.args}
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and (sub.id in self.frames or sub.id in self.data_names) and isinstance(sub.ctx, ast.Load):
                if sub.id in self.frames:
                    self.facts.uses_data = True
            elif isinstance(sub, ast.Subscript):
                self._subscript(sub)
            elif isinstance(sub, ast.Attribute):
                if sub.attr in self.columns and not self._is_module(sub.value):
                    self._add_columns([sub.attr])
                if sub.attr in ("shape", "size", "T", "index", "values", "empty", "categories"):
                    self.facts.operations.add(sub.attr)
                if sub.attr == "categories":
                    self.facts.sort_calls.add("categories")  # an inferred categorical's categories are sorted
                if sub.attr in ("loc", "iloc", "at", "iat"):
                    pass
            elif isinstance(sub, ast.Call):
                self._call(sub)
            elif isinstance(sub, ast.Compare) and self._touches_data(sub):
                self.facts.conditions += len(sub.ops)
                self._add_filter(self._column_refs(sub))
            elif isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Div) and self._touches_data(sub):
                self.facts.operations.add("divide")  # a share: a count or sum divided by another

    def _subscript(self, node: ast.Subscript) -> None:
        key = _subscript_key(node)
        self._add_columns([s for s in self._strings(key) if s in self.columns])
        is_loc = isinstance(node.value, ast.Attribute) and node.value.attr in ("loc", "iloc")
        mask = key.elts[0] if is_loc and isinstance(key, ast.Tuple) and key.elts else key
        if isinstance(mask, ast.Compare | ast.BoolOp | ast.UnaryOp | ast.BinOp | ast.Call | ast.Name) and not _is_constant_like(mask):
            if isinstance(mask, ast.Name) and mask.id in self.constants:
                pass
            elif not isinstance(mask, ast.Name) or mask.id not in self.frames:
                if not (isinstance(mask, ast.Call) and isinstance(mask.func, ast.Name) and mask.func.id in ("slice", "range", "list")) \
                        and not (isinstance(mask, ast.Call) and isinstance(mask.func, ast.Attribute) and mask.func.attr in LABEL_CALLS):
                    self.facts.filters = True
        if isinstance(node.value, ast.Attribute) and node.value.attr == "iloc":
            n = _slice_limit(key)
            if n is not None:
                self.facts.limits.append(("slice", n))
        elif isinstance(node.value, ast.Attribute) and node.value.attr == "str":
            pass  # df['x'].str[:4]: characters, not rows
        elif isinstance(key, ast.Slice):
            n = _slice_limit(key)
            if n is not None:
                self.facts.limits.append(("slice", n))
        elif isinstance(key, ast.Constant) and key.value == 0 and not isinstance(key.value, bool):
            self.facts.limits.append(("slice", 1))  # ....index[0]: the first
        elif isinstance(key, ast.UnaryOp) and isinstance(key.op, ast.USub) and isinstance(key.operand, ast.Constant) and key.operand.value == 1:
            self.facts.limits.append(("tail", 1))  # ...[-1]: the last

    def _call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if name is None:
            return
        ops = self.facts.operations
        ops.add(name)
        is_method = isinstance(func, ast.Attribute)
        on_string = is_method and isinstance(func.value, ast.Constant)
        pandas_call = is_method and not on_string and name not in VALUE_METHODS
        if pandas_call:
            for arg in node.args:
                self._add_columns([s for s in self._strings(arg) if s in self.columns])
                if isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name) and arg.value.id in ("np", "numpy"):
                    ops.add(arg.attr)  # agg(np.mean)
                if isinstance(arg, ast.Name) and arg.id in ("sum", "len", "max", "min"):
                    ops.add({"len": "count"}.get(arg.id, arg.id))
            for keyword in node.keywords:
                self._add_columns([s for s in self._strings(keyword.value) if s in self.columns])
        if name in AGG_CALLS or (is_method and name in ("groupby",)):
            for value in [*node.args, *(k.value for k in node.keywords)]:
                for function in _agg_functions(value):
                    ops.add(function)
        if name in ("query", "eval") and node.args:
            for text in self._strings(node.args[0]):
                self._query(text)
        if name in PREDICATE_CALLS and is_method and not on_string:
            self.facts.conditions += 1
            self.facts.filters = True
            subject = _trailing_columns(func.value, self)  # type: ignore[union-attr]
            subset = [c for k in node.keywords if k.arg == "subset" for c in self._resolve(list(self._strings(k.value)))]
            self._add_filter(subject + subset)
            if name == "isin" and node.args and self._frames_of(node.args[0]) - self._frames_of(func.value):  # type: ignore[union-attr]
                self.facts.joins.add("isin")  # a semi-join: rows whose key is in another table
                for column in subject + _trailing_columns(node.args[0], self):
                    self._join_keys.setdefault(column, None)
        if name in ("count", "size") and is_method and isinstance(func.value, ast.Subscript):  # type: ignore[union-attr]
            for column in self._strings(func.value.slice):  # type: ignore[union-attr]
                self._count_uses[column] += 1
        if name in ("agg", "aggregate") and is_method:
            for value in [*node.args, *(k.value for k in node.keywords)]:
                for column, function in _named_aggregations(value):
                    if function in ("count", "size"):
                        self._count_uses[column] += 1
        if name == "value_counts" and any(k.arg == "normalize" and not _is_false(k.value) for k in node.keywords):
            ops.add("divide")
        if name in ("query", "where", "mask", "filter", "dropna"):
            self.facts.filters = True
        if name == "groupby" and is_method:
            targets = node.args[:1] + [k.value for k in node.keywords if k.arg == "by"]
            for target in targets:
                for column in self._column_refs(target):
                    self._groupby.setdefault(column, None)
        if name in ("pivot_table", "pivot"):
            candidates = [k.value for k in node.keywords if k.arg in ("index", "columns")] + node.args[1:3]
            for target in candidates:
                for column in self._column_refs(target):
                    self._groupby.setdefault(column, None)
        if name == "crosstab":
            for target in node.args[:2] + [k.value for k in node.keywords if k.arg in ("index", "columns")]:
                for column in self._column_refs(target):
                    self._groupby.setdefault(column, None)
        if name == "value_counts" and is_method:
            subset = [k.value for k in node.keywords if k.arg == "subset"] + node.args[:1]
            refs = [c for t in subset for c in self._column_refs(t)] or _trailing_columns(func.value, self)
            for column in refs:
                self._groupby.setdefault(column, None)
        if name in SORT_CALLS:
            self.facts.sort_calls.add(name)
            descending = None
            if name == "nlargest":
                descending = True
            elif name == "nsmallest":
                descending = False
            else:
                for keyword in node.keywords:
                    if keyword.arg == "ascending":
                        descending = _is_false(keyword.value)
                    if keyword.arg == "reverse":
                        descending = not _is_false(keyword.value)
                if descending is None and name in ("sort_values", "sort_index", "sorted"):
                    descending = False
            if descending is not None:
                self.facts.sort_descending.add(descending)
        if name in EXTREME_CALLS:
            self.facts.sort_calls.add(name)
        if name == "value_counts" and is_method and not any(k.arg == "sort" and _is_false(k.value) for k in node.keywords):
            self.facts.sort_calls.add("value_counts")  # sorted by count, descending, by default
            ascending = any(k.arg == "ascending" and isinstance(k.value, ast.Constant) and k.value.value is True for k in node.keywords)
            self.facts.sort_descending.add(not ascending)
        if name in ("head", "tail", "nlargest", "nsmallest"):
            n = _int_arg(node, 0, "n")
            if n is None and name in ("head", "tail") and not node.args and not node.keywords:
                n = 5
            if n is not None:
                self.facts.limits.append((name, n))
        if name in JOIN_CALLS:
            self.facts.joins.add(name)
            for keyword in node.keywords:
                if keyword.arg in ("on", "left_on", "right_on"):
                    for column in self._strings(keyword.value):
                        if column in self.columns:
                            self._join_keys.setdefault(column, None)
        if name == "map" and node.args and self._touches_data(node.args[0]) and not isinstance(node.args[0], ast.Lambda | ast.Dict):
            # A lookup join: sales['emp_id'].map(employees.set_index('id')['department']).
            self.facts.joins.add("map")
            for column in _trailing_columns(func.value, self):  # type: ignore[union-attr]
                self._join_keys.setdefault(column, None)
        if name == "set_index" and is_method:
            for column in (c for a in node.args[:1] for c in self._strings(a)):
                if column in self.columns:
                    self._index_keys.setdefault(column, None)

    def _query(self, text: str) -> None:
        replaced, names = _unbacktick(text)
        try:
            tree = ast.parse(replaced.replace("@", ""), mode="eval")
        except SyntaxError:
            return
        for sub in ast.walk(tree):
            if isinstance(sub, ast.Name):
                column = names.get(sub.id, sub.id)
                resolved = self._resolve([column])
                if column in self.columns:
                    self._add_columns([column])
                self._add_filter(resolved)
            elif isinstance(sub, ast.Compare):
                self.facts.conditions += len(sub.ops)
            elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr in PREDICATE_CALLS:
                self.facts.conditions += 1
        self.facts.filters = True

    def finish(self) -> CodeFacts:
        self.facts.columns = list(self._columns)
        self.facts.groupby_columns = list(self._groupby)
        if self.facts.joins & {"map", "join"}:
            for column in self._index_keys:
                self._join_keys.setdefault(column, None)
        self.facts.join_keys = list(self._join_keys)
        self.facts.filter_columns = list(self._filter_columns)
        self.facts.count_only_columns = [c for c in self._columns if self._uses[c] <= self._count_uses[c]]
        if self.facts.columns:
            self.facts.uses_data = True
        return self.facts


def _subscript_key(node: ast.Subscript) -> ast.AST:
    return node.slice


def _is_constant_like(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) or (isinstance(node, ast.List | ast.Tuple) and all(isinstance(e, ast.Constant) for e in node.elts))


def _is_false(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value is False or node.value == 0
    if isinstance(node, ast.List | ast.Tuple):
        return any(_is_false(e) for e in node.elts)
    return False


def _int_arg(node: ast.Call, position: int, keyword: str) -> int | None:
    value = node.args[position] if len(node.args) > position else next((k.value for k in node.keywords if k.arg == keyword), None)
    if isinstance(value, ast.Constant) and isinstance(value.value, int) and not isinstance(value.value, bool):
        return int(value.value)
    return None


def _slice_limit(key: ast.AST) -> int | None:
    if isinstance(key, ast.Slice) and key.lower is None and isinstance(key.upper, ast.Constant) and isinstance(key.upper.value, int):
        return int(key.upper.value)
    if isinstance(key, ast.Constant) and isinstance(key.value, int) and key.value == 0:
        return 1
    return None


def _agg_functions(node: ast.AST) -> Iterator[str]:
    """Aggregation names in an agg()-like argument: 'mean', ['sum', 'max'], {'a': 'mean'},
    ('col', 'mean') named aggregations, np.mean."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value
    elif isinstance(node, ast.List | ast.Set):
        for element in node.elts:
            yield from _agg_functions(element)
    elif isinstance(node, ast.Tuple):
        if len(node.elts) == 2:
            yield from _agg_functions(node.elts[1])
        else:
            for element in node.elts:
                yield from _agg_functions(element)
    elif isinstance(node, ast.Dict):
        for value in node.values:
            yield from _agg_functions(value)
    elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ("np", "numpy", "pd"):
        yield node.attr
    elif isinstance(node, ast.Name) and node.id in ("sum", "len", "max", "min"):
        yield {"len": "count"}.get(node.id, node.id)
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "NamedAgg":
        for keyword in node.keywords:
            if keyword.arg == "aggfunc":
                yield from _agg_functions(keyword.value)


def _named_aggregations(node: ast.AST) -> Iterator[tuple[str, str]]:
    """(column, function) pairs of ``agg(n=('id', 'count'))`` and ``agg({'id': 'count'})``."""
    if isinstance(node, ast.Tuple) and len(node.elts) == 2 and all(isinstance(e, ast.Constant) for e in node.elts):
        column, function = (e.value for e in node.elts)  # type: ignore[attr-defined]
        if isinstance(column, str) and isinstance(function, str):
            yield column, function
    elif isinstance(node, ast.Dict):
        for key, value in zip(node.keys, node.values):
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                for function in _agg_functions(value):
                    yield key.value, function


def _trailing_columns(node: ast.AST, reader: _Reader) -> list[str]:
    """The column a method chain starts from: ``df['a'].value_counts()`` → a."""
    while True:
        if isinstance(node, ast.Subscript):
            found = reader._resolve(list(reader._strings(node.slice)))
            if found:
                return found
            node = node.value
        elif isinstance(node, ast.Attribute):
            found = reader._resolve([node.attr])
            if found and not reader._is_module(node.value):
                return found
            node = node.value
        elif isinstance(node, ast.Call):
            func = node.func
            wrapper = isinstance(func, ast.Name) or (isinstance(func, ast.Attribute) and reader._is_module(func.value))
            node = node.args[0] if wrapper and node.args else func  # pd.to_datetime(df['x']), sorted(df['x'])
        elif isinstance(node, ast.Name):
            return list(reader.name_columns.get(node.id, []))
        else:
            return []


def _unbacktick(text: str) -> tuple[str, dict[str, str]]:
    names: dict[str, str] = {}
    out = []
    parts = text.split("`")
    for index, part in enumerate(parts):
        if index % 2 == 1:
            placeholder = f"__col{index}__"
            names[placeholder] = part
            out.append(placeholder)
        else:
            out.append(part)
    return "".join(out), names


def _constants(tree: ast.Module) -> dict[str, list[str]]:
    """Names bound (only) to string constants or lists of them."""
    values: dict[str, list[str]] = {}
    spoiled: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    strings = _literal_strings(node.value)
                    if strings is None:
                        spoiled.add(target.id)
                    else:
                        values.setdefault(target.id, []).extend(strings)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign | ast.For) and isinstance(getattr(node, "target", None), ast.Name):
            spoiled.add(node.target.id)  # type: ignore[union-attr]
    return {k: v for k, v in values.items() if k not in spoiled}


def _literal_strings(node: ast.AST) -> list[str] | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.List | ast.Tuple) and node.elts and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return [e.value for e in node.elts]  # type: ignore[attr-defined]
    return None


def _data_names(entries: list[_Entry], frames: set[str]) -> set[str]:
    data = set(frames)
    changed = True
    while changed:
        changed = False
        for entry in entries:
            if entry.uses & data and not entry.targets <= data:
                data |= entry.targets
                changed = True
    return data


def _modules(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names |= {a.asname or a.name for a in node.names}
    return names


def analyse_code(code: str, columns: set[str], frames: set[str]) -> CodeFacts:
    """Facts about ``code`` against a dataset with ``columns`` held in frames named ``frames``
    (``df`` and ``dfs`` included by the caller)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        line = getattr(exc, "lineno", None)
        return CodeFacts(parsed=False, syntax_error=f"{type(exc).__name__}: {getattr(exc, 'msg', None) or exc}" + (f" (line {line})" if line else ""))
    entries: list[_Entry] = []
    _flatten(tree.body, set(), entries, True)
    relevant = _relevant(entries)
    reader = _Reader(columns, frames, _constants(tree), _data_names(entries, frames), _modules(tree))
    for entry, keep in zip(entries, relevant):
        if keep:
            for node in entry.nodes:
                reader.learn(node)
    for entry, keep in zip(entries, relevant):
        if keep:
            for node in entry.nodes:
                reader.read(node)
    facts = reader.finish()
    facts.statements = len(entries)
    facts.relevant_statements = sum(relevant)
    facts.dead_lines = sorted({e.line for e, keep in zip(entries, relevant) if not keep and e.line})
    return facts
