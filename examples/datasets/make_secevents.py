"""Write the sample ``secevents`` dataset: small Defender-style security tables with deliberate ties.

    python examples/datasets/make_secevents.py          # (re)writes examples/datasets/secevents/*.csv
    python examples/datasets/make_secevents.py --check  # exits 1 if the committed files differ

Written for the KQL validity cases (``tests/scoring/kql/labelled_cases.py``); every value follows
from a row's index, so the files are byte-identical on every run. The ties are the point:

- ``DeviceLogonEvents``: 160 logons over a week before :data:`NOW`. Failed logons per account are
  9, 7, 7, 7, 5, 5, 3, 2, 1, 0 (a top 2 ties at the boundary, a top 1 does not), and several
  logons share a timestamp (a sort on Timestamp has tied keys); ``IsLocalAdmin`` is a boolean.
- ``DeviceInfo``: one row per device snapshot; three devices have two snapshots that differ in
  ``OSVersion``, so a default (``innerunique``) join from this side keeps an arbitrary snapshot.
- ``AlertInfo``: 24 alerts; on two devices the latest alerts share their timestamp, so
  ``arg_max(Timestamp, ...)`` has ties.

Register it under the name ``secevents`` (``POST /api/v1/datasets {"name": "secevents", "path":
"secevents"}`` with ``ASSAY_DATA_DIR=examples/datasets``); items pin ``now`` to 2024-03-08.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from datetime import datetime, timedelta
from pathlib import Path

OUT = Path(__file__).resolve().parent / "secevents"
NOW = datetime(2024, 3, 8)

ACCOUNTS = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy"]
FAILED = [9, 7, 7, 7, 5, 5, 3, 2, 1, 0]  # per account, in ACCOUNTS order
DEVICES = ["WS-01", "WS-02", "WS-03", "WS-04", "WS-05", "WS-06", "SRV-01", "SRV-02"]
LOGON_TYPES = ["Interactive", "Network", "RemoteInteractive"]
LOGONS = 160


def logon_events() -> list[dict[str, object]]:
    failures = [a for a, n in zip(ACCOUNTS, FAILED) for _ in range(n)]
    rows = []
    for i in range(LOGONS):
        failed = i < len(failures)
        account = failures[i] if failed else ACCOUNTS[(i * 7) % len(ACCOUNTS)]
        # Every 4th logon shares the timestamp of the one before it: ties on Timestamp.
        slot = i - (1 if i % 4 == 3 else 0)
        rows.append(
            {
                "Timestamp": (NOW - timedelta(days=7) + timedelta(minutes=61 * slot)).isoformat(sep=" "),
                "DeviceName": DEVICES[(i * 3) % len(DEVICES)],
                "AccountName": account,
                "ActionType": "LogonFailed" if failed else "LogonSuccess",
                "LogonType": LOGON_TYPES[(i * 5) % len(LOGON_TYPES)],
                "RemoteIP": f"10.0.{i % 5}.{(i * 11) % 50 + 1}",
                "IsLocalAdmin": "true" if i % 6 == 0 else "false",
            }
        )
    return rows


def device_info() -> list[dict[str, object]]:
    rows = []
    for i, device in enumerate(DEVICES):
        platform = "WindowsServer2022" if device.startswith("SRV") else "Windows11"
        snapshots = 2 if i in (0, 2, 6) else 1
        for s in range(snapshots):
            rows.append(
                {
                    "DeviceName": device,
                    "OSPlatform": platform,
                    "OSVersion": f"10.0.{22621 + s * 10 + i}",
                    "Owner": ACCOUNTS[i],
                    "SnapshotTime": (NOW - timedelta(days=3 - s)).isoformat(sep=" "),
                }
            )
    return rows


SEVERITIES = ["Low", "Medium", "High"]
TITLES = ["Suspicious PowerShell", "Credential dumping", "Brute force", "Unusual sign-in", "Malware detected"]


def alert_info() -> list[dict[str, object]]:
    rows = []
    for i in range(24):
        device = DEVICES[i % len(DEVICES)]
        hours = 2 * i
        if i in (16, 17, 22, 23):
            hours = 40  # the latest alerts of WS-01 and of WS-02 tie (see the module docstring)
        rows.append(
            {
                "AlertId": f"da{1000 + i}",
                "Timestamp": (NOW - timedelta(days=2) + timedelta(hours=hours)).isoformat(sep=" "),
                "DeviceName": device if i not in (22, 23) else DEVICES[(i - 22)],
                "Title": TITLES[(i * 2) % len(TITLES)],
                "Severity": SEVERITIES[(i * 7) % len(SEVERITIES)],
            }
        )
    return rows


TABLES = {"DeviceLogonEvents": logon_events, "DeviceInfo": device_info, "AlertInfo": alert_info}


def render(rows: list[dict[str, object]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed files differ")
    args = parser.parse_args()
    differ = []
    for name, make in TABLES.items():
        path = OUT / f"{name}.csv"
        text = render(make())
        if args.check:
            if not path.exists() or path.read_text() != text:
                differ.append(path.name)
        else:
            OUT.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if differ:
        print(f"differ from the generator: {', '.join(differ)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
