"""Attempt revisions (whatever ingest commits gets diagnosed eventually) and
the index of stored stacks (ingest's cost does not grow with the lake).

- ``attempts.revision`` goes up in the transaction that adds dumps to the
  attempt; ``incidents.attempt_revision`` is the revision a diagnosis saw. An
  attempt whose diagnosis is missing or older is pending, so a run killed
  between commit and diagnosis is diagnosed by the next one.
- ``stack_ids`` lists every stack id stored in the lake's ``stacks`` table,
  so ingest learns which stacks are new with one indexed query instead of
  reading every stacks file. Filled from the lake's files by the first run
  that finds it empty (a migration does not know where the lake is).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None
# What reverting this migration throws away (``frlake db downgrade`` asks first).
LOSES = ('which attempts await a diagnosis (attempts.revision, incidents.attempt_revision) and the index '
         "of the lake's stacks (rebuilt from the lake's files by the next ingest)")


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("revision", sa.BigInteger(), nullable=False, server_default="0"))
    with op.batch_alter_table("incidents") as batch:
        batch.add_column(sa.Column("attempt_revision", sa.BigInteger(), nullable=False, server_default="0"))
    op.create_table(
        "stack_ids",
        sa.Column("stack_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.PrimaryKeyConstraint("stack_id", name=op.f("pk_stack_ids")),
    )


def downgrade() -> None:
    op.drop_table("stack_ids")
    with op.batch_alter_table("incidents") as batch:
        batch.drop_column("attempt_revision")
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("revision")
