"""Each shared name has one home: the tables' names (``exporters.delta.schema`` for the tables the front
end writes, ``spark_jobs.tables`` for the Spark side's) and the quota-entity vocabulary
(``quotas.entities``). The scan reads the source's string literals (docstrings aside) and fails
on a table name or a Kafka entity type typed again outside its home."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import exporters.delta.schema as bronze
from quotas.entities import (
    CLIENT_ID_TAG,
    DEFAULT,
    ENTITY_FIELDS,
    IP_TAG,
    USER_TAG,
    ClientQuotaEntity,
    QuotaEntityError,
    entity_parts,
)
from spark_jobs import tables
from tests.support.paths import REPO

ROOT = REPO
PACKAGES = ("ingest", "exporters", "spark_jobs", "subscriptions", "telemetry_sink")
TABLE_HOMES = {
    ROOT / "exporters/delta/schema.py": {
        bronze.TELEMETRY_PUSHES_TABLE,
        bronze.QUOTA_SAMPLES_TABLE,
        bronze.CONFIG_LOG_TABLE,
    },
    ROOT / "spark_jobs/tables.py": {
        tables.METRIC_POINTS,
        tables.QUARANTINE,
        *tables.ROLLUP_TABLES,
        *tables.ACTIVITY_TABLES,
    },
}
ENTITY_HOME = ROOT / "quotas/entities.py"


def _code_strings(path: Path) -> Iterator[tuple[int, str]]:
    """The string constants of a module's code, with their lines: not its docstrings (a string
    expression statement, including the docstrings of attributes)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    skipped = docstrings | {  # and not the names in ``__all__`` (a function may share a table's name)
        id(element)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets)
        for element in ast.walk(node.value)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped:
            yield node.lineno, node.value


def _sources() -> Iterator[Path]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if not path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
                yield path


def test_every_table_name_is_typed_once_in_its_home_module() -> None:
    homes = {name: home for home, names in TABLE_HOMES.items() for name in names}
    retyped = [
        f"{path.relative_to(ROOT)}:{line} {text!r} (home: {homes[text].relative_to(ROOT)})"
        for path in _sources()
        for line, text in _code_strings(path)
        if text in homes and path != homes[text]
    ]
    assert retyped == []


def test_kafka_entity_types_are_typed_only_in_the_quota_engine() -> None:
    entity_types = set(ENTITY_FIELDS)
    retyped = [
        f"{path.relative_to(ROOT)}:{line} {text!r}"
        for path in _sources()
        if path != ENTITY_HOME
        for line, text in _code_strings(path)
        if text in entity_types
    ]
    assert retyped == []


def test_the_spark_side_names_the_front_ends_tables_with_the_front_ends_constants() -> None:
    assert (tables.BRONZE_PUSHES, tables.BRONZE_QUOTA_SAMPLES, tables.CONFIG_LOG) == (
        bronze.TELEMETRY_PUSHES_TABLE,
        bronze.QUOTA_SAMPLES_TABLE,
        bronze.CONFIG_LOG_TABLE,
    )
    assert bronze.BRONZE_TABLES == (bronze.TELEMETRY_PUSHES_TABLE, bronze.QUOTA_SAMPLES_TABLE)


def test_an_entity_is_built_from_kafkas_parts_with_none_for_the_default() -> None:
    entity = ClientQuotaEntity.from_parts({USER_TAG: "alice", CLIENT_ID_TAG: None})
    assert entity == ClientQuotaEntity(user="alice", client_id=DEFAULT)
    assert entity_parts(entity) == {USER_TAG: "alice", CLIENT_ID_TAG: DEFAULT}
    assert ClientQuotaEntity.from_parts({IP_TAG: "10.0.0.1"}) == ClientQuotaEntity(ip="10.0.0.1")


def test_an_unknown_entity_type_is_refused_with_kafkas_message() -> None:
    with pytest.raises(QuotaEntityError, match=r"^Unhandled client quota entity type: group$"):
        ClientQuotaEntity.from_parts({"group": "g"})
