"""Alerts on new incidents (``--notify URL``): the receivers, what each was told of each attempt, and the
outbox of messages not yet delivered, so that a restart loses nothing and sends nothing twice.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None
# What reverting this migration throws away (``frlake db downgrade`` asks first).
LOSES = 'the alerts not yet delivered, and what was announced to each --notify receiver (an upgrade starts afresh)'


def upgrade() -> None:
    op.create_table(
        "notify_destinations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("label", sa.String(512), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("sent", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("failed", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("dropped", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("last_sent_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("last_error_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notify_destinations")),
        sa.UniqueConstraint("key", name=op.f("uq_notify_destinations_key")),
    )
    op.create_table(
        "notify_seen",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("destination_id", sa.Integer(), nullable=False),
        sa.Column("job", sa.String(512), nullable=False),
        sa.Column("attempt", sa.BigInteger(), nullable=False),
        sa.Column("revision", sa.BigInteger(), nullable=False),
        sa.Column("diagnosed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("verdict", sa.String(16), nullable=True),
        sa.Column("culprit", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["destination_id"], ["notify_destinations.id"],
                                name=op.f("fk_notify_seen_destination_id_notify_destinations"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notify_seen")),
        sa.UniqueConstraint("destination_id", "job", "attempt", name="uq_notify_seen_destination_id"),
    )
    op.create_table(
        "notify_outbox",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("destination_id", sa.Integer(), nullable=False),
        sa.Column("delivery", sa.String(64), nullable=False),
        sa.Column("job", sa.String(512), nullable=False),
        sa.Column("attempt", sa.BigInteger(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("tries", sa.Integer(), server_default="0", nullable=False),
        sa.Column("next_try_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["destination_id"], ["notify_destinations.id"],
                                name=op.f("fk_notify_outbox_destination_id_notify_destinations"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notify_outbox")),
        sa.UniqueConstraint("delivery", name=op.f("uq_notify_outbox_delivery")),
    )
    op.create_index("ix_notify_outbox_destination_id_next_try_at", "notify_outbox", ["destination_id", "next_try_at"])


def downgrade() -> None:
    op.drop_index("ix_notify_outbox_destination_id_next_try_at", table_name="notify_outbox")
    op.drop_table("notify_outbox")
    op.drop_table("notify_seen")
    op.drop_table("notify_destinations")
