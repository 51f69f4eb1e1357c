"""The admin APIs on the wire, where Kafka's tools never go: the same hand-made DescribeConfigs,
IncrementalAlterConfigs, AlterConfigs and DescribeUserScramCredentials requests (kio's schemas) sent to
the real broker and to the sink's Kafka listener, and their answers compared field by field
(docs/kafka-oracle.md)."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.alter_client_quotas.v1 import request as alter_quotas
from kio.schema.alter_configs.v2 import request as alter
from kio.schema.describe_configs.v4 import request as describe
from kio.schema.describe_user_scram_credentials.v0 import request as scram
from kio.schema.incremental_alter_configs.v1 import request as incremental
from kio.schema.list_config_resources.v1 import request as listed
from kio.static.primitive import f64, i8

from tests.support.kafka import KafkaClient
from tests.support.kafka_broker import KafkaOracle
from tests.support.process import Running

pytestmark = pytest.mark.integration

CLIENT_METRICS = i8(16)
SET, DELETE, APPEND = i8(0), i8(1), i8(2)


async def _answers(oracle: KafkaOracle, sink: Running, request: Any) -> tuple[Any, Any]:
    """``request``'s response from the broker and from the sink."""
    return await oracle.answers(sink.kafka_port, request)


def _results(response: Any) -> list[tuple[int, str | None, str]]:
    return [(int(r.error_code), r.error_message, r.resource_name) for r in response.responses]


def _set(name: str, value: str | None, operation: i8 = SET) -> incremental.AlterableConfig:
    return incremental.AlterableConfig(name=name, config_operation=operation, value=value)


def _resource(name: str, *configs: incremental.AlterableConfig) -> incremental.AlterConfigsResource:
    return incremental.AlterConfigsResource(resource_type=CLIENT_METRICS, resource_name=name, configs=configs)


@pytest.mark.parametrize(
    "resources",
    [
        (_resource("wire-null", _set("interval.ms", None)),),
        (_resource("wire-null", _set("metrics", None, APPEND), _set("interval.ms", None)),),
        (_resource("wire-dup-key", _set("interval.ms", "1000"), _set("interval.ms", "2000")),),
        (
            _resource("wire-twice", _set("interval.ms", "1000")),
            _resource("wire-twice", _set("interval.ms", "2000")),
        ),
        (_resource("wire-ok", _set("interval.ms", "1000")), _resource("wire-ok", _set("metrics", "a"))),
        (_resource("wire-delete", _set("interval.ms", None, DELETE)),),
    ],
    ids=[
        "null SET",
        "null APPEND and SET",
        "a key twice",
        "a resource twice",
        "a valid resource twice",
        "null DELETE",
    ],
)
async def test_KF3_C_6_malformed_incremental_alter_configs_are_refused_as_kafka_refuses_them(
    kafka_oracle: KafkaOracle, sink: Running, resources: tuple[incremental.AlterConfigsResource, ...]
) -> None:
    request = incremental.IncrementalAlterConfigsRequest(resources=resources, validate_only=True)
    kafka, ours = await _answers(kafka_oracle, sink, request)
    assert _results(ours) == _results(kafka)


async def test_KF3_C_8_a_null_value_in_alter_configs_is_refused_as_kafka_refuses_it(
    kafka_oracle: KafkaOracle, sink: Running
) -> None:
    request = alter.AlterConfigsRequest(
        resources=(
            alter.AlterConfigsResource(
                resource_type=CLIENT_METRICS,
                resource_name="wire-legacy",
                configs=(alter.AlterableConfig(name="interval.ms", value=None),),
            ),
        ),
        validate_only=True,
    )
    kafka, ours = await _answers(kafka_oracle, sink, request)
    assert _results(ours) == _results(kafka)


