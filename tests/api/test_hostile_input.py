"""Hostile input at the API's edge: answered with a 4xx that says what is wrong, never a 5xx."""

from __future__ import annotations

import json
import time

import pytest
from sqlalchemy import func, select

from assay.scoring.store.db import transaction
from assay.scoring.store.models import Batch, Item, Score


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/batches?suite=kql%00",
        "/api/v1/sessions?status=completed%00",
        "/api/v1/criteria/diff?from=abc%00&to=def",
        "/api/v1/datasets/name%00",
    ],
)
def test_nul_in_the_url_is_refused(api_client, path):
    r = api_client.get(path)
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "invalid_request" and "NUL" in r.json()["message"]


def test_nul_in_a_json_suite_name_is_a_422(api_client):
    r = api_client.post("/api/v1/rescore", json={"suite": "kql\u0000", "dry_run": True})
    assert r.status_code == 422, r.text


# --- batch uploads: POST /api/v1/batches?suite=kql ----------------------------------------------------
#
# A rejected upload is a 422 (bad lines: each named by its line, or by its item's index in a JSON
# array, with the reason) or a 413 (over a limit), and writes nothing: no batch, no item, no score.

GOOD = {
    "prompt": "Count traces by level",
    "generated_kql": "Traces | summarize count() by level",
    "expected_kql": "Traces | summarize count() by level",
}
G = json.dumps(GOOD).encode()
NON_FINITE_REASON = "NaN, Infinity or a number past the float range is not valid JSON"


def with_field(name: str, raw_value: bytes) -> bytes:
    """GOOD with one more field whose JSON value is given as raw bytes (possibly not JSON at all)."""
    return G[:-1] + b', "' + name.encode() + b'": ' + raw_value + b"}"


def with_rows(raw_value: bytes) -> bytes:
    return with_field("generated_results", b'[{"a": ' + raw_value + b"}]")


def lines(*rows: bytes, end: bytes = b"\n") -> bytes:
    return b"".join(row + end for row in rows)


@pytest.fixture
def upload(api_client, monkeypatch):
    """POST a body; the planner hand-off is recorded, not sent (no worker here)."""
    monkeypatch.setattr("assay.api.routes.batches.start_planner", lambda batch_id: None)

    def post(body, **params):
        return api_client.post("/api/v1/batches", params={"suite": "kql", **params}, content=body)

    return post


def listed_batches(api_client) -> list[str]:
    r = api_client.get("/api/v1/batches")
    assert r.status_code == 200, r.text
    return [b["batch_id"] for b in r.json()["batches"]]


def assert_nothing_written(api_client) -> None:
    assert listed_batches(api_client) == []
    with transaction() as s:
        assert s.scalar(select(func.count()).select_from(Batch)) == 0
        assert s.scalar(select(func.count()).select_from(Item)) == 0
        assert s.scalar(select(func.count()).select_from(Score)) == 0


def bad_lines(r) -> dict[int, str]:
    """The 422's bad lines as {line: reason}, after checking the error's shape."""
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["error"] == "invalid_input", body
    assert "nothing was written" in body["message"]
    listed = body["details"]["bad_lines"]
    assert body["details"]["bad_line_count"] == len(listed)
    found = {b["line"]: b["reason"] for b in listed}
    assert len(found) == len(listed), "a line reported twice"
    return found


def rejected_body(r) -> str:
    """The message of a 422 that rejects the body as a whole (no single line to name)."""
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "invalid_input"
    return r.json()["message"]


def stored(batch_id: str) -> dict[int, dict]:
    """The payloads a batch stored, by position (its line number, or its index in a JSON array)."""
    with transaction() as s:
        rows = s.execute(
            select(Score.position, Item.payload).join(Item, Item.id == Score.item_id).where(Score.batch_id == batch_id)
        ).all()
    return {position: payload for position, payload in rows}


def accepted(r, count: int) -> str:
    assert r.status_code == 202, r.text
    assert r.json()["accepted"] == count and r.json()["rejected"] == 0, r.json()
    return r.json()["batch_id"]


# Truncated JSON, and lines that are JSON but not an object.


def test_a_truncated_line_is_named_and_nothing_is_written(upload, api_client):
    r = upload(lines(G, G[:30], G) + G[:-1])  # line 2 cut mid-string, line 4 (the last, no newline) cut at its end
    found = bad_lines(r)
    assert set(found) == {2, 4}
    assert found[2].startswith("invalid JSON: EOF while parsing a string")
    assert found[4].startswith("invalid JSON: EOF while parsing an object")
    assert_nothing_written(api_client)


