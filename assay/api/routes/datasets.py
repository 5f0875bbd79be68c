"""Datasets: register tables once (inline rows, uploaded CSV / Parquet / JSON files, or a path inside
the data directory); items then name them by hash or name."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, File, Form, Response, UploadFile
from pydantic import BaseModel, Field, model_validator

from assay.api.auth import Principal, require_principal
from assay.api.body_limit import body_limit
from assay.api.json_body import StrictJsonRoute
from assay.scoring.errors import InvalidInput
from assay.scoring.intake import datasets as svc
from assay.scoring.store.db import transaction
from assay.scoring.store.models import Dataset
from assay.settings import get_settings

router = APIRouter(prefix="/api/v1/datasets", tags=["datasets"], route_class=StrictJsonRoute)


class DatasetIn(BaseModel):
    name: str | None = Field(None, max_length=255, description="A name items may use instead of the hash.")
    tables: dict[str, list[dict[str, Any]]] | None = Field(
        None, description="Inline tables: table name -> list of row objects."
    )
    path: str | None = Field(
        None, description="A file or folder of .csv/.parquet/.json files inside the server's data directory."
    )

    @model_validator(mode="after")
    def _one_source(self) -> DatasetIn:
        if (self.tables is None) == (self.path is None):
            raise ValueError("give exactly one of tables or path")
        return self


class DatasetOut(BaseModel):
    content_hash: str
    name: str | None
    tables: dict[str, Any] = Field(..., description="Per table: format, columns with types, row count, sha256")
    size_bytes: int
    created_at: str | None
    created: bool | None = Field(None, description="False when identical content was registered before")


class DatasetList(BaseModel):
    datasets: list[DatasetOut]


def _store(tables: list[svc.Table], name: str | None, response: Response) -> DatasetOut:
    with transaction() as session:
        dataset, created = svc.register(session, tables, name=name, max_bytes=get_settings().max_dataset_bytes)
        response.status_code = 201 if created else 200
        return DatasetOut(**svc.dataset_view(dataset), created=created)


@router.post("", response_model=DatasetOut, status_code=201, summary="Register a dataset from inline rows or a data-directory path")
def register_dataset(body: DatasetIn, response: Response, _: Annotated[Principal, Depends(require_principal)]) -> DatasetOut:
    if body.tables is not None:
        tables = [svc.table_from_records(name, rows) for name, rows in body.tables.items()]
    else:
        settings = get_settings()
        tables = svc.tables_from_path(settings.data_dir, body.path or "", max_bytes=settings.max_dataset_bytes)
    return _store(tables, body.name, response)


@router.post("/files", response_model=DatasetOut, status_code=201, summary="Register a dataset from uploaded table files")
@body_limit("max_dataset_bytes", framing_bytes=64 * 1024)
def upload_dataset(
    response: Response,
    _: Annotated[Principal, Depends(require_principal)],
    files: Annotated[list[UploadFile], File(description="One file per table; the table is named after the file (stem).")],
    name: Annotated[str | None, Form(max_length=255)] = None,
) -> DatasetOut:
    limit = get_settings().max_dataset_bytes
    tables = []
    for upload in files:
        filename = upload.filename or ""
        data = upload.file.read(limit + 1)
        if len(data) > limit:
            raise InvalidInput(f"{filename!r} is larger than {limit} bytes")
        stem = filename.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        tables.append(svc.make_table(stem, svc.format_from_filename(filename), data))
    return _store(tables, name, response)


@router.get("", response_model=DatasetList, summary="Registered datasets, newest first")
def list_datasets(_: Annotated[Principal, Depends(require_principal)]) -> DatasetList:
    from sqlalchemy import select

    with transaction() as session:
        rows = session.scalars(select(Dataset).order_by(Dataset.created_at.desc()).limit(500))
        return DatasetList(datasets=[DatasetOut(**svc.dataset_view(d)) for d in rows])


@router.get("/{reference}", response_model=DatasetOut, summary="A dataset by content hash or name")
def get_dataset(reference: str, _: Annotated[Principal, Depends(require_principal)]) -> DatasetOut:
    with transaction() as session:
        return DatasetOut(**svc.dataset_view(svc.resolve(session, reference)))
