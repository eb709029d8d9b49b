"""The schema version of each Parquet file of the lake (``lake_files.schema_version``): ``entries`` files
written from here on hold the stable signatures of their shapes and dtypes (schema 2, frlake.signatures),
the files written before do not (schema 1). frlake's views give a file's missing columns as NULL; a
diagnosis reads the signatures when every entries file of its attempt has them, and makes its own from the
lists otherwise; ``frlake compact`` rewrites old files at the current version. The upgrade marks every
existing file version 1. The downgrade drops the column; the older frlake it is for cannot read an attempt
whose files mix both versions, so compact (or re-ingest) such attempts with this one first.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None
# What reverting this migration throws away (``frlake db downgrade`` asks first).
LOSES = ("which files hold the entries' signatures; the older frlake cannot read an attempt whose entries "
         'files mix old and new ones (compact the lake with this frlake first)')


def upgrade() -> None:
    with op.batch_alter_table("lake_files") as batch:
        batch.add_column(sa.Column("schema_version", sa.Integer(), nullable=False, server_default="1"))


def downgrade() -> None:
    with op.batch_alter_table("lake_files") as batch:
        batch.drop_column("schema_version")
