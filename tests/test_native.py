"""The compiled reader is loaded in one place (frlake/ingest/native.py), and a build of other sources than
the .pyx beside it is refused with the command that rebuilds it, never run as old code."""

from __future__ import annotations

import shutil

import pytest

from frlake.errors import StaleBuild
from frlake.ingest import native


@pytest.mark.parametrize("name", ["_fastpickle", "_speedups"])
def test_a_build_of_its_own_sources_loads_and_an_edited_source_is_refused(name, tmp_path):
    module = native.load(name)
    if module is None:
        pytest.skip("built without a C compiler: the Python passes run")
    source = native.HERE / f"{name}.pyx"
    assert native.check(module, source) is module
    edited = tmp_path / source.name
    shutil.copyfile(source, edited)
    with edited.open("a") as f:
        f.write("\n# an edit that was never compiled\n")
    with pytest.raises(StaleBuild, match=r"built from another .*\.pyx.* rebuild it with pip install -e \."):
        native.check(module, edited)
    assert native.check(module, tmp_path / "absent.pyx") is module  # an install without its sources
