"""Each dump's first entry: ``dumps.first_record_id`` and ``dumps.first_ns`` (its oldest entry's record id
and time). In a folder that names no attempt, a rank's file rewritten by a new process (its record ids
start again: another first entry at the same record id, or a lower one) starts the job's next attempt
instead of becoming a later snapshot of the last (frlake.ingest.worker). NULL for dumps ingested before
0020, which are then read as the same process (as before).

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None
# What reverting this migration throws away (``frlake db downgrade`` asks first).
LOSES = "each dump's first entry (a flat folder's restarted job is then read as more snapshots of its last attempt)"


def upgrade() -> None:
    with op.batch_alter_table("dumps") as batch:
        batch.add_column(sa.Column("first_record_id", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("first_ns", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("dumps") as batch:
        batch.drop_column("first_ns")
        batch.drop_column("first_record_id")
