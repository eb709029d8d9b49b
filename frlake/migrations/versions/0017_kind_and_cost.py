"""What kind of failure each incident was, ``incidents.kind`` (frlake.entities.Kind: cpu_side,
stuck_in_collective, misconfigured, slow, unknown; NULL for a healthy attempt), and what a straggler cost
the others, ``culprits.wait_ms`` (over the dumps' window), ``culprits.wait_per_step_ms`` and
``culprits.step_without_ms`` (the step the job would take without it), and how strong an inferred host's
placement is, ``culprits.host_placement`` (``strong``, ``weak``; NULL where the host is not inferred): the
causes report may call a strongly placed inferred host, at low confidence. The kinds report, slow-ranks and
causes read them. Rows diagnosed before it have NULL in all five until ``frlake rediagnose``.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None
# What reverting this migration throws away (``frlake db downgrade`` asks first).
LOSES = ("the kind of each incident, what each straggler cost and how strong each inferred host's placement is "
         "(frlake rediagnose finds them again; without them the kinds report and slow-ranks' cost columns are empty "
         "and no inferred host is called)")


def upgrade() -> None:
    with op.batch_alter_table("incidents") as batch:
        batch.add_column(sa.Column("kind", sa.String(24), nullable=True))
        batch.create_index("ix_incidents_kind", ["kind"])
    with op.batch_alter_table("culprits") as batch:
        batch.add_column(sa.Column("wait_ms", sa.Float(), nullable=True))
        batch.add_column(sa.Column("wait_per_step_ms", sa.Float(), nullable=True))
        batch.add_column(sa.Column("step_without_ms", sa.Float(), nullable=True))
        batch.add_column(sa.Column("host_placement", sa.String(8), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("culprits") as batch:
        batch.drop_column("host_placement")
        batch.drop_column("step_without_ms")
        batch.drop_column("wait_per_step_ms")
        batch.drop_column("wait_ms")
    with op.batch_alter_table("incidents") as batch:
        batch.drop_index("ix_incidents_kind")
        batch.drop_column("kind")
