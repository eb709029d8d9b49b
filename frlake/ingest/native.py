"""The compiled modules of the reader (``_fastpickle``: a pickle's bytes into columns; ``_speedups``: the
parser's passes over every value), loaded in one place.

A module is None where the install built none (no C compiler): the reference passes in Python run
instead. A module built from other sources than the ``.pyx`` beside it (an edit or a pull without a
rebuild: an editable install keeps the old ``.so``) is refused: it would run old code under new names.
setup.py compiles each module's sha256 in (``SOURCE_SHA256``)."""

from __future__ import annotations

import hashlib
from importlib import import_module
from pathlib import Path
from types import ModuleType

from frlake.errors import StaleBuild

HERE = Path(__file__).resolve().parent
REBUILD = "pip install -e . (or python setup.py build_ext --inplace) in the source tree"


def check(module: ModuleType, source: Path) -> ModuleType:
    """``module`` when it was compiled from ``source`` as it is now (or no source is at hand: an install
    from a wheel ships none); StaleBuild otherwise."""
    if source.is_file():
        built = getattr(module, "SOURCE_SHA256", None)
        if built != hashlib.sha256(source.read_bytes()).hexdigest():
            raise StaleBuild(f"frlake's compiled {module.__name__.rsplit('.', 1)[-1]} was built from another "
                             f"{source.name} than the one in {source.parent}: rebuild it with {REBUILD}")
    return module


def load(name: str) -> ModuleType | None:
    try:
        module = import_module(f"frlake.ingest.{name}")
    except ImportError:
        return None
    return check(module, HERE / f"{name}.pyx")


fastpickle = load("_fastpickle")
speedups = load("_speedups")
