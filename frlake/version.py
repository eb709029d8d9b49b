"""frlake's version, in a module of its own so that any part can read it without importing the package's
facade (frlake/__init__.py). pyproject.toml gives the same number."""

__version__ = "0.2.0"
