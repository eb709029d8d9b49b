"""The summary tables are made from the entries the diagnosis reads (each rank's newest dump, groups that
share a name told apart): the upgrade marks every attempt's diagnosis due, so the next ingest (or
``frlake rediagnose``) writes them again. From here on a diagnosis of an attempt that is not due keeps its
summaries (they are those of its current revision). The downgrade changes nothing.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None
# What reverting this migration throws away (``frlake db downgrade`` asks first).
LOSES = 'nothing (the attempts it marked due stay due until diagnosed)'


def upgrade() -> None:
    op.execute("UPDATE attempts SET diagnosis_due = true")


def downgrade() -> None:
    pass
