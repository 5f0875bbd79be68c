"""provider_batches.provider: the judge provider whose batch API holds the provider batch

The batch lane served only Anthropic's Message Batches; it now sends each judge's requests through its
own provider's batch API (OpenAI's Batch API too), and polls each provider batch at the provider that
took it. Rows from before were all Anthropic's.

Revision ID: 0017
Revises: 0016
"""
import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("provider_batches") as batch:
        batch.add_column(sa.Column("provider", sa.String(64), nullable=False, server_default="anthropic"))


def downgrade() -> None:
    with op.batch_alter_table("provider_batches") as batch:
        batch.drop_column("provider")
