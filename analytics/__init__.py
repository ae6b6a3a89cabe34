"""The nightly report: a PySpark job over the broker's segment files.

Needs the `analytics` extra (pyspark, pyarrow) and Java 17. The broker never imports this
package; `trio-broker report` (trio_broker.report_cli) and spark-submit of
`analytics/job.py` do. See analytics/README.md.
"""
