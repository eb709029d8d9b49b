"""Attempts whose diagnosis is due: ``attempts.diagnosis_due`` (indexed) is set
whenever an attempt's revision goes up and cleared when its diagnosis is stored
at that revision, so finding the pending diagnoses after an ingest reads the
pending attempts only, not every attempt of the lake joined to its incident.
The upgrade fills it from the old rule (no incident, or one older than the
attempt's revision). ``lake_files.status`` gets an index of its own: every run
looks for the files a crash left pending or publishing.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None
# What reverting this migration throws away (``frlake db downgrade`` asks first).
LOSES = 'nothing (which attempts await a diagnosis is found again from their incidents)'


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("diagnosis_due", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.create_index(batch.f("ix_attempts_diagnosis_due"), ["diagnosis_due"])
    op.create_index("ix_lake_files_status", "lake_files", ["status"])
    op.execute(
        """UPDATE attempts SET diagnosis_due = true WHERE NOT EXISTS (
             SELECT 1 FROM incidents i WHERE i.attempt_id = attempts.id AND i.attempt_revision >= attempts.revision)"""
    )


def downgrade() -> None:
    op.drop_index("ix_lake_files_status", table_name="lake_files")
    with op.batch_alter_table("attempts") as batch:
        batch.drop_index(batch.f("ix_attempts_diagnosis_due"))
        batch.drop_column("diagnosis_due")