async def _made_and_described(
    oracle: KafkaOracle,
    sink: Running,
    name: str,
    keys: tuple[str, ...] | None,
    *,
    synonyms: bool = False,
    documentation: bool = False,
) -> tuple[Any, Any]:
    """A subscription made on both (interval and metrics set, match left out), then described."""
    made = incremental.IncrementalAlterConfigsRequest(
        resources=(_resource(name, _set("interval.ms", "60000"), _set("metrics", "org.apache.kafka.")),),
        validate_only=False,
    )
    await _answers(oracle, sink, made)
    resource = describe.DescribeConfigsResource(
        resource_type=CLIENT_METRICS, resource_name=name, configuration_keys=keys
    )
    request = describe.DescribeConfigsRequest(
        resources=(resource,), include_synonyms=synonyms, include_documentation=documentation
    )
    return await _answers(oracle, sink, request)


@pytest.mark.parametrize("keys", [None, ()], ids=["null keys", "empty keys"])
async def test_KF3_C_3_describe_configs_with_no_key_list_describes_every_key_as_kafka(
    kafka_oracle: KafkaOracle, sink: Running, keys: tuple[str, ...] | None
) -> None:
    kafka, ours = await _made_and_described(kafka_oracle, sink, "wire-described", keys)

    def configs(response: Any) -> list[tuple[int, str | None, str, str | None]]:
        [result] = response.results
        return [
            (int(result.error_code), result.error_message, c.name, c.value)
            for c in sorted(result.configs, key=lambda c: c.name)
        ]

    assert configs(ours) == configs(kafka)
    assert len(configs(kafka)) == 3


async def test_KF3_C_4_describing_a_client_metrics_resource_without_a_name_answers_as_kafka(
    kafka_oracle: KafkaOracle, sink: Running
) -> None:
    request = describe.DescribeConfigsRequest(
        resources=(
            describe.DescribeConfigsResource(
                resource_type=CLIENT_METRICS, resource_name="", configuration_keys=None
            ),
        )
    )
    kafka, ours = await _answers(kafka_oracle, sink, request)
    [k], [o] = kafka.results, ours.results
    assert (int(o.error_code), o.error_message, len(o.configs)) == (
        int(k.error_code),
        k.error_message,
        len(k.configs),
    )


async def test_KF3_C_2_a_set_key_is_described_with_its_one_synonym_as_kafka(
    kafka_oracle: KafkaOracle, sink: Running
) -> None:
    kafka, ours = await _made_and_described(kafka_oracle, sink, "wire-synonyms", None, synonyms=True)

    def configs(response: Any) -> list[tuple[Any, ...]]:
        [result] = response.results
        return [
            (c.name, c.value, int(c.config_source), [(s.name, s.value, int(s.source)) for s in c.synonyms])
            for c in sorted(result.configs, key=lambda c: c.name)
        ]

    assert configs(ours) == configs(kafka)


async def test_KF3_C_2_each_key_is_described_with_its_documentation_as_kafka(
    kafka_oracle: KafkaOracle, sink: Running
) -> None:
    kafka, ours = await _made_and_described(kafka_oracle, sink, "wire-documented", None, documentation=True)

    def documented(response: Any) -> list[tuple[str, str | None]]:
        [result] = response.results
        return sorted((c.name, c.documentation) for c in result.configs)

    assert documented(ours) == documented(kafka)
    assert all(text for _, text in documented(kafka))


async def test_describing_unknown_and_repeated_scram_users_answers_as_kafka(
    kafka_oracle: KafkaOracle, sink: Running
) -> None:
    names = ("wire-nobody", "wire-twice", "wire-twice")
    request = scram.DescribeUserScramCredentialsRequest(users=tuple(scram.UserName(name=n) for n in names))
    kafka, ours = await _answers(kafka_oracle, sink, request)

    def results(response: Any) -> list[tuple[str, int, str | None]]:
        return sorted((r.user, int(r.error_code), r.error_message) for r in response.results)

    assert (int(ours.error_code), results(ours)) == (int(kafka.error_code), results(kafka))


SUBTRACT = i8(3)


