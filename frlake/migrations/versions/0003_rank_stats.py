"""Per-attempt lateness of notable ranks, for the slow-ranks report.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None
# What reverting this migration throws away (``frlake db downgrade`` asks first).
LOSES = 'the rank lateness of every diagnosis (the slow-ranks report)'


def upgrade() -> None:
    op.create_table(
        "rank_stats",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("incident_id", sa.Integer(), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(512), nullable=True),
        sa.Column("collectives", sa.Integer(), nullable=False),
        sa.Column("arrived_last", sa.Integer(), nullable=False),
        sa.Column("late_p50_ms", sa.Float(), nullable=False),
        sa.Column("late_p90_ms", sa.Float(), nullable=False),
        sa.Column("late_max_ms", sa.Float(), nullable=False),
        sa.Column("root_late_events", sa.Integer(), nullable=False),
        sa.Column("root_late_ms", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["incident_id"], ["incidents.id"], name=op.f("fk_rank_stats_incident_id_incidents"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rank_stats")),
    )
    op.create_index(op.f("ix_rank_stats_incident_id"), "rank_stats", ["incident_id"])
    op.create_index(op.f("ix_rank_stats_host"), "rank_stats", ["host"])


def downgrade() -> None:
    op.drop_index(op.f("ix_rank_stats_host"), table_name="rank_stats")
    op.drop_index(op.f("ix_rank_stats_incident_id"), table_name="rank_stats")
    op.drop_table("rank_stats")
