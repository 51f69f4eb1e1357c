"""Metadata and DescribeCluster as a client sees them: the same requests sent to the broker and to the
sink, and the answers compared field by field once each side's own identity (its node id, its port,
its cluster id) is put in words: "the node it was asked", "its cluster" (docs/kafka-oracle.md)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kio.schema.describe_cluster.v1 import request as describe_cluster
from kio.schema.describe_cluster.v2 import request as describe_cluster_v2
from kio.schema.metadata.v4 import request as metadata_v4
from kio.schema.metadata.v10 import request as metadata_v10
from kio.schema.metadata.v12 import request as metadata_v12
from kio.schema.metadata.v13 import request as metadata_v13
from kio.schema.types import TopicName
from kio.static.primitive import i8

from tests.support.kafka_broker import KafkaOracle
from tests.support.process import Running

pytestmark = pytest.mark.integration

UNKNOWN = TopicName("oracle-no-such-topic")
"""A topic neither side has (requests below never let the broker create it)."""


async def _answers(oracle: KafkaOracle, sink: Running, request: Any) -> tuple[Any, Any, int, int]:
    """``request``'s response from the broker and from the sink, and the port each was asked on."""
    kafka, ours = await oracle.answers(sink.kafka_port, request)
    return kafka, ours, oracle.broker.plaintext_port, sink.kafka_port


def _node(nodes: tuple[Any, ...], port: int, id_field: str) -> tuple[int, list[tuple[Any, ...]]]:
    """The one node listed, as "itself" when it is the address the client asked: (its id, what is said)."""
    said = [
        ("itself" if (node.host, node.port) == ("127.0.0.1", port) else (node.host, node.port), node.rack)
        for node in nodes
    ]
    return getattr(nodes[0], id_field), said


def _metadata(answer: Any, port: int) -> dict[str, Any]:
    node_id, brokers = _node(answer.brokers, port, "node_id")
    return {
        "error": int(getattr(answer, "error_code", 0)),
        "cluster authorized operations": getattr(answer, "cluster_authorized_operations", None),
        "brokers": brokers,
        "controller": "itself" if answer.controller_id == node_id else answer.controller_id,
        "cluster id": bool(answer.cluster_id),
        "topics": [
            (
                int(t.error_code),
                t.name,
                t.is_internal,
                t.partitions,
                getattr(t, "topic_authorized_operations", None),
            )
            for t in answer.topics
        ],
    }


@pytest.mark.parametrize(
    "request_",
    [
        metadata_v12.MetadataRequest(topics=(), include_topic_authorized_operations=False),
        metadata_v12.MetadataRequest(
            topics=(metadata_v12.MetadataRequestTopic(name=UNKNOWN, topic_id=uuid.UUID(int=0)),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        ),
        metadata_v12.MetadataRequest(
            topics=(metadata_v12.MetadataRequestTopic(name=None, topic_id=uuid.uuid4()),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        ),
        metadata_v4.MetadataRequest(
            topics=(metadata_v4.MetadataRequestTopic(name=UNKNOWN),), allow_auto_topic_creation=False
        ),
        metadata_v13.MetadataRequest(
            topics=(metadata_v13.MetadataRequestTopic(name=UNKNOWN, topic_id=uuid.UUID(int=0)),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=True,
        ),
        metadata_v10.MetadataRequest(
            topics=(metadata_v10.MetadataRequestTopic(name=UNKNOWN, topic_id=uuid.UUID(int=0)),),
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=True,
            include_topic_authorized_operations=True,
        ),
    ],
    ids=[
        "v12 no topics",
        "v12 an unknown topic",
        "v12 an unknown topic id",
        "v4 an unknown topic",
        "v13 an unknown topic and its authorized operations (KF3-V2)",
        "v10 the cluster's and a topic's authorized operations (KF3-V6)",
    ],
)
async def test_metadata_describes_one_node_and_unknown_topics_as_the_broker_does(
    kafka_oracle: KafkaOracle, sink: Running, request_: Any
) -> None:
    kafka, ours, kafka_port, our_port = await _answers(kafka_oracle, sink, request_)
    assert _metadata(ours, our_port) == _metadata(kafka, kafka_port)
    assert _metadata(kafka, kafka_port)["brokers"] == [("itself", None)]


def _cluster(answer: Any, port: int) -> dict[str, Any]:
    node_id, brokers = _node(answer.brokers, port, "broker_id") if answer.brokers else (None, [])
    return {
        "fenced": [getattr(broker, "is_fenced", None) for broker in answer.brokers],
        "error": (int(answer.error_code), answer.error_message),
        "endpoint type": int(answer.endpoint_type),
        "brokers": brokers,
        "controller": "itself"
        if node_id is not None and answer.controller_id == node_id
        else answer.controller_id,
        "cluster id": bool(answer.cluster_id),
        "authorized operations": answer.cluster_authorized_operations,
    }


@pytest.mark.parametrize(
    "request_",
    [
        describe_cluster.DescribeClusterRequest(include_cluster_authorized_operations=False),
        describe_cluster.DescribeClusterRequest(
            include_cluster_authorized_operations=False, endpoint_type=i8(2)
        ),
        describe_cluster.DescribeClusterRequest(
            include_cluster_authorized_operations=False, endpoint_type=i8(3)
        ),
        describe_cluster.DescribeClusterRequest(include_cluster_authorized_operations=True),
        describe_cluster_v2.DescribeClusterRequest(
            include_cluster_authorized_operations=True, include_fenced_brokers=True
        ),
    ],
    ids=[
        "brokers",
        "controllers",
        "an unknown endpoint type",
        "authorized operations (KF3-V6)",
        "v2 with fenced brokers (KF3-V2)",
    ],
)
async def test_describe_cluster_answers_as_the_broker_does(
    kafka_oracle: KafkaOracle, sink: Running, request_: Any
) -> None:
    kafka, ours, kafka_port, our_port = await _answers(kafka_oracle, sink, request_)
    assert _cluster(ours, our_port) == _cluster(kafka, kafka_port)
