"""JUnit XML, the report every CI reads: one test case per item, a failure with its reason.

Written with the standard library's ElementTree, which escapes text and attributes; characters an XML
1.0 document cannot hold (control characters in an error message) are dropped first."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_ILLEGAL_XML = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")
UNNAMED = "(no external id)"


@dataclass(frozen=True)
class Case:
    name: str | None  # the item's external id (None: it has none)
    passed: bool
    reason: str | None  # why it failed


@dataclass(frozen=True)
class SuiteFailure:
    """A failure of the run as a whole (the gate's rule, the pass rate): a test case of its own."""

    name: str
    message: str


def _text(value: str) -> str:
    return _ILLEGAL_XML.sub("", value)


def write_junit(
    target: Path, suite_name: str, cases: Iterable[Case], overall: Iterable[SuiteFailure] = ()
) -> tuple[int, int]:
    """Write the report to ``target``; returns (test cases, failures)."""
    suite = ET.Element("testsuite", name=_text(suite_name))
    tests = failures = 0
    for case in cases:
        tests += 1
        element = ET.SubElement(suite, "testcase", classname=_text(suite_name), name=_text(case.name or UNNAMED))
        if not case.passed:
            failures += 1
            message = _text(case.reason or "failed")
            ET.SubElement(element, "failure", message=message).text = message
    for failure in overall:
        tests += 1
        failures += 1
        element = ET.SubElement(suite, "testcase", classname=_text(suite_name) + ".gate", name=_text(failure.name))
        ET.SubElement(element, "failure", message=_text(failure.message)).text = _text(failure.message)
    suite.set("tests", str(tests))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    root = ET.Element("testsuites", tests=str(tests), failures=str(failures))
    root.append(suite)
    ET.indent(root)
    ET.ElementTree(root).write(target, encoding="utf-8", xml_declaration=True)
    return tests, failures