@pytest.mark.parametrize(
    "operations",
    [
        (_set("metrics", "org.apache.kafka.producer.", APPEND),),
        (_set("metrics", "org.apache.kafka.", SUBTRACT),),
        (_set("match", "client_id=wire-.*", APPEND),),
        (_set("interval.ms", "1000", APPEND),),
        (_set("no.such.key", "1", SUBTRACT),),
        (_set("metrics", "a", SET), _set("metrics", "b", APPEND)),
    ],
    ids=[
        "APPEND metrics",
        "SUBTRACT metrics",
        "APPEND match",
        "APPEND interval.ms",
        "SUBTRACT an unknown key",
        "SET then APPEND",
    ],
)
async def test_KF3_C_7_append_and_subtract_on_a_subscription_answer_as_kafka(
    kafka_oracle: KafkaOracle, sink: Running, operations: tuple[incremental.AlterableConfig, ...]
) -> None:
    """On a subscription that exists (metrics and interval set), then described: what each list
    operation did, on both."""
    await _made_and_described(kafka_oracle, sink, "wire-lists", ())
    request = incremental.IncrementalAlterConfigsRequest(
        resources=(_resource("wire-lists", *operations),), validate_only=False
    )
    kafka, ours = await _answers(kafka_oracle, sink, request)
    assert _results(ours) == _results(kafka)
    described_kafka, described_ours = await _made_and_described(kafka_oracle, sink, "wire-lists", ())

    def configs(response: Any) -> list[tuple[str, str | None]]:
        [result] = response.results
        return sorted((c.name, c.value) for c in result.configs)

    assert configs(described_ours) == configs(described_kafka)


TOPIC, BROKER, GROUP = i8(2), i8(4), i8(32)
CONNECTION_KEYS = {"max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides"}


@pytest.mark.parametrize(
    "types",
    [(), (CLIENT_METRICS,), (BROKER,), (TOPIC,), (GROUP,), (CLIENT_METRICS, BROKER), (i8(8),), (i8(99),)],
    ids=[
        "every type",
        "client metrics",
        "brokers",
        "topics",
        "groups",
        "client metrics and brokers",
        "broker loggers",
        "an unknown type",
    ],
)
async def test_KF3_C_17_list_config_resources_of_each_type_answers_as_kafka(
    kafka_oracle: KafkaOracle, sink: Running, types: tuple[i8, ...]
) -> None:
    """After a subscription made on both: what each side lists for these types (error code, and the
    resources by type: a subscription by its name, a broker as "itself")."""
    await _made_and_described(kafka_oracle, sink, "wire-listed", ())
    request = listed.ListConfigResourcesRequest(resource_types=types)
    kafka, ours = await _answers(kafka_oracle, sink, request)

    def resources(response: Any, node: str) -> tuple[int, list[tuple[int, str]]]:
        found = [
            (
                int(r.resource_type),
                "itself"
                if r.resource_type != CLIENT_METRICS and r.resource_name == node
                else r.resource_name,
            )
            for r in response.config_resources
            if r.resource_type != CLIENT_METRICS or r.resource_name.startswith("wire-")
        ]
        return int(response.error_code), sorted(found)

    assert resources(ours, "0") == resources(kafka, "1")


@pytest.mark.parametrize("keys", [None, ("max.connections",)], ids=["every key", "one key"])
async def test_KF3_C_15_describing_the_cluster_default_broker_configs_answers_as_kafka(
    kafka_oracle: KafkaOracle, sink: Running, keys: tuple[str, ...] | None
) -> None:
    """BROKER "" (the cluster-wide default): a broker describes only the dynamic defaults set, never its
    static configs. Compared: the keys the sink has (the connection limits; a broker has many more,
    docs/kafka-oracle.md)."""
    request = describe.DescribeConfigsRequest(
        resources=(
            describe.DescribeConfigsResource(resource_type=BROKER, resource_name="", configuration_keys=keys),
        )
    )
    kafka, ours = await _answers(kafka_oracle, sink, request)

    def configs(response: Any) -> list[tuple[Any, ...]]:
        [result] = response.results
        ours = sorted(
            (c.name, c.value, int(c.config_source)) for c in result.configs if c.name in CONNECTION_KEYS
        )
        return [(int(result.error_code), result.error_message), *ours]

    assert configs(ours) == configs(kafka)


