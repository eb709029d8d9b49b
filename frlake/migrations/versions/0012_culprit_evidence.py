"""How strong a culprit's evidence is, in the catalog: ``culprits.evidence``
(NULL: direct; ``pending_tail``, ``unnamed_peer``, ``no_dump``: weaker, see
docs/diagnose.md) and ``culprits.host_inferred`` (true: no file of the rank
names its host; the placement of the ranks beside it does). The drain report
counts an incident on an inferred host at a fraction of its weight. Rows
diagnosed before it have NULL in both until ``frlake rediagnose``.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None
# What reverting this migration throws away (``frlake db downgrade`` asks first).
LOSES = ("how strong each culprit's evidence is and which hosts were inferred (frlake rediagnose finds "
         'them again; the drain report counts inferred hosts in full without them)')


def upgrade() -> None:
    with op.batch_alter_table("culprits") as batch:
        batch.add_column(sa.Column("evidence", sa.String(32), nullable=True))
        batch.add_column(sa.Column("host_inferred", sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("culprits") as batch:
        batch.drop_column("host_inferred")
        batch.drop_column("evidence")
