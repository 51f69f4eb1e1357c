"""The Spark side's errors: one tree under ``SparkJobError``. The tree::

    SparkJobError                      (an error of the rollups, the dashboard or the SQL server)
    ├── LakeError                      a Delta table cannot be read or written as asked (``lake``)
    ├── _InvalidPushError              a landed push does not decode; its message is the quarantine
    │                                  reason (``transforms.decode``, caught there)
    └── _InvalidPointError             one data point breaks the OTLP data model (``transforms.decode``,
                                       caught there and turned into an ``_InvalidPushError``)

Each error is defined beside the code that raises it; a test checks that every exception class of the
package is in this tree.
"""

from __future__ import annotations

__all__ = ["SparkJobError"]


class SparkJobError(Exception):
    """An error of the Spark side (see the module docstring for the tree)."""
