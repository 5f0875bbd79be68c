"""``common.started``, what ``assay rescore`` and ``assay calibrate`` print once the API answered: the
estimate and what was created on stderr, the new id alone on stdout (scripts read it), or with
``--json`` the answer alone on stdout; and whether to go on and wait."""

from __future__ import annotations

import json

import pytest

from assay.cli.common import started

ESTIMATE = {"items": 2, "judge_calls": 4, "input_tokens": 900, "output_tokens": 80, "output_basis": "history", "cost_usd": 0.5, "lane": "realtime", "notes": ["one note"]}
ANSWER = {"estimate": ESTIMATE, "batch_id": "b-1"}


def run(capsys, created_id, **flags):  # type: ignore[no-untyped-def]
    go_on = started(ANSWER, 0.25, created_id, created=f"batch {created_id}", nothing="nothing to do", **flags)
    captured = capsys.readouterr()
    return go_on, captured.out, captured.err


@pytest.mark.parametrize("as_json", [False, True])
def test_nothing_created_never_waits(capsys, as_json):
    go_on, out, err = run(capsys, None, as_json=as_json, wait=True)
    assert go_on is False
    assert "estimate: 2 item(s), 4 judge call(s)" in err and "one note" in err and "nothing to do" in err
    assert "exceeds the $0.2500 budget" in err
    assert (json.loads(out) == ANSWER) if as_json else out == ""


def test_created_prints_the_id_alone_on_stdout_and_waits_when_asked(capsys):
    go_on, out, err = run(capsys, "b-1", as_json=False, wait=True)
    assert (go_on, out) == (True, "b-1\n") and "batch b-1" in err
    go_on, out, _ = run(capsys, "b-1", as_json=False, wait=False)
    assert (go_on, out) == (False, "b-1\n")


def test_with_json_the_answer_is_printed_unless_the_caller_waits_for_more(capsys):
    go_on, out, _ = run(capsys, "b-1", as_json=True, wait=False)
    assert go_on is False and json.loads(out) == ANSWER
    go_on, out, _ = run(capsys, "b-1", as_json=True, wait=True)
    assert (go_on, out) == (True, "")  # the caller prints the answer with what it waited for
