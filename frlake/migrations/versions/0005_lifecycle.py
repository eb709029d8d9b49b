"""A lake to live with: rejections that remember how they were judged, one
dump per (bytes, attempt), retired files, and what kind of run wrote.

- ``files.options_key`` and ``files.frlake_version``: the identity options
  (a short hash of them) and the frlake that judged the file, so a later run
  with other options or a newer frlake retries a rejection that it could
  decide differently (docs/lake.md, "Correcting mistakes").
- ``dumps``: unique per (sha256, attempt) instead of per sha256, so the same
  bytes found in a second attempt's folder are recorded there too (the raw
  bytes stay stored once).
- ``retired_files``: Parquet files no view reads any more and raw bytes no
  dump refers to, deleted by a later run once no reader can still use them.
- ``ingest_runs.kind``: ingest, forget or compact.
- ``lake_files.hidden``: the file also has its hidden name (frlake's views
  read that one, so a forget or compaction can take the final name away from
  outside readers at once and still leave the file to readers that opened
  views before). False for the files of older lakes.

Downgrading drops the second identities of shared bytes and forgets the list
of retired files (they stay on disk), so ``frlake db downgrade`` asks first.

Revision ID: 0005
Revises: 0004
Create Date: 2027-01-10
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None
# What reverting this migration throws away (``frlake db downgrade`` asks first).
LOSES = ("the catalog's second identities of bytes found in several attempts (their Parquet rows stay), "
         'how each rejection was judged, and the list of retired files (they stay on disk)')

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("files") as batch:
        batch.add_column(sa.Column("options_key", sa.String(16), nullable=True))
        batch.add_column(sa.Column("frlake_version", sa.String(32), nullable=True))
    with op.batch_alter_table("ingest_runs") as batch:
        batch.add_column(sa.Column("kind", sa.String(16), nullable=False, server_default="ingest"))
    with op.batch_alter_table("lake_files") as batch:
        batch.add_column(sa.Column("hidden", sa.Boolean(), nullable=False, server_default=sa.false()))
    with op.batch_alter_table("dumps") as batch:
        batch.drop_constraint("uq_dumps_sha256", type_="unique")
        batch.create_unique_constraint("uq_dumps_sha256_attempt_id", ["sha256", "attempt_id"])
    op.create_table(
        "retired_files",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=True),
        sa.Column("retired_at", TZ, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_retired_files")),
    )
    op.create_index(op.f("ix_retired_files_retired_at"), "retired_files", ["retired_at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_retired_files_retired_at"), table_name="retired_files")
    op.drop_table("retired_files")
    # Only the first identity of shared bytes fits the older schema.
    op.execute("DELETE FROM dumps WHERE id NOT IN (SELECT min(id) FROM dumps GROUP BY sha256)")
    with op.batch_alter_table("dumps") as batch:
        batch.drop_constraint("uq_dumps_sha256_attempt_id", type_="unique")
        batch.create_unique_constraint("uq_dumps_sha256", ["sha256"])
    with op.batch_alter_table("lake_files") as batch:
        batch.drop_column("hidden")
    with op.batch_alter_table("ingest_runs") as batch:
        batch.drop_column("kind")
    with op.batch_alter_table("files") as batch:
        batch.drop_column("frlake_version")
        batch.drop_column("options_key")
