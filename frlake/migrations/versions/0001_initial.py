"""The first catalog: ingest runs, jobs, attempts, dumps, files, lake files.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None
# What reverting this migration throws away (``frlake db downgrade`` asks first).
LOSES = 'the whole catalog: every job, attempt, dump and file record'

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "ingest_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("started_at", TZ, nullable=False),
        sa.Column("finished_at", TZ, nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("sources", sa.Text(), nullable=False),
        sa.Column("options", sa.Text(), nullable=False),
        sa.Column("n_ingested", sa.Integer(), nullable=False),
        sa.Column("n_duplicate", sa.Integer(), nullable=False),
        sa.Column("n_rejected", sa.Integer(), nullable=False),
        sa.Column("n_unchanged", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ingest_runs")),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(512), nullable=False),
        sa.Column("first_seen_at", TZ, nullable=False),
        sa.Column("last_seen_at", TZ, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
        sa.UniqueConstraint("name", name=op.f("uq_jobs_name")),
    )
    op.create_table(
        "attempts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("number", sa.BigInteger(), nullable=False),
        sa.Column("first_seen_at", TZ, nullable=False),
        sa.Column("last_seen_at", TZ, nullable=False),
        sa.Column("started_ns", sa.BigInteger(), nullable=True),
        sa.Column("ended_ns", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_attempts_job_id_jobs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_attempts")),
        sa.UniqueConstraint("job_id", "number", name=op.f("uq_attempts_job_id")),
    )
    op.create_table(
        "dumps",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("dump_id", sa.BigInteger(), nullable=False),
        sa.Column("attempt_id", sa.Integer(), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(512), nullable=False),
        sa.Column("fr_version", sa.String(32), nullable=True),
        sa.Column("encoding", sa.String(16), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("n_entries", sa.BigInteger(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("ingested_at", TZ, nullable=False),
        sa.ForeignKeyConstraint(["attempt_id"], ["attempts.id"], name=op.f("fk_dumps_attempt_id_attempts")),
        sa.ForeignKeyConstraint(["run_id"], ["ingest_runs.id"], name=op.f("fk_dumps_run_id_ingest_runs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dumps")),
        sa.UniqueConstraint("sha256", name=op.f("uq_dumps_sha256")),
    )
    op.create_index(op.f("ix_dumps_dump_id"), "dumps", ["dump_id"])
    op.create_index(op.f("ix_dumps_attempt_id"), "dumps", ["attempt_id"])
    op.create_index(op.f("ix_dumps_host"), "dumps", ["host"])
    op.create_table(
        "files",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("mtime_ns", sa.BigInteger(), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(64), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("job", sa.String(512), nullable=True),
        sa.Column("attempt", sa.BigInteger(), nullable=True),
        sa.Column("host", sa.String(512), nullable=True),
        sa.Column("rank", sa.Integer(), nullable=True),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("seen_at", TZ, nullable=False),
        sa.Column("is_current", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["ingest_runs.id"], name=op.f("fk_files_run_id_ingest_runs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_files")),
    )
    op.create_index("ix_files_path_current", "files", ["path", "is_current"])
    op.create_index(op.f("ix_files_sha256"), "files", ["sha256"])
    op.create_table(
        "lake_files",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("table_name", sa.String(32), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("job", sa.String(512), nullable=True),
        sa.Column("attempt", sa.BigInteger(), nullable=True),
        sa.Column("rows", sa.BigInteger(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", TZ, nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["ingest_runs.id"], name=op.f("fk_lake_files_run_id_ingest_runs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lake_files")),
    )
    op.create_index("ix_lake_files_table_status", "lake_files", ["table_name", "status"])


def downgrade() -> None:
    op.drop_index("ix_lake_files_table_status", table_name="lake_files")
    op.drop_table("lake_files")
    op.drop_index(op.f("ix_files_sha256"), table_name="files")
    op.drop_index("ix_files_path_current", table_name="files")
    op.drop_table("files")
    op.drop_index(op.f("ix_dumps_host"), table_name="dumps")
    op.drop_index(op.f("ix_dumps_attempt_id"), table_name="dumps")
    op.drop_index(op.f("ix_dumps_dump_id"), table_name="dumps")
    op.drop_table("dumps")
    op.drop_table("attempts")
    op.drop_table("jobs")
    op.drop_table("ingest_runs")
