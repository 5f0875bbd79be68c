"""The JUnit XML writer: one test case per item, failures with their reason, the run's own failures as
test cases; text that XML cannot hold (control characters) or must escape (<, &, quotes) survives."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from assay.scoring.reports.junit import Case, SuiteFailure, write_junit


def test_items_and_run_failures_become_test_cases(tmp_path):
    target = tmp_path / "junit.xml"
    cases = [
        Case("q1", True, None),
        Case('q2 <"&>', False, "pass→fail: failed: judge said \x07no\x00 <really> & 'truly'"),
        Case(None, False, "errored"),
    ]
    assert write_junit(target, "assay gate", cases, [SuiteFailure("mcnemar", "12 pass→fail")]) == (4, 3)
    root = ET.parse(target).getroot()
    assert (root.get("tests"), root.get("failures")) == ("4", "3")
    by_name = {c.get("name"): c for c in root.iter("testcase")}
    assert set(by_name) == {"q1", 'q2 <"&>', "(no external id)", "mcnemar"}
    assert by_name["q1"].find("failure") is None
    assert by_name['q2 <"&>'].find("failure").get("message") == "pass→fail: failed: judge said no <really> & 'truly'"
    assert by_name["mcnemar"].get("classname") == "assay gate.gate"