@pytest.mark.parametrize("line", [b'"just a string"', b"[1, 2, 3]", b"42", b"-1.5e3", b"null", b"true", b"[]"])
def test_a_line_that_is_json_but_not_an_object_is_named(upload, api_client, line):
    found = bad_lines(upload(lines(G, line, G)))
    assert found == {2: "Input should be an object"}
    assert_nothing_written(api_client)


# Bytes that are not UTF-8, byte order marks, line endings, blank lines.


@pytest.mark.parametrize(
    "raw",
    [
        b"\xff\xfe",  # never valid in UTF-8
        b"\xc0\xaf",  # an overlong encoding of '/'
        b"\xed\xa0\x80",  # a UTF-16 surrogate encoded as UTF-8 (CESU-8)
        b"\xe2\x82",  # a three-byte sequence cut short
        b"\xf4\x90\x80\x80",  # past U+10FFFF
    ],
)
@pytest.mark.parametrize("shape", ["jsonl", "array"])
def test_invalid_utf8_is_a_bad_line(upload, api_client, raw, shape):
    item = with_field("id", b'"x' + raw + b'y"')
    found = bad_lines(upload(lines(G, item, G) if shape == "jsonl" else b"[" + b",".join([G, item, G]) + b"]"))
    assert set(found) == {2}
    assert found[2].startswith("invalid JSON: invalid unicode code point")
    assert_nothing_written(api_client)


def test_a_leading_byte_order_mark_is_ignored(upload):
    batch_id = accepted(upload(b"\xef\xbb\xbf" + lines(G, G)), 2)
    assert stored(batch_id)[1]["prompt"] == GOOD["prompt"]
    # A JSON array with a byte order mark is still read as an array, not as JSONL.
    batch_id = accepted(upload(b"\xef\xbb\xbf[\n" + G + b",\n" + G + b"\n]\n"), 2)
    assert set(stored(batch_id)) == {1, 2}


def test_a_byte_order_mark_inside_the_body_is_a_bad_line(upload, api_client):
    # Two files concatenated, the second with its own mark: the mark starts line 2.
    found = bad_lines(upload(b"\xef\xbb\xbf" + lines(G) + b"\xef\xbb\xbf" + lines(G, G)))
    assert set(found) == {2} and found[2].startswith("invalid JSON")
    assert_nothing_written(api_client)


def test_crlf_line_endings_are_read_and_line_numbers_stay_true(upload, api_client):
    batch_id = accepted(upload(lines(G, G, G, end=b"\r\n")), 3)
    assert set(stored(batch_id)) == {1, 2, 3}
    # Mixed endings and CRLF blank lines: the bad line keeps its true number.
    body = G + b"\r\n" + b"\r\n" + G + b"\n" + b"oops\r\n" + G + b"\r\n"
    assert set(bad_lines(upload(body))) == {4}


def test_cr_only_line_endings_are_one_bad_line(upload, api_client):
    # Classic-Mac endings: no line feed, so the whole body is one line with trailing characters.
    found = bad_lines(upload(lines(G, G, G, end=b"\r")))
    assert set(found) == {1} and found[1].startswith("invalid JSON: trailing characters")
    assert_nothing_written(api_client)


def test_blank_lines_are_skipped_and_counted(upload, api_client):
    body = b"\n\n" + lines(G) + b" \t \n\r\n" + lines(G) + b"\n" + lines(b"{bad") + b"\n\n\n"
    found = bad_lines(upload(body))
    assert set(found) == {8}  # lines 1-2, 4-5 and 7 are blank; the bad one is the eighth
    # The same without the bad line lands both items at their true positions.
    batch_id = accepted(upload(body.replace(b"{bad", b"")), 2)
    assert set(stored(batch_id)) == {3, 6}


def test_an_upload_of_only_blank_lines_holds_no_item(upload, api_client):
    r = upload(b"\n \r\n\t\n" * 50)
    assert r.status_code == 422 and r.json()["message"] == "the upload holds no valid item"
    assert_nothing_written(api_client)


# Limits: one line over ASSAY_MAX_ITEM_BYTES, a body over ASSAY_MAX_UPLOAD_BYTES.


