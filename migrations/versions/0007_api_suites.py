"""Suites registered through the API: where a suite came from, its state, and every API version

A suite was always a file in config/suites/. It can now also be registered with POST /api/v1/suites:
``suites.origin`` says which (``path``: a suite file given to ``assay run`` by path, embedded mode),
``suites.state`` lets an API suite be disabled or deleted (the row stays, so its scores stay
readable), and ``suite_versions`` keeps every body sent under a name with its creator and time.

Revision ID: 0007
Revises: 0006
"""
import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("suites") as batch:
        batch.add_column(sa.Column("origin", sa.String(length=10), server_default=sa.text("'file'"), nullable=False))
        batch.add_column(sa.Column("state", sa.String(length=10), server_default=sa.text("'active'"), nullable=False))
        batch.add_column(sa.Column("created_by", sa.String(length=255), nullable=True))
        batch.create_check_constraint(op.f("ck_suites_origin"), "origin IN ('file', 'api', 'path')")
        batch.create_check_constraint(op.f("ck_suites_state"), "state IN ('active', 'disabled', 'deleted')")
    op.create_table(
        "suite_versions",
        sa.Column("suite_name", sa.String(length=100), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("body_format", sa.String(length=4), nullable=False),
        sa.Column("criteria_hash", sa.String(length=64), nullable=False),
        sa.Column("options", sa.JSON().with_variant(sa.dialects.postgresql.JSONB(), "postgresql"), nullable=False),
        sa.Column("created_by", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("body_format IN ('yaml', 'json')", name=op.f("ck_suite_versions_body_format")),
        sa.CheckConstraint("version >= 1", name=op.f("ck_suite_versions_version")),
        sa.ForeignKeyConstraint(
            ["criteria_hash"],
            ["scoring_criteria_definitions.criteria_hash"],
            name=op.f("fk_suite_versions_criteria_hash_scoring_criteria_definitions"),
        ),
        sa.ForeignKeyConstraint(["suite_name"], ["suites.name"], name=op.f("fk_suite_versions_suite_name_suites")),
        sa.PrimaryKeyConstraint("suite_name", "version", name=op.f("pk_suite_versions")),
    )


def downgrade() -> None:
    op.drop_table("suite_versions")
    # API suites exist only through this revision: without their origin they would pass for files.
    op.execute("DELETE FROM suites WHERE origin = 'api'")
    with op.batch_alter_table("suites") as batch:
        batch.drop_constraint(op.f("ck_suites_state"), type_="check")
        batch.drop_constraint(op.f("ck_suites_origin"), type_="check")
        batch.drop_column("created_by")
        batch.drop_column("state")
        batch.drop_column("origin")
