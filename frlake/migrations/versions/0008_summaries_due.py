"""The summary tables (``collective_durations``, ``watchdog_lags``) are written when an attempt is
diagnosed (frlake.storage.summary_tables): the upgrade marks every attempt's diagnosis due, so the next ingest (or
``frlake rediagnose``) writes them for attempts diagnosed by an older frlake. The downgrade forgets the
summary files' records (an older frlake knows no such table; the files stay on disk, unread).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None
# What reverting this migration throws away (``frlake db downgrade`` asks first).
LOSES = ("the records of the summary tables' files (collective_durations, watchdog_lags: the slow-links "
         "report's input; the files stay on disk, unread by the older frlake)")

SUMMARY_TABLES = ("collective_durations", "watchdog_lags")  # frlake.schema.SUMMARY_TABLES when written


def upgrade() -> None:
    op.execute("UPDATE attempts SET diagnosis_due = true")


def downgrade() -> None:
    names = ", ".join(f"'{t}'" for t in SUMMARY_TABLES)
    op.execute(f"DELETE FROM lake_files WHERE table_name IN ({names})")
