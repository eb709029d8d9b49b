"""The compiled passes of the dump parser (frlake/ingest/_speedups.pyx) and
its reader of pickles into columns (frlake/ingest/_fastpickle.pyx).

They are optional: where Cython or a C compiler is missing, or the build
fails, the install goes on without them and frlake runs the same passes in
Python (`frlake --version` says which it uses)."""

import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """build_ext that warns, instead of failing the install, when the extension cannot be built."""

    def run(self):
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - any failure to build leaves the Python passes
            self._skip(exc)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            self._skip(exc)

    def _skip(self, exc):
        print(f"frlake: the compiled parser was not built ({exc}); the parser runs in Python", file=sys.stderr)


try:
    from Cython.Build import cythonize
except ImportError:  # without Cython (a build without isolation): no extension
    extensions = []
else:
    import hashlib

    from setuptools import Extension

    # each module carries the sha256 of the source it was built from: frlake refuses a module whose .pyx
    # changed since (frlake/ingest/native.py)
    extensions = [
        ext
        for name in ("_speedups", "_fastpickle")
        for ext in cythonize(
            [Extension(f"frlake.ingest.{name}", [f"frlake/ingest/{name}.pyx"])],
            compile_time_env={"FRLAKE_SOURCE_SHA256": hashlib.sha256(
                open(f"frlake/ingest/{name}.pyx", "rb").read()).hexdigest()})
    ]

setup(ext_modules=extensions, cmdclass={"build_ext": OptionalBuildExt})
