"""One migration chain from an empty database; models and migrations agree; downgrade works."""


import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from assay.scoring.store.db import alembic_config
from assay.scoring.store.models import Base


@pytest.fixture(params=["postgresql", "sqlite"])
def scratch_url(request, scratch_pg_url, tmp_path):
    return scratch_pg_url if request.param == "postgresql" else f"sqlite:///{tmp_path / 'm.db'}"


def _diff(url: str) -> list:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            return compare_metadata(ctx, Base.metadata)
    finally:
        engine.dispose()


def _tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def test_upgrade_matches_models_and_downgrade_empties(scratch_url):
    cfg = alembic_config(scratch_url)
    command.upgrade(cfg, "head")
    assert _tables(scratch_url) == set(Base.metadata.tables)
    assert _diff(scratch_url) == []
    command.downgrade(cfg, "base")
    assert _tables(scratch_url) == set()
    command.upgrade(cfg, "head")  # the chain runs again from empty
    assert _diff(scratch_url) == []
