"""Stored diagnoses: one incident per attempt and its culprits.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None
# What reverting this migration throws away (``frlake db downgrade`` asks first).
LOSES = 'every stored diagnosis (incidents and culprits)'


def upgrade() -> None:
    op.create_table(
        "incidents",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("attempt_id", sa.Integer(), nullable=False),
        sa.Column("verdict", sa.String(16), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("world_size", sa.Integer(), nullable=False),
        sa.Column("n_dumps", sa.Integer(), nullable=False),
        sa.Column("algorithm_version", sa.Integer(), nullable=False),
        sa.Column("diagnosed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("report", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["attempt_id"], ["attempts.id"], name=op.f("fk_incidents_attempt_id_attempts")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_incidents")),
        sa.UniqueConstraint("attempt_id", name=op.f("uq_incidents_attempt_id")),
    )
    op.create_index(op.f("ix_incidents_verdict"), "incidents", ["verdict"])
    op.create_table(
        "culprits",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("incident_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(512), nullable=True),
        sa.Column("reason", sa.String(32), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("pg", sa.String(512), nullable=True),
        sa.Column("pg_desc", sa.String(512), nullable=True),
        sa.Column("seq", sa.BigInteger(), nullable=True),
        sa.Column("op", sa.String(64), nullable=True),
        sa.Column("lateness_ms", sa.Float(), nullable=True),
        sa.Column("stack_signature", sa.String(64), nullable=True),
        sa.Column("top_frame", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["incident_id"], ["incidents.id"], name=op.f("fk_culprits_incident_id_incidents"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_culprits")),
    )
    op.create_index(op.f("ix_culprits_incident_id"), "culprits", ["incident_id"])
    op.create_index(op.f("ix_culprits_host"), "culprits", ["host"])


def downgrade() -> None:
    op.drop_index(op.f("ix_culprits_host"), table_name="culprits")
    op.drop_index(op.f("ix_culprits_incident_id"), table_name="culprits")
    op.drop_table("culprits")
    op.drop_index(op.f("ix_incidents_verdict"), table_name="incidents")
    op.drop_table("incidents")