async def test_KF3_C_2_a_broker_key_is_documented_in_the_sinks_words_where_a_broker_uses_its_own(
    kafka_oracle: KafkaOracle, sink: Running
) -> None:
    """A deliberate difference (docs/kafka-oracle.md): asked for documentation, both describe every
    connection key with some, the same keys typed the same; the sink's words are its own, since a
    broker's speak of its inter-broker listener."""
    keys = (*sorted(CONNECTION_KEYS), "max.connection.creation.rate")

    async def documented(port: int, node: str) -> dict[str, tuple[int, str]]:
        resource = describe.DescribeConfigsResource(
            resource_type=BROKER, resource_name=node, configuration_keys=keys
        )
        request = describe.DescribeConfigsRequest(
            resources=(resource,), include_synonyms=False, include_documentation=True
        )
        client = await KafkaClient.connect(port)
        try:
            [result] = (await client.request(request)).results
        finally:
            client.close()
        return {c.name: (int(c.config_type), c.documentation) for c in result.configs}

    theirs = await documented(kafka_oracle.broker.plaintext_port, "1")
    mine = await documented(sink.kafka_port, "0")
    assert sorted(mine) == sorted(theirs) == sorted(keys)
    assert {k: t for k, (t, _) in mine.items()} == {k: t for k, (t, _) in theirs.items()}
    assert all(text for _, text in (*mine.values(), *theirs.values()))
    assert all(mine[key][1] != theirs[key][1] for key in keys)


MUTATOR = "oracle-mutator"
"""The client id of the mutation-quota scenario below, quota'd for it alone."""


async def _mutation_quota(port: int, rate: float | None) -> None:
    """Set (None: remove) ``MUTATOR``'s ``controller_mutation_rate``."""
    entry = alter_quotas.EntryData(
        entity=(alter_quotas.EntityData(entity_type="client-id", entity_name=MUTATOR),),
        ops=(
            alter_quotas.OpData(key="controller_mutation_rate", value=f64(rate or 0.0), remove=rate is None),
        ),
    )
    client = await KafkaClient.connect(port)
    try:
        answer = await client.request(
            alter_quotas.AlterClientQuotasRequest(entries=(entry,), validate_only=False)
        )
        assert [int(e.error_code) for e in answer.entries] == [0], answer
    finally:
        client.close()


async def _subscription_changes(port: int, count: int) -> list[tuple[int, bool]]:
    """``count`` changes of one subscription by ``MUTATOR``: each one's error code and whether it was
    throttled."""
    client = await KafkaClient.connect(port)
    said = []
    try:
        for n in range(count):
            request = incremental.IncrementalAlterConfigsRequest(
                resources=(_resource("wire-mutations", _set("interval.ms", str(60_000 + n))),),
                validate_only=False,
            )
            answer = await client.request(request, client_id=MUTATOR)
            said.append((int(answer.responses[0].error_code), answer.throttle_time.total_seconds() > 0))
    finally:
        client.close()
    return said


async def test_the_mutation_quota_holds_subscription_changes_on_the_sink_and_never_on_a_broker(
    kafka_oracle: KafkaOracle, sink: Running
) -> None:
    """A deliberate difference (docs/kafka-oracle.md, KF3-D25): a broker charges only topic and partition
    changes to ``controller_mutation_rate``; the sink, which has none, charges its admin changes, so a
    client over the quota is refused THROTTLING_QUOTA_EXCEEDED (strict, the default) where a broker
    accepts every change unthrottled."""
    seen = []
    for port in (kafka_oracle.broker.plaintext_port, sink.kafka_port):
        await _mutation_quota(port, 1.0)  # a burst of about 11 changes, then one a second
        try:
            seen.append(await _subscription_changes(port, 40))
        finally:
            await _mutation_quota(port, None)
    kafka, ours = seen
    assert kafka == [(0, False)] * 40
    assert ours[0] == (0, False)
    assert (89, True) in ours  # THROTTLING_QUOTA_EXCEEDED, with the time to wait
