"""An index of the files by job and attempt (``ix_files_job_attempt``): a
diagnosis reads the copies of its attempt's dumps found in another rank's or
host's place (``files.reason = 'claimed_twice'``), and names no host for
such a rank; the index keeps that read independent of the lake's history.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02
"""

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None
# What reverting this migration throws away (``frlake db downgrade`` asks first).
LOSES = 'nothing (an index)'


def upgrade() -> None:
    op.create_index("ix_files_job_attempt", "files", ["job", "attempt"])


def downgrade() -> None:
    op.drop_index("ix_files_job_attempt", table_name="files")
