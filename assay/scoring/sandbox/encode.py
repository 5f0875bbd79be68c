"""A run's result as bounded JSON with dtypes (runs inside the sandboxed child).

Every result becomes a table (``kind`` says what it was):

- ``dataframe``: as it is; ``series``: a one-column frame (named after the Series, else ``value``);
- ``scalar`` (number, string, bool, timestamp, None, a 0-d array): a 1×1 frame, column ``value``;
- ``sequence``: one column ``value`` (or the Index's name), in the result's own order, for a list, a
  tuple, a 1-D numpy array, a pandas ExtensionArray (what ``unique()`` returns for strings,
  categoricals, nullable integers, datetimes under pandas 3) and an Index; a MultiIndex is one
  column per level; a list or tuple of equally long tuples is rows (columns ``0..n-1``); a list of
  dicts is records; a 2-D array a frame with columns ``0..n-1``;
- ``set`` (set, frozenset): one column in sorted order, marked ``"ordered": false``: a set carries
  no order, so the comparison never reads one into it;
- ``mapping`` (dict): keys as an index column ``key``, values in ``value`` (like a Series);
- a *meaningful* index becomes leading columns (``index_columns`` says how many): a MultiIndex,
  a named index, or an unnamed one whose labels are not integers (``value_counts()`` of strings,
  ``agg`` over named rows). An unnamed integer index is row labels (what filtering left) and
  is dropped;
- MultiIndex column labels are joined with ``|``; every label becomes a string.

Cells: numbers and strings as JSON; NaN / None / NaT / NA as ``null``; ±inf as
``{"$float": "inf"}``; timestamps ``{"$ts": iso}``; dates ``{"$date": iso}``; durations
``{"$td": seconds}``; nested sequences (lists, tuples, arrays, a group's ``unique()``; sets sorted)
``{"$seq": [...]}``; anything else ``{"$repr": text}``.

Bounds: more than ``max_rows`` rows, or more than ``max_bytes`` of JSON, is an error
(:class:`OutputTooLarge`), never a silent truncation: a truncated result cannot be compared.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import json
import math
from typing import Any


class OutputTooLarge(Exception):
    pass


class UnsupportedResult(Exception):
    pass


_SCALARS = (str, bytes, bool, int, float, complex, decimal.Decimal, _dt.date, _dt.datetime, _dt.timedelta)


def _is_null(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    try:
        import pandas as pd

        if value is pd.NA or value is pd.NaT:
            return True
    except ImportError:  # pragma: no cover - the executor always has pandas
        pass
    try:
        import numpy as np

        if isinstance(value, np.floating) and np.isnan(value):
            return True
        if isinstance(value, np.datetime64 | np.timedelta64) and np.isnat(value):
            return True
    except ImportError:  # pragma: no cover
        pass
    return False


def encode_cell(value: Any, depth: int = 0) -> Any:
    if _is_null(value):
        return None
    try:
        import numpy as np

        if isinstance(value, np.generic):
            value = value.item()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if math.isinf(value):
            return {"$float": "inf" if value > 0 else "-inf"}
        return value
    if isinstance(value, str):
        return value
    if isinstance(value, decimal.Decimal):
        return encode_cell(float(value))
    try:
        import pandas as pd

        if isinstance(value, pd.Timestamp):
            return {"$ts": value.isoformat()}
        if isinstance(value, pd.Timedelta):
            return {"$td": value.total_seconds()}
        if isinstance(value, pd.Period | pd.Interval):
            return str(value)
    except ImportError:  # pragma: no cover
        pass
    if isinstance(value, _dt.datetime):
        return {"$ts": value.isoformat()}
    if isinstance(value, _dt.date):
        return {"$date": value.isoformat()}
    if isinstance(value, _dt.timedelta):
        return {"$td": value.total_seconds()}
    if isinstance(value, bytes):
        return {"$repr": repr(value[:200])}
    if depth < 2:
        items = _sequence_items(value)
        if items is not None and len(items) <= 1000:
            return {"$seq": [encode_cell(v, depth + 1) for v in items]}
    return {"$repr": repr(value)[:200]}


def _sorted_set(values: set[Any] | frozenset[Any]) -> list[Any]:
    """A set's members in a fixed order: by value when they compare, else by their text."""
    try:
        return sorted(values)
    except TypeError:
        return sorted(values, key=repr)


def _sequence_items(value: Any) -> list[Any] | None:
    """The members of a list-like cell (list, tuple, set, 1-D array, ExtensionArray, Index)."""
    if isinstance(value, list | tuple):
        return list(value)
    if isinstance(value, set | frozenset):
        return _sorted_set(value)
    try:
        import numpy as np
        import pandas as pd
    except ImportError:  # pragma: no cover
        return None
    if isinstance(value, np.ndarray) and value.ndim == 1:
        return value.tolist()
    if isinstance(value, pd.api.extensions.ExtensionArray | pd.Index) and value.ndim == 1:
        return list(value)
    return None


def _is_numpy_scalar(value: Any) -> bool:
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        return False
    return isinstance(value, np.generic)


def _meaningful_index(index: Any) -> bool:
    import pandas as pd

    if isinstance(index, pd.MultiIndex):
        return True
    if index.name is not None:
        return True
    return not pd.api.types.is_integer_dtype(index.dtype) and len(index) > 0


def _label(value: Any) -> str:
    if isinstance(value, tuple):
        return "|".join(str(v) for v in value if str(v) != "")
    return str(value)


