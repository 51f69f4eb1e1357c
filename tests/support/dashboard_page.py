"""The data a built dashboard page carries: the named queries' answers embedded in its
``dashboard-data`` script, read back as the tests check them."""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["PageData", "page_data", "records"]

PageData = dict[str, dict[str, Any]]


def page_data(html: str) -> PageData:
    """Every named query's answer on the page (``columns`` and ``rows``), by query name."""
    found = re.search(r'<script type="application/json" id="dashboard-data">(.*?)</script>', html, re.S)
    assert found is not None
    data: PageData = json.loads(found.group(1))
    return data


def records(data: PageData, name: str) -> list[dict[str, Any]]:
    """The answer of the query ``name`` as one dict per row."""
    columns = [str(c) for c in data[name]["columns"]]
    return [dict(zip(columns, row, strict=True)) for row in data[name]["rows"]]
