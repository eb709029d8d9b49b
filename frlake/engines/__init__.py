"""Other engines over the same lake: the reports' SQL for Spark
(``transpile``) and the lake's views in a SparkSession (``spark``).
See docs/engines.md."""
