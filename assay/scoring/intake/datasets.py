"""Datasets: named tables (KQL tables, pandas frames) that items refer to, stored once by content hash.

A table keeps its original bytes and format (CSV, Parquet or JSON records), so a metric loads it
with its types intact. The content hash is SHA-256 over the canonical JSON of each table's name,
format and byte digest: the same tables always hash the same, whatever order they came in.
Items name a dataset by hash or by name; ingest resolves the reference to the hash, which becomes
part of the item's content hash.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from assay.scoring.errors import InvalidInput, NotFound, PayloadTooLarge
from assay.scoring.hashcache import HashCache
from assay.scoring.store.models import Dataset, utcnow
from assay.scoring.suites.loader import canonical_json

FORMATS = ("csv", "parquet", "json")
TABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
HASH = re.compile(r"^[0-9a-f]{64}$")
log = logging.getLogger(__name__)
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # fixed, so the stored archive is byte-identical for equal content


@dataclass(frozen=True)
class Table:
    name: str
    format: str
    data: bytes

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


def table_from_records(name: str, records: Any) -> Table:
    """Inline rows (a list of objects) become a JSON-records table."""
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise InvalidInput(f"table {name!r}: inline rows must be a list of objects")
    return make_table(name, "json", json.dumps(records, sort_keys=True, separators=(",", ":")).encode())


def make_table(name: str, fmt: str, data: bytes) -> Table:
    if not TABLE_NAME.match(name):
        raise InvalidInput(f"table name {name!r} must be an identifier (letters, digits, underscore)")
    if fmt not in FORMATS:
        raise InvalidInput(f"table {name!r}: format {fmt!r} is not one of {', '.join(FORMATS)}")
    table = Table(name, fmt, data)
    describe_table(table)  # refuse what cannot be read now, not when a metric needs it
    return table


def format_from_filename(filename: str) -> str:
    suffix = Path(filename).suffix.lower().lstrip(".")
    fmt = {"csv": "csv", "parquet": "parquet", "pq": "parquet", "json": "json"}.get(suffix)
    if fmt is None:
        raise InvalidInput(f"{filename!r}: a table file ends in .csv, .parquet or .json")
    return fmt


def tables_from_path(data_dir: Path, relative: str, *, max_bytes: int | None = None) -> list[Table]:
    """Tables from a file or a folder of files inside the configured data directory. Every file's
    resolved path must lie inside it too: a link to a file elsewhere is refused, never followed.
    Messages name paths relative to the directory, never where it is on the server."""
    root = data_dir.resolve()
    try:
        files = _files_inside(root, relative)
        size = sum(path.stat().st_size for _, path in files)
    except (OSError, ValueError, RuntimeError) as exc:  # a NUL, a name too long, a link loop
        log.warning("dataset path %.200r under %s cannot be used: %.300s", relative, root, exc)
        raise InvalidInput(f"path {relative!r} cannot be read in the data directory") from None
    if not files:
        raise InvalidInput(f"{relative!r} holds no table file")
    if max_bytes is not None and size > max_bytes:
        raise PayloadTooLarge(
            f"the files under {relative!r} hold {size} bytes; the limit is {max_bytes} (ASSAY_MAX_DATASET_BYTES)",
            limit_bytes=max_bytes,
        )
    return [make_table(Path(shown).stem, format_from_filename(shown), _read_inside(shown, path)) for shown, path in files]


def _files_inside(root: Path, relative: str) -> list[tuple[str, Path]]:
    """(the name shown to the user, the resolved path) of each table file ``relative`` names."""
    target = (root / relative).resolve()
    if not target.is_relative_to(root):
        raise InvalidInput(f"path {relative!r} is outside the data directory")
    if not target.exists():
        raise NotFound(f"no file or folder {relative!r} in the data directory")
    entries = sorted(target.iterdir()) if target.is_dir() else [target]
    files = []
    for entry in entries:
        if entry.name.startswith("."):
            continue
        shown = str(entry.relative_to(root))
        resolved = entry.resolve()
        if not resolved.is_relative_to(root):
            raise InvalidInput(f"{shown!r} links outside the data directory; only files inside it are read")
        if resolved.is_file():
            files.append((shown, resolved))
    return files


def _read_inside(shown: str, path: Path) -> bytes:
    """A file's bytes, opened without following a link that replaced it since it was checked."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as handle:
            return handle.read()
    except OSError as exc:
        log.warning("dataset file %s cannot be read: %s", path, exc)
        raise InvalidInput(f"{shown!r} in the data directory cannot be read") from None


def _connect():  # type: ignore[no-untyped-def]
    import duckdb

    return duckdb.connect(":memory:")


