"""Datasets: registered once by content hash; file paths only inside the data directory."""

import duckdb

ROWS = [{"State": "TEXAS", "EventType": "Hail", "Damage": 10}, {"State": "KANSAS", "EventType": "Tornado", "Damage": 99}]


def test_inline_dataset_is_content_hashed_and_registered_once(api_client):
    r = api_client.post("/api/v1/datasets", json={"name": "storms", "tables": {"StormEvents": ROWS}})
    assert r.status_code == 201, r.text
    body = r.json()
    assert len(body["content_hash"]) == 64 and body["created"] is True
    table = body["tables"]["StormEvents"]
    assert table["rows"] == 2 and [c["name"] for c in table["columns"]] == ["Damage", "EventType", "State"]
    again = api_client.post("/api/v1/datasets", json={"name": "storms", "tables": {"StormEvents": ROWS}})
    assert again.status_code == 200 and again.json()["created"] is False
    assert again.json()["content_hash"] == body["content_hash"]
    by_name = api_client.get("/api/v1/datasets/storms").json()
    assert by_name["content_hash"] == body["content_hash"]
    assert api_client.get(f"/api/v1/datasets/{body['content_hash']}").status_code == 200
    assert [d["content_hash"] for d in api_client.get("/api/v1/datasets").json()["datasets"]] == [body["content_hash"]]


def test_different_content_gets_a_different_hash(api_client):
    a = api_client.post("/api/v1/datasets", json={"tables": {"T": ROWS}}).json()["content_hash"]
    b = api_client.post("/api/v1/datasets", json={"tables": {"T": ROWS[:1]}}).json()["content_hash"]
    c = api_client.post("/api/v1/datasets", json={"tables": {"U": ROWS}}).json()["content_hash"]
    assert len({a, b, c}) == 3


def test_csv_and_parquet_uploads_keep_types(api_client, tmp_path):
    parquet = tmp_path / "Events.parquet"
    con = duckdb.connect()
    con.execute(f"COPY (SELECT TIMESTAMP '2026-11-01 10:00:00' AS StartTime, 42 AS Damage) TO '{parquet}' (FORMAT parquet)")
    con.close()
    files = [
        ("files", ("Storms.csv", b"State,Damage\nTEXAS,10\nKANSAS,99\n", "text/csv")),
        ("files", ("Events.parquet", parquet.read_bytes(), "application/octet-stream")),
    ]
    r = api_client.post("/api/v1/datasets/files", files=files, data={"name": "mixed"})
    assert r.status_code == 201, r.text
    tables = r.json()["tables"]
    assert tables["Storms"]["format"] == "csv" and tables["Storms"]["rows"] == 2
    types = {c["name"]: c["type"] for c in tables["Events"]["columns"]}
    assert types["StartTime"].startswith("TIMESTAMP")


def test_bad_table_file_is_a_clear_422(api_client):
    r = api_client.post("/api/v1/datasets/files", files=[("files", ("x.xlsx", b"PK..", "application/octet-stream"))])
    assert r.status_code == 422 and ".csv, .parquet or .json" in r.json()["message"]
    r = api_client.post("/api/v1/datasets/files", files=[("files", ("bad.parquet", b"not parquet", "application/octet-stream"))])
    assert r.status_code == 422 and "not readable as parquet" in r.json()["message"]
    r = api_client.post("/api/v1/datasets", json={"tables": {"bad name!": ROWS}})
    assert r.status_code == 422
    r = api_client.post("/api/v1/datasets", json={"tables": {"T": ROWS}, "path": "x"})
    assert r.status_code == 422


def test_paths_only_inside_the_data_directory(api_client, tmp_path, monkeypatch):
    from assay.settings import get_settings

    data_dir = tmp_path / "data"
    (data_dir / "storm").mkdir(parents=True)
    (data_dir / "storm" / "StormEvents.csv").write_text("State,Damage\nTEXAS,10\n")
    (tmp_path / "secret.csv").write_text("a\n1\n")
    monkeypatch.setattr(get_settings(), "data_dir", data_dir)
    r = api_client.post("/api/v1/datasets", json={"path": "storm"})
    assert r.status_code == 201 and set(r.json()["tables"]) == {"StormEvents"}
    for escape in ["../secret.csv", str(tmp_path / "secret.csv"), "storm/../../secret.csv"]:
        r = api_client.post("/api/v1/datasets", json={"path": escape})
        assert r.status_code == 422 and "outside the data directory" in r.json()["message"], escape
    assert api_client.post("/api/v1/datasets", json={"path": "missing"}).status_code == 404


def test_oversize_dataset_is_413(api_client, monkeypatch):
    from assay.settings import get_settings

    monkeypatch.setattr(get_settings(), "max_dataset_bytes", 100)
    r = api_client.post("/api/v1/datasets", json={"tables": {"T": ROWS * 10}})
    assert r.status_code == 413


def test_unknown_dataset_is_404(api_client):
    assert api_client.get("/api/v1/datasets/nope").status_code == 404
