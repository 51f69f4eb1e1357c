"""The exporters' errors: one tree under ``ExporterError``.

An exporter answers a push with an ``ExportResult`` (SUCCESS, RETRYABLE or PERMANENT, ``base``), never
an exception: these are the errors of finding an exporter, of the Delta landing's commits and of
maintenance, raised to the sink or the command that asked, never answered to a client (the sink
answers a failed landing with a Kafka error code, docs/rules.md PD-12). The tree::

    ExporterError                      (an error of the exporters)
    ├── ExporterLoadError              also a ValueError: an exporter name or path that leads to no
    │                                  Exporter (``registry``)
    ├── AppendError                    a batch not committed after every attempt (``delta.appender``)
    ├── ClaimRefusedError              this process must not write as its writer id now; never retried
    │   │                              (``delta.writer_claim``)
    │   ├── WriterIdInUseError         another live process holds the writer id
    │   └── WriterFencedError          another process took the writer id over from this one
    └── RetentionTooShortError         also a ValueError: a vacuum retention under
                                       ``MIN_RETENTION_HOURS`` (``delta.maintenance``)

Each error is defined beside the code that raises it; a test checks that every exception class of the
package is in this tree.
"""

from __future__ import annotations

__all__ = ["ExporterError"]


class ExporterError(Exception):
    """An error of the exporters (see the module docstring for the tree)."""