def load_relation(con: Any, table: Table) -> Any:
    """Register ``table`` in a DuckDB connection under its name, with types as its file states them."""
    suffix = {"csv": ".csv", "parquet": ".parquet", "json": ".json"}[table.format]
    import tempfile

    # DuckDB's readers take paths; the bytes go through a private temp file.
    with tempfile.NamedTemporaryFile(suffix=suffix, delete=False) as handle:
        handle.write(table.data)
        path = handle.name
    try:
        reader = {"csv": "read_csv_auto", "parquet": "read_parquet", "json": "read_json_auto"}[table.format]
        con.execute(f'CREATE OR REPLACE TABLE "{table.name}" AS SELECT * FROM {reader}(?)', [path])
    except Exception as exc:
        # DuckDB names the file it read: name the table's file, not the server's scratch path.
        exc.args = tuple(a.replace(path, f"{table.name}.{table.format}") if isinstance(a, str) else a for a in exc.args)
        raise
    finally:
        Path(path).unlink(missing_ok=True)


def _reason(exc: Exception) -> str:
    """DuckDB's reason: its first paragraph (what follows is hints, the reader's options and the
    statement it ran)."""
    first = str(exc).strip().split("\n\n", 1)[0]
    return " ".join(first.split())[:500] or type(exc).__name__


def describe_table(table: Table) -> dict[str, Any]:
    con = _connect()
    try:
        try:
            load_relation(con, table)
        except Exception as exc:  # duckdb raises many kinds; all mean "this is not a readable table"
            raise InvalidInput(
                f"table {table.name!r} is not readable as {table.format}: {_reason(exc)}"
            ) from None
        columns = [(r[0], r[1]) for r in con.execute(f'DESCRIBE "{table.name}"').fetchall()]
        rows = con.execute(f'SELECT count(*) FROM "{table.name}"').fetchone()[0]
    finally:
        con.close()
    return {"format": table.format, "columns": [{"name": n, "type": t} for n, t in columns], "rows": rows, "sha256": table.digest}


def content_hash(tables: list[Table]) -> str:
    spec = {t.name: {"format": t.format, "sha256": t.digest} for t in tables}
    return hashlib.sha256(canonical_json(spec).encode()).hexdigest()


def _pack(tables: list[Table]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for table in sorted(tables, key=lambda t: t.name):
            archive.writestr(zipfile.ZipInfo(f"{table.name}.{table.format}", date_time=_ZIP_TIME), table.data)
    return buf.getvalue()


def _unpack(content: bytes) -> dict[str, Table]:
    tables = {}
    with zipfile.ZipFile(io.BytesIO(content)) as archive:
        for info in archive.infolist():
            name, fmt = info.filename.rsplit(".", 1)
            tables[name] = Table(name, fmt, archive.read(info))
    return tables


def register(session: Session, tables: list[Table], *, name: str | None, max_bytes: int) -> tuple[Dataset, bool]:
    """Store the tables once. Returns the dataset and whether it was new."""
    if not tables:
        raise InvalidInput("a dataset needs at least one table")
    names = [t.name for t in tables]
    if len(set(names)) != len(names):
        raise InvalidInput(f"table names repeat: {sorted(names)}")
    size = sum(len(t.data) for t in tables)
    if size > max_bytes:
        raise PayloadTooLarge(
            f"dataset is {size} bytes; the limit is {max_bytes} (ASSAY_MAX_DATASET_BYTES)", limit_bytes=max_bytes
        )
    digest = content_hash(tables)
    existing = session.get(Dataset, digest)
    if existing is not None:
        if name and existing.name != name:
            existing.name = name  # the newest name wins; the content (and hash) is the same
        return existing, False
    dataset = Dataset(
        content_hash=digest,
        name=name,
        tables={t.name: describe_table(t) for t in tables},
        content=_pack(tables),
        size_bytes=size,
        created_at=utcnow(),
    )
    session.add(dataset)
    session.flush()
    return dataset, True


def resolve(session: Session, reference: str) -> Dataset:
    """A dataset by content hash, or by name (the newest registered under it)."""
    if HASH.match(reference):
        found = session.get(Dataset, reference)
    else:
        found = session.scalar(
            select(Dataset).where(Dataset.name == reference).order_by(Dataset.created_at.desc()).limit(1)
        )
    if found is None:
        raise NotFound(f"no dataset {reference!r}; register it first (POST /api/v1/datasets)")
    return found


_tables_cache: HashCache[dict[str, Table]] = HashCache(max_entries=32)


def load_tables(session: Session, content_hash_: str) -> dict[str, Table]:
    """A dataset's tables by hash, cached per process."""

    def load() -> dict[str, Table]:
        dataset = session.get(Dataset, content_hash_)
        if dataset is None:
            raise NotFound(f"no dataset with hash {content_hash_}")
        return _unpack(dataset.content)

    return _tables_cache.get(content_hash_, load)


def dataset_view(dataset: Dataset) -> dict[str, Any]:
    from assay.scoring.reports.views import iso

    return {
        "content_hash": dataset.content_hash,
        "name": dataset.name,
        "tables": dataset.tables,
        "size_bytes": dataset.size_bytes,
        "created_at": iso(dataset.created_at),
    }
