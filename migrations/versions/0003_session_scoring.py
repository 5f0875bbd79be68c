"""session scoring (design 001 / TARSy EP-0028 Task 1)

The EP's feedback tables keyed to the generic ``scores.id`` (ON DELETE CASCADE), and the
``session_scores`` view with the EP's columns over ``scores``, ``items`` and the judge component.
``scoring_criteria_definitions`` is 0001's.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 16:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None

# One row per completed score of an alert_session item; history is kept (no unique session_id).
# total_score is round(100 x total) as an integer 0..100 (half away from zero on both backends).
_VIEW = """
CREATE VIEW session_scores AS
SELECT s.id AS score_id,
       i.external_id AS session_id,
       s.criteria_hash AS criteria_hash,
       CAST(ROUND(CAST(100 * s.total AS NUMERIC)) AS INTEGER) AS total_score,
       {breakdown} AS score_breakdown,
       {reasoning} AS score_reasoning,
       s.triggered_by AS scored_triggered_by,
       s.completed_at AS scored_at
FROM scores s
JOIN items i ON i.id = s.item_id
LEFT JOIN score_components c ON c.score_id = s.id AND c.queue = 'judge'
WHERE i.kind = 'alert_session' AND s.status = 'completed'
"""

_JSON = {
    "postgresql": ("c.details -> 'score_breakdown'", "c.details ->> 'score_reasoning'"),
    # json_extract rather than ->/->> (SQLite 3.38+): embedded mode runs on older SQLite too.
    "sqlite": ("json_extract(c.details, '$.score_breakdown')", "json_extract(c.details, '$.score_reasoning')"),
}


def upgrade() -> None:
    op.create_table('score_missing_tools',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('score_id', sa.Uuid(), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('tool_name', sa.String(length=255), nullable=False),
    sa.Column('normalized_name', sa.String(length=255), nullable=False),
    sa.Column('rationale', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['score_id'], ['scores.id'], name=op.f('fk_score_missing_tools_score_id_scores'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_score_missing_tools'))
    )
    op.create_index(op.f('ix_score_missing_tools_normalized_name'), 'score_missing_tools', ['normalized_name'], unique=False)
    op.create_index(op.f('ix_score_missing_tools_score_id'), 'score_missing_tools', ['score_id'], unique=False)
    op.create_index(op.f('ix_score_missing_tools_tool_name'), 'score_missing_tools', ['tool_name'], unique=False)
    op.create_table('score_alternative_approaches',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('score_id', sa.Uuid(), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('description', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['score_id'], ['scores.id'], name=op.f('fk_score_alternative_approaches_score_id_scores'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_score_alternative_approaches'))
    )
    op.create_index(op.f('ix_score_alternative_approaches_name'), 'score_alternative_approaches', ['name'], unique=False)
    op.create_index(op.f('ix_score_alternative_approaches_score_id'), 'score_alternative_approaches', ['score_id'], unique=False)
    op.create_table('score_alternative_approach_steps',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('approach_id', sa.Uuid(), nullable=False),
    sa.Column('step_order', sa.Integer(), nullable=False),
    sa.Column('step_description', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['approach_id'], ['score_alternative_approaches.id'], name=op.f('fk_score_alternative_approach_steps_approach_id_score_alternative_approaches'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_score_alternative_approach_steps'))
    )
    op.create_index(op.f('ix_score_alternative_approach_steps_approach_id'), 'score_alternative_approach_steps', ['approach_id'], unique=False)
    breakdown, reasoning = _JSON["postgresql" if op.get_context().dialect.name == "postgresql" else "sqlite"]
    op.execute(_VIEW.format(breakdown=breakdown, reasoning=reasoning))


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS session_scores")
    op.drop_index(op.f('ix_score_alternative_approach_steps_approach_id'), table_name='score_alternative_approach_steps')
    op.drop_table('score_alternative_approach_steps')
    op.drop_index(op.f('ix_score_alternative_approaches_score_id'), table_name='score_alternative_approaches')
    op.drop_index(op.f('ix_score_alternative_approaches_name'), table_name='score_alternative_approaches')
    op.drop_table('score_alternative_approaches')
    op.drop_index(op.f('ix_score_missing_tools_tool_name'), table_name='score_missing_tools')
    op.drop_index(op.f('ix_score_missing_tools_score_id'), table_name='score_missing_tools')
    op.drop_index(op.f('ix_score_missing_tools_normalized_name'), table_name='score_missing_tools')
    op.drop_table('score_missing_tools')
