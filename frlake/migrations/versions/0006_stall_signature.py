"""Stall signatures that survive a code change: ``culprits.stall_signature``
hashes the user frames' function names (no file names, no line numbers, no
torch internals), beside the exact ``stack_signature``. Rows diagnosed before
it have NULL until ``frlake rediagnose``; the hangs report falls back to the
exact signature for them.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None
# What reverting this migration throws away (``frlake db downgrade`` asks first).
LOSES = "the culprits' stall signatures (frlake rediagnose computes them again)"


def upgrade() -> None:
    with op.batch_alter_table("culprits") as batch:
        batch.add_column(sa.Column("stall_signature", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("culprits") as batch:
        batch.drop_column("stall_signature")
