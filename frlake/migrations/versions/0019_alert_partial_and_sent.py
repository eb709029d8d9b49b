"""Alerts that say they are partial, and when each attempt's alert was taken: ``notify_seen.partial`` (what
was announced came from a diagnosis made before every rank of the attempt dumped: it is followed by an
update once the attempt settles; NULL for what was announced before 0019, read as settled) and
``notify_seen.sent_at`` (when the receiver last took a message of the attempt; the attempt page shows it).

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None
# What reverting this migration throws away (``frlake db downgrade`` asks first).
LOSES = ("which announced alerts were partial (their settled update is then not sent) and when each attempt's "
         "alert was delivered")


def upgrade() -> None:
    with op.batch_alter_table("notify_seen") as batch:
        batch.add_column(sa.Column("partial", sa.Boolean(), nullable=True))
        batch.add_column(sa.Column("sent_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("notify_seen") as batch:
        batch.drop_column("sent_at")
        batch.drop_column("partial")
