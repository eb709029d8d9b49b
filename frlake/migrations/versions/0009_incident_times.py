"""``incidents.diagnosed_at`` gets an index: the catalog's version (what the
server keys its cached views and connections by) reads its newest value at
every request. Its ``max(id)`` alone missed a diagnosis stored again: SQLite
gives the replacing row the id of the row it deletes when that was the newest.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None
# What reverting this migration throws away (``frlake db downgrade`` asks first).
LOSES = 'nothing (an index)'


def upgrade() -> None:
    op.create_index("ix_incidents_diagnosed_at", "incidents", ["diagnosed_at"])


def downgrade() -> None:
    op.drop_index("ix_incidents_diagnosed_at", table_name="incidents")
