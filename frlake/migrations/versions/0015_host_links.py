"""The summary table ``host_links`` (one row per host of an attempt: its share of the slow-links report,
which reads it instead of a row per collective) is written when an attempt is diagnosed: the upgrade marks
every attempt's diagnosis due, so the next ingest (or ``frlake rediagnose``) writes it for attempts
diagnosed before it existed. The downgrade forgets its files' records (an older frlake knows no such
table; the files stay on disk, unread).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-03
"""

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None
# What reverting this migration throws away (``frlake db downgrade`` asks first).
LOSES = ("the records of the summary table host_links's files (the slow-links report's input; the files stay on "
         "disk, unread by the older frlake)")


def upgrade() -> None:
    op.execute("UPDATE attempts SET diagnosis_due = true")


def downgrade() -> None:
    op.execute("DELETE FROM lake_files WHERE table_name = 'host_links'")
