"""Dashboard sign-ins recorded (revocable); Idempotency-Key scoped per principal with a fingerprint

Signing out used to leave the cookie valid for its whole life: a sign-in is now a row, and the cookie
names it, so sign-out (or an operator) ends it here. An Idempotency-Key was global and remembered
nothing of the upload: keys are now unique per principal and carry a fingerprint of what they were
used for (suite, parameters, body), so a reuse with another body is refused instead of replayed.

Revision ID: 0006
Revises: 0005
"""
import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "signed_in_sessions",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("user_name", sa.String(length=255), nullable=False),
        sa.Column("key_fingerprint", sa.String(length=16), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_signed_in_sessions")),
    )
    op.create_index(op.f("ix_signed_in_sessions_expires_at"), "signed_in_sessions", ["expires_at"])
    with op.batch_alter_table("batches") as batch:
        batch.drop_constraint(op.f("uq_batches_idempotency_key"), type_="unique")
        batch.add_column(sa.Column("idempotency_scope", sa.String(length=255), nullable=True))
        batch.add_column(sa.Column("idempotency_fingerprint", sa.String(length=64), nullable=True))
        batch.create_unique_constraint(
            "uq_batches_idempotency_scope_key", ["idempotency_scope", "idempotency_key"]
        )
    # Keys stored before scoping belong to whoever created the batch.
    op.execute("UPDATE batches SET idempotency_scope = created_by WHERE idempotency_key IS NOT NULL")


def downgrade() -> None:
    with op.batch_alter_table("batches") as batch:
        batch.drop_constraint("uq_batches_idempotency_scope_key", type_="unique")
        batch.drop_column("idempotency_fingerprint")
        batch.drop_column("idempotency_scope")
        batch.create_unique_constraint(op.f("uq_batches_idempotency_key"), ["idempotency_key"])
    op.drop_index(op.f("ix_signed_in_sessions_expires_at"), table_name="signed_in_sessions")
    op.drop_table("signed_in_sessions")
