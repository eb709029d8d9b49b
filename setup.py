"""The compiled passes of the dump parser (frlake/ingest/_speedups.pyx).

They are optional: where no C compiler is at hand the build goes on without
them and frlake runs the same passes in Python (`frlake --version` says
which it uses)."""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(ext_modules=cythonize(
    [Extension("frlake.ingest._speedups", ["frlake/ingest/_speedups.pyx"], optional=True)],
    compiler_directives={"language_level": "3"},
))
