"""What the ingest workers' forkserver imports once, before it forks them
(frlake.ingest.pool).

The workers' modules load with the cyclic garbage collector off, and what
they made is then frozen out of its reach (``gc.freeze``, made for this): a
worker forked from the server starts with them, and its collector never
walks them, nor writes to their pages, which stay shared with the server.
"""

import gc

gc.disable()
try:
    import frlake.ingest.worker  # noqa: F401
finally:
    gc.freeze()
    gc.enable()
