"""The exporters' errors form one tree under ``ExporterError``, drawn in ``exporters.errors``."""

from __future__ import annotations

import exporters.errors
from exporters import ExporterError, ExporterLoadError
from exporters.delta.maintenance import RetentionTooShortError
from tests.support.error_tree import exception_classes, outside_the_tree


def test_every_exception_class_of_the_exporters_is_in_the_one_tree() -> None:
    assert len(exception_classes("exporters")) >= 7  # the scan finds them: the root and six errors
    assert outside_the_tree("exporters", ExporterError, exporters.errors.__doc__) == []


def test_the_errors_that_were_value_errors_still_are() -> None:
    assert issubclass(ExporterLoadError, ValueError)
    assert issubclass(RetentionTooShortError, ValueError)