@pytest.fixture
def small_limits(monkeypatch):
    """Small limits on the in-process API's settings, and small feeds so one line spans several."""
    from assay.settings import get_settings

    monkeypatch.setattr(get_settings(), "max_item_bytes", 2000)
    monkeypatch.setattr(get_settings(), "max_upload_bytes", 50_000)
    monkeypatch.setattr("assay.api.routes.batches.FEED_BYTES", 256)


def chunked(body: bytes, size: int = 100):
    """The body streamed in small chunks, with no Content-Length: limits are enforced while reading."""
    return iter([body[i : i + size] for i in range(0, len(body), size)])


def test_an_oversize_line_is_named_while_streaming_and_later_numbers_stay_true(upload, api_client, small_limits):
    big = json.dumps({**GOOD, "prompt": "x" * 7000}).encode()
    body = lines(G, big, G, b"{oops", G, big)[:-1]  # the last oversize line ends the body without a newline
    found = bad_lines(upload(chunked(body)))
    assert found == {2: "line longer than 2000 bytes", 4: found[4], 6: "line longer than 2000 bytes"}
    assert found[4].startswith("invalid JSON")
    assert_nothing_written(api_client)

    r = upload(chunked(body), partial="true")
    assert r.status_code == 202, r.text
    assert r.json()["accepted"] == 3 and r.json()["rejected"] == 3
    assert [b["line"] for b in r.json()["bad_lines"]] == [2, 4, 6]
    assert set(stored(r.json()["batch_id"])) == {1, 3, 5}


def test_a_line_exactly_at_the_limit_is_kept(upload, small_limits):
    exact = json.dumps({**GOOD, "prompt": ""}).encode()
    exact = json.dumps({**GOOD, "prompt": "y" * (2000 - len(exact))}).encode()
    assert len(exact) == 2000
    batch_id = accepted(upload(chunked(lines(exact, G))), 2)
    assert len(stored(batch_id)[1]["prompt"]) == 2000 - len(json.dumps({**GOOD, "prompt": ""}))


def test_an_oversize_item_in_a_json_array_is_named_by_its_index(upload, api_client, small_limits):
    big = json.dumps({**GOOD, "prompt": "x" * 7000}).encode()
    found = bad_lines(upload(b"[" + b",".join([G, big, G]) + b"]"))
    assert found == {2: "item longer than 2000 bytes"}
    assert_nothing_written(api_client)


@pytest.mark.parametrize("shape", ["jsonl", "array"])
@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "streamed"])
def test_a_body_over_the_upload_limit_is_a_413(upload, api_client, small_limits, shape, declared):
    items = [G] * 400
    body = lines(*items) if shape == "jsonl" else b"[" + b",".join(items) + b"]"
    assert len(body) > 50_000
    r = upload(body if declared else chunked(body, 4096))
    assert r.status_code == 413, r.text
    assert r.json() == {
        "error": "payload_too_large",
        "message": "the request body is larger than this route's limit of 50000 bytes (ASSAY_MAX_UPLOAD_BYTES)",
        "details": {"limit_bytes": 50_000, "setting": "ASSAY_MAX_UPLOAD_BYTES"},
    }
    assert_nothing_written(api_client)


def test_bad_lines_past_the_report_cap_are_counted_not_listed(upload, api_client, monkeypatch):
    from assay.settings import get_settings

    monkeypatch.setattr(get_settings(), "max_reported_bad_lines", 5)
    r = upload(lines(G, *[b"{nope"] * 40, G))
    assert r.status_code == 422
    details = r.json()["details"]
    assert details["bad_line_count"] == 40 and r.json()["message"].startswith("40 bad line(s)")
    assert [b["line"] for b in details["bad_lines"]] == [2, 3, 4, 5, 6]
    assert_nothing_written(api_client)


# Deep nesting: a 4xx with a reason, never a RecursionError (a 500), and quickly.

DEEP = 100_000


@pytest.mark.parametrize(
    "line",
    [
        with_field("generated_results", b"[" * DEEP + b"]" * DEEP),  # balanced, in a field
        with_rows(b"[" * DEEP + b"]" * DEEP),  # inside a row's value
        with_rows(b'{"k": ' * DEEP + b"1" + b"}" * DEEP),  # objects
        b'{"prompt": ' + b"[" * DEEP,  # never closed
    ],
    ids=["arrays-in-field", "arrays-in-row", "objects-in-row", "unclosed"],
)
def test_deep_nesting_in_a_line_is_a_bad_line(upload, api_client, line):
    started = time.monotonic()
    found = bad_lines(upload(lines(G, line, G)))
    assert time.monotonic() - started < 20
    assert set(found) == {2} and found[2].startswith("invalid JSON: recursion limit exceeded")
    assert_nothing_written(api_client)


