"""What the ingest workers' forkserver imports once, before it forks them
(frlake.ingest.pool).

The workers' modules load with the cyclic garbage collector off, and what
they made is then frozen out of its reach (``gc.freeze``, made for this): a
worker forked from the server starts with them, and its collector never
walks them, nor writes to their pages, which stay shared with the server.

Then the script that started the forkserver, if it was one, is imported as
Python's multiprocessing imports it in every worker (``__mp_main__``), so
that the workers start with it. Should that fail (a script that is not safe
to import, such as one without an ``if __name__ == "__main__":`` guard),
nothing changes: each worker imports it itself, as it would have, and fails
as it would have, which the pipeline reports.
"""

import gc
import os
import sys
from multiprocessing import process, spawn

from frlake.ingest.pool import MAIN_PATH_ENV


def _import_main(path: str) -> None:
    current = process.current_process()
    current._inheriting = True  # what multiprocessing sets while a child imports the main script
    try:
        spawn.import_main_path(path)
    except (Exception, SystemExit):
        pass
    finally:
        del current._inheriting
        sys.stdout.flush()  # or each worker forked from here would write it again
        sys.stderr.flush()


gc.disable()
try:
    import sqlalchemy.dialects.sqlite  # noqa: F401  the default catalog's, which a worker loads at its first batch

    import frlake.ingest.worker  # noqa: F401

    main_path = os.environ.pop(MAIN_PATH_ENV, None)
    if main_path:
        _import_main(main_path)
finally:
    gc.freeze()
    gc.enable()
