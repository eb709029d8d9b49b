"""Living with a lake for years: forget what is no longer wanted (and keep N
days), and compact small Parquet files. Both publish through frlake.publish,
under the lake's write lock, so readers see each change whole or not at all."""

from frlake.lifecycle.compact import CompactOptions, CompactSummary, compact
from frlake.lifecycle.forget import ForgetOptions, ForgetSummary, forget

__all__ = ["CompactOptions", "CompactSummary", "ForgetOptions", "ForgetSummary", "compact", "forget"]
