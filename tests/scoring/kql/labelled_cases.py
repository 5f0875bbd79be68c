"""Labelled KQL cases for issue 19's classes of cause, over the ``secevents`` dataset
(``examples/datasets/secevents``, written by ``examples/datasets/make_secevents.py``) and over
items that carry no dataset.

Each case is an expected query, a generated one, and whether the generated query is a correct answer
to the same question (``equivalent``). ``should_pass`` is what the pass rule must say: an
equivalent query passes only when there is execution evidence (both queries ran on a dataset, or
the item supplies both results); without it nothing passes.

Classes (``klass``):

- ``ties``: the expected query's output is not uniquely determined (``top N`` with ties at the
  boundary, ``sort`` on tied keys then ``take``, the default ``innerunique`` join keeping an
  arbitrary row per left key, ``take`` without a sort, ``arg_max`` / ``arg_min`` ties). Equivalent
  rewrites pick rows another valid way; non-equivalent ones take a different number of rows, a
  wrong direction or a wrong join kind.
- ``expected fails offline``: the expected query cannot run offline (``has`` on a boolean column
  fails in DuckDB's binder; a datetime literal the offline engine reads as null). Without supplied
  results nothing can be established; with them, they are compared.
- ``no evidence``: neither a dataset nor results. Nothing passes, however close the text.
- ``strict: different results``: both queries run, and return different rows (a few more rows than
  expected, a loosened filter, a ``take`` ten times larger): ``kql_strict`` must not pass them.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, NamedTuple

NOW = datetime(2024, 3, 8, tzinfo=timezone.utc)
DATASET = "secevents"

CLASSES = ("ties", "expected fails offline", "no evidence", "strict: different results")


class LabelledCase(NamedTuple):
    klass: str
    name: str
    expected: str
    generated: str
    equivalent: bool
    dataset: str | None = DATASET
    supplied: dict[str, Any] | None = None  # item fields: results / columns the real engine returned

    @property
    def id(self) -> str:
        return f"{self.klass}: {self.name}"

    @property
    def has_evidence(self) -> bool:
        """Whether both queries' results can be known: a dataset they run on (the cases' datasets
        run both queries, except where the class says they cannot), or results in the item."""
        if self.klass == "expected fails offline":
            return self.supplied is not None
        return self.dataset is not None or self.supplied is not None

    @property
    def should_pass(self) -> bool:
        return self.equivalent and self.has_evidence

    def item(self) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "id": self.id,
            "prompt": self.name,
            "expected_kql": self.expected,
            "generated_kql": self.generated,
        }
        if self.dataset is not None:
            fields.update(dataset=self.dataset, now=NOW.isoformat())
        fields.update(self.supplied or {})
        return fields


L = "DeviceLogonEvents"
FAILED = f'{L} | where ActionType == "LogonFailed"'
PER_ACCOUNT = f"{FAILED} | summarize Failures = count() by AccountName"

TIES = [
    # Failures per account: 9, 7, 7, 7, 5, ... — a top 2 ties at its boundary (three accounts at 7).
    ("top 2 as sort and take", f"{PER_ACCOUNT} | top 2 by Failures", f"{PER_ACCOUNT} | sort by Failures desc | take 2", True),
    ("top 2 as order by and limit", f"{PER_ACCOUNT} | top 2 by Failures desc", f"{PER_ACCOUNT} | order by Failures | limit 2", True),
    ("top 2 with default names", f"{PER_ACCOUNT} | top 2 by Failures", f"{FAILED} | summarize count() by AccountName | top 2 by count_", True),
    ("top 3 projected", f"{PER_ACCOUNT} | top 3 by Failures | project AccountName", f"{PER_ACCOUNT} | sort by Failures desc | take 3 | project AccountName", True),
    ("top 2 one row more", f"{PER_ACCOUNT} | top 2 by Failures", f"{PER_ACCOUNT} | top 3 by Failures", False),
    ("top 2 wrong direction", f"{PER_ACCOUNT} | top 2 by Failures", f"{PER_ACCOUNT} | top 2 by Failures asc", False),
    ("top 2 wrong count", f"{PER_ACCOUNT} | top 2 by Failures", f"{L} | summarize Failures = count() by AccountName | top 2 by Failures", False),
    # Several logons share their Timestamp: the latest five are not unique.
    (
        "latest logons, sort then take",
        f"{L} | sort by Timestamp desc | take 5 | project Timestamp, DeviceName, AccountName",
        f"{L} | top 5 by Timestamp | project Timestamp, DeviceName, AccountName",
        True,
    ),
    (
        "latest logons, project first",
        f"{L} | sort by Timestamp desc | take 7 | project Timestamp, AccountName",
        f"{L} | project Timestamp, AccountName | top 7 by Timestamp desc",
        True,
    ),
    (
        "latest logons, oldest instead",
        f"{L} | sort by Timestamp desc | take 5 | project Timestamp, DeviceName, AccountName",
        f"{L} | sort by Timestamp asc | take 5 | project Timestamp, DeviceName, AccountName",
        False,
    ),
    (
        "sorted on a tied key",
        f"{L} | where AccountName == 'carol' | sort by DeviceName asc | project DeviceName, Timestamp",
        f"{L} | where AccountName == 'carol' | project DeviceName, Timestamp | order by DeviceName asc",
        True,
    ),
    # take without a sort: any 5 of the admin logons is an answer.
    ("any five admin logons", f"{L} | where IsLocalAdmin == true | take 5 | project AccountName, DeviceName, IsLocalAdmin", f"{L} | where IsLocalAdmin | limit 5 | project AccountName, DeviceName, IsLocalAdmin", True),
    ("any five logons, wrong filter", f"{L} | where IsLocalAdmin == true | take 5 | project AccountName, DeviceName, IsLocalAdmin", f"{L} | where IsLocalAdmin == false | take 5 | project AccountName, DeviceName, IsLocalAdmin", False),
    ("any five admin logons, fifty", f"{L} | where IsLocalAdmin == true | take 5 | project AccountName, DeviceName, IsLocalAdmin", f"{L} | where IsLocalAdmin == true | take 50 | project AccountName, DeviceName, IsLocalAdmin", False),
    # DeviceInfo has two snapshots of three devices: the default join keeps either.
    (
        "default join, explicit innerunique",
        f"DeviceInfo | join ({FAILED}) on DeviceName | project DeviceName, OSVersion, AccountName, Timestamp",
        f"DeviceInfo | join kind=innerunique ({FAILED}) on DeviceName | project DeviceName, OSVersion, AccountName, Timestamp",
        True,
    ),
    (
        "default join, filter after the join",
        f"DeviceInfo | join ({FAILED}) on DeviceName | project DeviceName, OSVersion, AccountName, Timestamp",
        f"DeviceInfo | join {L} on DeviceName | where ActionType == 'LogonFailed' | project DeviceName, OSVersion, AccountName, Timestamp",
        True,
    ),
    (
        "default join as inner",
        f"DeviceInfo | join ({FAILED}) on DeviceName | project DeviceName, OSVersion, AccountName, Timestamp",
        f"DeviceInfo | join kind=inner ({FAILED}) on DeviceName | project DeviceName, OSVersion, AccountName, Timestamp",
        False,
    ),
    (
        "default join as left outer",
        f"DeviceInfo | join ({FAILED}) on DeviceName | project DeviceName, OSVersion, AccountName, Timestamp",
        f"DeviceInfo | join kind=leftouter ({FAILED}) on DeviceName | project DeviceName, OSVersion, AccountName, Timestamp",
        False,
    ),
    # The latest alerts of WS-01 and of WS-02 share their Timestamp.
    (
        "latest alert per device, star then project",
        "AlertInfo | summarize arg_max(Timestamp, Title) by DeviceName",
        "AlertInfo | summarize arg_max(Timestamp, *) by DeviceName | project DeviceName, Timestamp, Title",
        True,
    ),
    (
        "latest alert per device, other columns",
        "AlertInfo | summarize arg_max(Timestamp, Title) by DeviceName",
        "AlertInfo | summarize arg_max(Timestamp, Title, Severity) by DeviceName",
        True,
    ),
    (
        "earliest alert instead of latest",
        "AlertInfo | summarize arg_max(Timestamp, Title) by DeviceName",
        "AlertInfo | summarize arg_min(Timestamp, Title) by DeviceName",
        False,
    ),
    (
        "latest alert per title instead of device",
        "AlertInfo | summarize arg_max(Timestamp, Title) by DeviceName",
        "AlertInfo | summarize arg_max(Timestamp, DeviceName) by Title",
        False,
    ),
]

# The expected query fails offline: `has` on the boolean IsLocalAdmin (DuckDB's binder), or a
# datetime literal that duckdb-kql reads as null (Kusto reads it).
_HAS_BOOL = f'{L} | where IsLocalAdmin has "true" | summarize Logons = count() by DeviceName'
_ADMIN_RIGHT = f"{L} | where IsLocalAdmin == true | summarize Logons = count() by DeviceName"
_ADMIN_WRONG = f"{L} | summarize Logons = count() by DeviceName"
_PM = f"{L} | where Timestamp > datetime(2024-03-06 10:00 PM) | summarize Logons = count() by AccountName"
_PM_RIGHT = f"{L} | where Timestamp > datetime(2024-03-06 22:00) | summarize Logons = count() by AccountName"
_PM_WRONG = f"{L} | where Timestamp > datetime(2024-03-06 10:00) | summarize Logons = count() by AccountName"
_DATE_Z = f"{L} | where Timestamp >= datetime(2024-03-07Z) | project Timestamp, AccountName"
_DATE_Z_RIGHT = f"{L} | where Timestamp >= datetime(2024-03-07) | project Timestamp, AccountName"

_ADMIN_ROWS = [{"DeviceName": "WS-01", "Logons": 9}, {"DeviceName": "WS-03", "Logons": 9}, {"DeviceName": "SRV-01", "Logons": 9}]
_ALL_ROWS = [{"DeviceName": d, "Logons": 20} for d in ("WS-01", "WS-02", "WS-03", "WS-04", "WS-05", "WS-06", "SRV-01", "SRV-02")]

EXPECTED_FAILS = [
    ("has on a boolean column, equivalent", _HAS_BOOL, _ADMIN_RIGHT, True, None),
    ("has on a boolean column, filter dropped", _HAS_BOOL, _ADMIN_WRONG, False, None),
    (
        "has on a boolean column, results supplied",
        _HAS_BOOL,
        _ADMIN_RIGHT,
        True,
        {"expected_results": _ADMIN_ROWS, "generated_results": _ADMIN_ROWS},
    ),
    (
        "has on a boolean column, results supplied, filter dropped",
        _HAS_BOOL,
        _ADMIN_WRONG,
        False,
        {"expected_results": _ADMIN_ROWS, "generated_results": _ALL_ROWS},
    ),
    ("a PM literal, equivalent", _PM, _PM_RIGHT, True, None),
    ("a PM literal, wrong hour", _PM, _PM_WRONG, False, None),
    ("a Z-suffixed date, equivalent", _DATE_Z, _DATE_Z_RIGHT, True, None),
    ("a Z-suffixed date on both sides", _DATE_Z, _DATE_Z.replace("project Timestamp, AccountName", "project AccountName, Timestamp"), True, None),
    ("a Z-suffixed date, filter dropped", _DATE_Z, f"{L} | project Timestamp, AccountName", False, None),
]

# No dataset, no results: text alone.
NO_EVIDENCE = [
    ("identical query", f"{PER_ACCOUNT} | top 3 by Failures", f"{PER_ACCOUNT} | top 3 by Failures", True),
    ("quote style", f'{L} | where AccountName == "alice" | count', f"{L} | where AccountName == 'alice' | count", True),
    ("time units", f"{L} | where Timestamp > ago(1d) | count", f"{L} | where Timestamp > ago(24h) | count", True),
    (
        "dropped filter",
        f'{L} | where ActionType == "LogonFailed" and LogonType == "Network" | summarize count() by AccountName',
        f'{L} | where ActionType == "LogonFailed" | summarize count() by AccountName',
        False,
    ),
    (
        "inner join turned left outer",
        f"DeviceInfo | join kind=inner ({FAILED}) on DeviceName | project DeviceName, AccountName",
        f"DeviceInfo | join kind=leftouter ({FAILED}) on DeviceName | project DeviceName, AccountName",
        False,
    ),
    ("wrong table", f"{L} | where AccountName == 'bob' | count", "AlertInfo | where DeviceName == 'WS-02' | count", False),
]

# Both run; the rows differ. The design's recall misses extra rows; kql_strict must not pass them.
_NOT_NETWORK = f'{L} | where LogonType != "Network" | project Timestamp, DeviceName, AccountName, LogonType'
STRICT_DIFFERENT = [
    (
        "a few more rows than five",
        f"{FAILED} | summarize Failures = count() by AccountName | where Failures >= 5",
        f"{FAILED} | summarize Failures = count() by AccountName | where Failures >= 3",
        False,
    ),
    (
        "seven rows for five",
        f"{L} | where AccountName == 'erin' and ActionType == 'LogonFailed' | project Timestamp, DeviceName",
        f"{L} | where AccountName in ('erin', 'heidi') and ActionType == 'LogonFailed' | project Timestamp, DeviceName",
        False,
    ),
    (
        "117 rows for 107",
        _NOT_NETWORK,
        f'{L} | where LogonType != "Network" or RemoteIP startswith "10.0.4." | project Timestamp, DeviceName, AccountName, LogonType',
        False,
    ),
    (
        "take ten times larger",
        f"{L} | sort by Timestamp desc | take 5 | project Timestamp, AccountName",
        f"{L} | sort by Timestamp desc | take 50 | project Timestamp, AccountName",
        False,
    ),
    (
        "a hundred and some rows, equivalent",
        _NOT_NETWORK,
        f"{L} | where not(LogonType == 'Network') | project Timestamp, DeviceName, AccountName, LogonType",
        True,
    ),
    (
        "five rows, equivalent",
        f"{FAILED} | summarize Failures = count() by AccountName | where Failures >= 5",
        f"{L} | where ActionType == 'LogonFailed' | summarize Failures = count() by AccountName | where Failures > 4",
        True,
    ),
]

CASES: list[LabelledCase] = [
    *(LabelledCase("ties", n, e, g, eq) for n, e, g, eq in TIES),
    *(LabelledCase("expected fails offline", n, e, g, eq, supplied=s) for n, e, g, eq, s in EXPECTED_FAILS),
    *(LabelledCase("no evidence", n, e, g, eq, dataset=None) for n, e, g, eq in NO_EVIDENCE),
    *(LabelledCase("strict: different results", n, e, g, eq) for n, e, g, eq in STRICT_DIFFERENT),
]