def test_deep_nesting_in_a_json_array_is_a_bad_item_as_in_a_line(upload, api_client):
    # The array is split into items without recursing, and each item meets the parser a line meets.
    started = time.monotonic()
    found = bad_lines(upload(b"[" + G + b"," + with_field("generated_results", b"[" * DEEP + b"]" * DEEP) + b"]"))
    assert time.monotonic() - started < 20
    assert set(found) == {2} and found[2].startswith("invalid JSON: recursion limit exceeded")
    assert_nothing_written(api_client)


def test_moderate_nesting_in_a_json_array_is_a_bad_item(upload, api_client):
    # Deep enough for the item parser's limit, shallow enough for the array parser: the item is named.
    found = bad_lines(upload(b"[" + G + b"," + with_rows(b"[" * 500 + b"]" * 500) + b"]"))
    assert set(found) == {2} and found[2].startswith("invalid JSON: recursion limit exceeded")
    assert_nothing_written(api_client)


# Numbers: NaN and Infinity are not JSON, nor is a float past the double range; big integers are.


@pytest.mark.parametrize(
    "raw",
    [b"NaN", b"Infinity", b"-Infinity", b"1e999", b"-1.5E+400", b"1" + b"0" * 400 + b".5", b"1" + b"0" * 250 + b"e60"],
    ids=["NaN", "Infinity", "-Infinity", "1e999", "-1.5E+400", "401-digit-float", "251-digits-e60"],
)
@pytest.mark.parametrize("shape", ["jsonl", "array"])
def test_non_finite_numbers_are_refused_not_stored_as_null(upload, api_client, raw, shape):
    item = with_rows(raw)
    body = lines(G, item, G) if shape == "jsonl" else b"[" + b",".join([G, item, G]) + b"]"
    assert bad_lines(upload(body)) == {2: NON_FINITE_REASON}
    assert_nothing_written(api_client)


def test_non_finite_numbers_in_a_string_are_only_text(upload):
    text = "NaN Infinity 1e999 " + "9" * 400
    batch_id = accepted(upload(lines(G, json.dumps({**GOOD, "prompt": text}).encode())), 2)
    assert stored(batch_id)[2]["prompt"] == text


def test_large_but_finite_numbers_round_trip_exactly(upload):
    big_int = int("1" + "0" * 400)
    row = with_rows(b"1e308, " + b'"b": 1e-400, "c": -0.0, "d": 123456789012345678901234567890, "e": ' + str(big_int).encode())
    batch_id = accepted(upload(lines(row)), 1)
    [values] = stored(batch_id)[1]["generated_results"]
    # JSONB keeps numbers as decimals: 1e308 comes back as the integer it denotes, -0.0 as 0.
    assert {k: float(values[k]) for k in "abc"} == {"a": 1e308, "b": 0.0, "c": 0.0}
    assert values["d"] == 123456789012345678901234567890 and values["e"] == big_int


def test_an_integer_past_the_digit_limit_is_refused(upload, api_client):
    huge = b"1" + b"0" * 5000
    found = bad_lines(upload(lines(G, with_rows(huge))))
    assert set(found) == {2} and found[2].startswith("invalid JSON: number out of range")
    # In a JSON array the item is named the same way (it used to be a 500, then the whole body).
    found = bad_lines(upload(b"[" + G + b"," + with_rows(huge) + b"]"))
    assert set(found) == {2} and found[2].startswith("invalid JSON: number out of range")
    assert_nothing_written(api_client)


# Duplicate keys: the last one wins, the same way whichever parser reads the body.


@pytest.mark.parametrize("shape", ["jsonl", "array"])
def test_duplicate_keys_keep_the_last_value(upload, shape):
    item = b'{"prompt": "first", "generated_kql": 5, "prompt": "second", "generated_kql": "T | take 1", "expected_kql": "T"}'
    body = lines(item) if shape == "jsonl" else b"[" + item + b"]"
    payload = stored(accepted(upload(body), 1))[1]
    assert payload["prompt"] == "second" and payload["generated_kql"] == "T | take 1"
    assert json.dumps(payload).count('"prompt"') == 1


