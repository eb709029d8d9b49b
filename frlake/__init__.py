"""frlake: offline storage, diagnosis and SQL for PyTorch Flight Recorder dumps.

Everything goes through one session object::

    import frlake

    with frlake.Frlake.open("frlake-lake") as fl:
        summary = fl.ingest(["samples/fr"])
        print(fl.diagnose("job-5f5228").summary)
"""

from frlake.version import __version__

__all__ = ["Frlake", "Settings", "__version__"]


def __getattr__(name: str):
    if name == "Frlake":
        from frlake.session import Frlake

        return Frlake
    if name == "Settings":
        from frlake.config import Settings

        return Settings
    raise AttributeError(f"module 'frlake' has no attribute {name!r}")
