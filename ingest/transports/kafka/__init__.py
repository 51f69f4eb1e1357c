"""The Kafka wire-protocol listener: unmodified Kafka clients (librdkafka, the Java client) and admin
tools talk to the sink in their own protocol, on one more transport into the same pipeline.

The flow: ``listener`` (TCP/TLS, connection quotas, frames, mute on throttle) -> ``sasl`` (on a SASL
listener, each connection's authentication) -> ``protocol`` (``kio`` schemas: headers, versions,
bodies) -> ``apis`` (ApiVersions, Metadata, DescribeCluster, the telemetry
RPCs through ``TelemetryPipeline``, the client-quota RPCs through ``SinkAdmin``).
"""

from ingest.transports.kafka.apis import KafkaApis, NodeInfo
from ingest.transports.kafka.listener import KAFKA_LISTENER, KafkaListener, ListenerLimits
from ingest.transports.kafka.protocol import SUPPORTED_VERSIONS
from ingest.transports.kafka.sasl import SaslSettings

__all__ = [
    "KAFKA_LISTENER",
    "SUPPORTED_VERSIONS",
    "KafkaApis",
    "KafkaListener",
    "ListenerLimits",
    "NodeInfo",
    "SaslSettings",
]
