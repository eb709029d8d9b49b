"""Hosts from where fleets keep them: ``dumps.host`` may be NULL (a dump never names its host; one stored
without is diagnosed as any other, its host shown as unknown), ``host_claims`` holds what each host map
beside the dumps (or attached later) says of each rank's host, and ``launcher_failures`` the workers a
torchrun failure summary names (exit code, signal, error file).

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None
# What reverting this migration throws away (``frlake db downgrade`` asks first).
LOSES = ("the host claims of host maps and attaches and the launcher's failure summaries (a catalog holding a dump "
         "of unknown host is not downgraded: attach its host or forget it first)")


def upgrade() -> None:
    with op.batch_alter_table("dumps") as batch:
        batch.alter_column("host", existing_type=sa.String(512), nullable=True)
    op.create_table(
        "host_claims",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("attempt_id", sa.Integer(), sa.ForeignKey("attempts.id"), nullable=False, index=True),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(512), nullable=False),
        sa.Column("source", sa.String(32), nullable=False),
        sa.Column("precedence", sa.Integer(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("attach_id", sa.String(32), nullable=True, index=True),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_host_claims_attempt_rank", "host_claims", ["attempt_id", "rank"])
    op.create_table(
        "launcher_failures",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("attempt_id", sa.Integer(), sa.ForeignKey("attempts.id"), nullable=False, index=True),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("local_rank", sa.Integer(), nullable=True),
        sa.Column("host", sa.String(512), nullable=True),
        sa.Column("exitcode", sa.Integer(), nullable=True),
        sa.Column("pid", sa.BigInteger(), nullable=True),
        sa.Column("failed_at", sa.String(32), nullable=True),
        sa.Column("error_file", sa.Text(), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("traceback", sa.Text(), nullable=True),
        sa.Column("root_cause", sa.Boolean(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.UniqueConstraint("attempt_id", "rank", "path", name="uq_launcher_failures_attempt_rank_path"),
    )


def downgrade() -> None:
    op.drop_table("launcher_failures")
    op.drop_index("ix_host_claims_attempt_rank", table_name="host_claims")
    op.drop_table("host_claims")
    unknown = op.get_bind().execute(sa.text("SELECT count(*) FROM dumps WHERE host IS NULL")).scalar()
    if unknown:  # the older catalog cannot hold them, and dropping their rows would orphan their files
        raise RuntimeError(f"{unknown} dump(s) have no host, which the catalog before 0018 cannot hold: attach their "
                           "hosts (frlake hosts attach) or forget them (frlake forget), then downgrade")
    with op.batch_alter_table("dumps") as batch:
        batch.alter_column("host", existing_type=sa.String(512), nullable=False)