def _column(values: list[Any]) -> Any:
    import pandas as pd

    return pd.DataFrame({"value": pd.Series(values, dtype=object)})


def _to_frame(value: Any) -> tuple[str, Any]:
    """(kind, DataFrame) for any result, or UnsupportedResult (rules in the module docstring)."""
    import numpy as np
    import pandas as pd

    if isinstance(value, pd.DataFrame):
        return "dataframe", value
    if isinstance(value, pd.Series):
        name = value.name if value.name is not None else "value"
        return "series", value.to_frame(name=name)
    if isinstance(value, pd.MultiIndex):
        names = [n if n is not None else f"level_{i}" for i, n in enumerate(value.names)]
        return "sequence", value.to_frame(index=False, name=names)
    if isinstance(value, pd.Index):
        return "sequence", pd.DataFrame({value.name if value.name is not None else "value": pd.Series(value.array, copy=True)})
    if isinstance(value, pd.api.extensions.ExtensionArray):
        # unique() of a string, categorical, nullable or datetime column; its dtype is kept.
        return "sequence", pd.DataFrame({"value": pd.Series(value)})
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            return "scalar", pd.DataFrame({"value": [value.item()]})
        if value.ndim == 1:
            return "sequence", pd.DataFrame({"value": value})
        if value.ndim == 2:
            return "sequence", pd.DataFrame(value)
        raise UnsupportedResult(f"a {value.ndim}-dimensional array is not a table")
    if isinstance(value, dict):
        keys = pd.Index(list(value), dtype=object, name="key")  # named: the keys are kept as an index column
        return "mapping", pd.DataFrame({"value": pd.Series(list(value.values()), index=keys, dtype=object)})
    if isinstance(value, set | frozenset):
        return "set", _column(_sorted_set(value))
    if isinstance(value, list | tuple):
        items = list(value)
        if items and all(isinstance(i, dict) for i in items):
            return "records", pd.DataFrame(items)
        if items and all(isinstance(i, tuple) for i in items) and len({len(i) for i in items}) == 1 and len(items[0]) > 1:
            return "sequence", pd.DataFrame([list(i) for i in items], dtype=object)
        return "sequence", _column(items)
    if value is None or isinstance(value, _SCALARS) or isinstance(value, np.generic) or isinstance(value, pd.Timestamp | pd.Timedelta):
        return "scalar", pd.DataFrame({"value": pd.Series([value], dtype=object)})
    kind = type(value).__name__
    if "GroupBy" in kind or "Resampler" in kind or "Rolling" in kind:
        raise UnsupportedResult(f"the result is a {kind}, not a value: aggregate it (e.g. .mean(), .size())")
    raise UnsupportedResult(
        f"the result is a {type(value).__module__}.{kind}, which is not a table, series, array, "
        "list, tuple, set, dict or scalar"
    )


def encode_result(value: Any, *, max_rows: int, max_bytes: int) -> dict[str, Any]:
    """The bounded JSON form of ``value`` (see the module docstring)."""
    type_name = f"{type(value).__module__}.{type(value).__qualname__}"
    if value is None or isinstance(value, _SCALARS) or _is_numpy_scalar(value):
        # The common scalar answer, without building a frame (a fresh child pays for every page
        # pandas touches).
        cell = encode_cell(value)
        size = len(json.dumps(cell, separators=(",", ":"), allow_nan=False))
        if size > max_bytes:
            raise OutputTooLarge(f"the result is larger than {max_bytes} bytes as JSON")
        dtype = getattr(value, "dtype", None)
        return {
            "kind": "scalar", "type": type_name, "columns": ["value"],
            "dtypes": [str(dtype) if dtype is not None else type(value).__name__],
            "index_columns": 0, "shape": [1, 1], "rows": [[cell]],
        }
    import pandas as pd

    kind, frame = _to_frame(value)
    rows_total = len(frame)
    if rows_total > max_rows:
        raise OutputTooLarge(f"the result has {rows_total} rows; the limit is {max_rows}")
    index_columns = 0
    if _meaningful_index(frame.index):
        names = [n if n is not None else ("index" if frame.index.nlevels == 1 else f"level_{i}") for i, n in enumerate(frame.index.names)]
        taken = {_label(c) for c in frame.columns}
        names = [n if _label(n) not in taken else f"{_label(n)}_index" for n in names]
        index_frame = frame.index.to_frame(index=False, name=names if frame.index.nlevels > 1 else names[0])
        frame = pd.concat([index_frame, frame.reset_index(drop=True)], axis=1)
        index_columns = len(names)
    columns = [_label(c) for c in frame.columns]
    dtypes = [str(t) for t in frame.dtypes]
    budget = max_bytes
    encoded_columns = []
    for position in range(frame.shape[1]):
        values = frame.iloc[:, position].tolist()
        cells = [encode_cell(v) for v in values]
        budget -= len(json.dumps(cells, separators=(",", ":"), allow_nan=False))
        if budget < 0:
            raise OutputTooLarge(f"the result is larger than {max_bytes} bytes as JSON")
        encoded_columns.append(cells)
    rows = [list(r) for r in zip(*encoded_columns)] if encoded_columns else [[] for _ in range(len(frame))]
    encoded = {
        "kind": kind,
        "type": type_name,
        "columns": columns,
        "dtypes": dtypes,
        "index_columns": index_columns,
        "shape": [len(rows), len(columns)],
        "rows": rows,
    }
    if kind == "set":
        encoded["ordered"] = False
    return encoded