# Unicode edge cases.

EDGE_TEXT = (
    "\u202eevil\u202c"  # right-to-left override and pop
    "\u200b\u200c\u200d\u2060"  # zero-width space, (non-)joiners, word joiner
    "\ufeff"  # a BOM inside a value is just a character
    "\U0001f600\U0001f468\u200d\U0001f469\u200d\U0001f467"  # emoji, a ZWJ family
    "e\u0301"  # a combining accent
    "\u2028\u2029"  # line and paragraph separators: not line breaks for JSONL
    "\uffff\U0010fffd"  # a noncharacter and the last plane
    "\u05e9\u05dc\u05d5\u05dd"  # Hebrew
    " line\nbreak\ttab"  # escaped in JSON, so still one line
)


@pytest.mark.parametrize("ensure_ascii", [False, True], ids=["raw-utf8", "escaped"])
@pytest.mark.parametrize("shape", ["jsonl", "array"])
def test_unicode_edge_text_round_trips_exactly(upload, ensure_ascii, shape):
    item = {**GOOD, "prompt": EDGE_TEXT, "generated_results": [{EDGE_TEXT: EDGE_TEXT}]}
    raw = json.dumps(item, ensure_ascii=ensure_ascii).encode()
    assert raw.count(b"\n") == 0
    body = lines(G, raw) if shape == "jsonl" else b"[" + G + b"," + raw + b"]"
    payload = stored(accepted(upload(body), 2))[2]
    assert payload["prompt"] == EDGE_TEXT
    assert payload["generated_results"] == [{EDGE_TEXT: EDGE_TEXT}]


@pytest.mark.parametrize(
    "item",
    [
        with_field("id", b'"a\\ud800b"'),  # a lone high surrogate
        with_field("id", b'"a\\ud800"'),  # ... ending the string
        with_field("id", b'"\\udc00"'),  # a lone low surrogate
        with_field("id", b'"\\ud800\\u0041"'),  # a high surrogate followed by a non-surrogate
        with_rows(b'1, "\\udfff": 2'),  # a lone surrogate in a key
    ],
    ids=["high", "high-at-end", "low", "high-then-A", "in-a-key"],
)
@pytest.mark.parametrize("shape", ["jsonl", "array"])
def test_lone_surrogates_are_bad_lines(upload, api_client, item, shape):
    body = lines(G, item, G) if shape == "jsonl" else b"[" + b",".join([G, item, G]) + b"]"
    found = bad_lines(upload(body))
    assert set(found) == {2}
    assert found[2].startswith("invalid JSON: ") and "hex escape" in found[2]
    assert_nothing_written(api_client)


NUL_REASON = "contains a NUL character (\\u0000), which the store cannot hold"


@pytest.mark.parametrize(
    "item",
    [
        with_field("id", b'"a\\u0000b"'),
        with_rows(b'1, "k\\u0000": 2'),  # in a key
        with_rows(b'"\\\\\\u0000"'),  # an escaped backslash, then a NUL
    ],
    ids=["value", "key", "after-escaped-backslash"],
)
@pytest.mark.parametrize("shape", ["jsonl", "array"])
def test_nul_escapes_are_bad_lines(upload, api_client, item, shape):
    body = lines(G, item) if shape == "jsonl" else b"[" + G + b"," + item + b"]"
    assert bad_lines(upload(body)) == {2: NUL_REASON}
    assert_nothing_written(api_client)


def test_a_raw_nul_byte_is_a_bad_line(upload, api_client):
    found = bad_lines(upload(lines(G, with_field("id", b'"a\x00b"'))))
    assert set(found) == {2} and found[2].startswith("invalid JSON: control character")
    assert_nothing_written(api_client)


def test_the_text_backslash_u0000_is_not_a_nul(upload):
    # "\\u0000" in JSON is a backslash followed by "u0000": six harmless characters.
    batch_id = accepted(upload(lines(with_field("id", b'"a\\\\u0000b"'))), 1)
    assert stored(batch_id)[1]["id"] == "a\\u0000b"


