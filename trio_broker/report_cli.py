"""`trio-broker report`: the nightly lag and throughput report (PySpark, optional extra).

The lead's CLI calls `add_parser(subparsers)` while building its parser and `run(args)`
for the `report` command. Nothing here imports pyspark until the command runs, so the
broker and its other commands never need it.
"""

from __future__ import annotations

import argparse
import logging

__all__ = ["add_parser", "run"]

logger = logging.getLogger(__name__)


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the `report` subcommand to `subparsers` (from `add_subparsers`)."""
    from trio_broker.analytics.job import add_arguments

    parser = subparsers.add_parser(
        "report",
        help="write the lag and throughput report of broker log dirs (needs pyspark, Java 17)",
        description="Scan broker log dirs with Spark and write Parquet tables plus an HTML "
        "and Markdown report. Install with: pip install 'trio-broker[analytics]'.",
    )
    add_arguments(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    """Run the report for parsed `args`; 0 on success, 2 for bad arguments or setup."""
    from trio_broker.analytics.job import options_from_args

    try:
        options = options_from_args(args)
    except ValueError as exc:
        logger.error("%s", exc)
        return 2
    try:
        import pyspark  # noqa: F401
    except ImportError:
        logger.error("pyspark is not installed: pip install 'trio-broker[analytics]'")
        return 2
    from trio_broker.analytics.job import build_session, run_report

    spark = build_session(options.master)
    try:
        result = run_report(spark, options)
    except FileNotFoundError as exc:
        logger.error("%s", exc)
        return 2
    finally:
        spark.stop()
    logger.info("tables written under %s", result.out)
    if result.html_path is not None:
        logger.info("report: %s and %s", result.html_path, result.markdown_path)
    for group in result.summary:
        logger.info(
            "group %s: %s, lag %s records, %.1f s",
            group["group"],
            group["status"],
            group["total_lag_records"],
            group["max_lag_seconds"] or 0.0,
        )
    return 0