# A JSON array body: whole-body failures, and items that are not objects.


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"[" + G + b"," + G[:20], "the body is not a valid JSON array: the body ended inside item 2 at line 1 column 169"),
        (b"[" + G, "the body is not a valid JSON array: the body ended before the array's closing ']' at line 1 column 148"),
        (b"[" + G + b"] [" + G + b"]", "the body is not a valid JSON array: unexpected '[' after the array's closing ']' at line 1 column 150"),
        # JSONL starting with an array
        (b"[1, 2]\n" + G + b"\n", "the body is not a valid JSON array: unexpected '{' after the array's closing ']' at line 2 column 1"),
        (b"[" + G + b",]", "the body is not a valid JSON array: expected an item, found ']' at line 1 column 149"),
        (b"[" + G + b"\n " + G + b"]", "the body is not a valid JSON array: expected ',' or ']' after item 1, found '{' at line 2 column 2"),
    ],
    ids=["truncated", "unclosed", "two-arrays", "jsonl-led-by-an-array", "trailing-comma", "missing-comma"],
)
def test_a_json_array_body_that_cannot_be_parsed_is_refused_whole(upload, api_client, body, message):
    assert rejected_body(upload(body)).startswith(message)
    assert_nothing_written(api_client)


def test_json_array_items_that_are_not_objects_are_named_by_index(upload, api_client):
    found = bad_lines(upload(b"[" + G + b', "text", 3, null, [1], true, ' + G + b"]"))
    assert found == dict.fromkeys([2, 3, 4, 5, 6], "Input should be an object")
    assert_nothing_written(api_client)


def test_an_empty_json_array_holds_no_item(upload, api_client):
    r = upload(b"  [ ]  ")
    assert r.status_code == 422 and r.json()["message"] == "the upload holds no valid item"
    assert_nothing_written(api_client)


# partial=true: every bad line reported with its number, every good one lands at its position.


def test_partial_lands_the_good_lines_and_names_every_bad_one(upload, api_client):
    unicode_item = json.dumps({**GOOD, "prompt": EDGE_TEXT}, ensure_ascii=False).encode()
    rows = [
        G,  # 1
        G[:25],  # 2 truncated
        b'"a string"',  # 3
        b"",  # 4 blank
        unicode_item,  # 5
        with_rows(b"NaN"),  # 6
        with_field("id", b'"\\u0000"'),  # 7
        with_field("generated_results", b"[" * DEEP + b"]" * DEEP),  # 8
        with_field("id", b'"\xff"'),  # 9
        with_field("id", b'"\\ud800"'),  # 10
        b'{"prompt": "p"}',  # 11 missing fields
        b'{"prompt": "dup", "prompt": "last", "generated_kql": "T", "expected_kql": "T"}',  # 12
    ]
    body = b"\xef\xbb\xbf" + b"".join(row + (b"\r\n" if i % 2 else b"\n") for i, row in enumerate(rows))
    r = upload(body, partial="true")
    assert r.status_code == 202, r.text
    out = r.json()
    assert out["accepted"] == 3 and out["rejected"] == 8
    reasons = {b["line"]: b["reason"] for b in out["bad_lines"]}
    assert sorted(reasons) == [2, 3, 6, 7, 8, 9, 10, 11]
    assert reasons[2].startswith("invalid JSON: ")  # cut mid-string: the CR is a control character in it
    assert reasons[3] == "Input should be an object"
    assert reasons[6] == NON_FINITE_REASON
    assert reasons[7] == NUL_REASON
    assert reasons[8].startswith("invalid JSON: recursion limit exceeded")
    assert reasons[9].startswith("invalid JSON: invalid unicode code point")
    assert "hex escape" in reasons[10]
    assert "generated_kql" in reasons[11] and "Field required" in reasons[11]

    payloads = stored(out["batch_id"])
    assert set(payloads) == {1, 5, 12}
    assert payloads[5]["prompt"] == EDGE_TEXT and payloads[12]["prompt"] == "last"
    batch = api_client.get(f"/api/v1/batches/{out['batch_id']}").json()
    assert batch["total_items"] == 3 and batch["summary"]["rejected_lines"] == 8
    assert listed_batches(api_client) == [out["batch_id"]]


def test_partial_with_no_good_line_writes_nothing(upload, api_client):
    r = upload(lines(G[:10], b"[1]", with_rows(b"NaN")), partial="true")
    assert r.status_code == 422 and r.json()["message"] == "the upload holds no valid item"
    assert [b["line"] for b in r.json()["details"]["bad_lines"]] == [1, 2, 3]
    assert_nothing_written(api_client)
