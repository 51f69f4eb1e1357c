"""The admin plane: the operations on subscriptions, client quotas and client instances, and the config
log that makes every replica apply the same changes.

- ``operations``: ``SinkAdmin``, the operations whatever the transport, authorized on the CLUSTER
  resource as Kafka does it (``SuperUserAuthorizer``), validated, written to the config log.
- ``config_log``: the versioned records of every change in a Delta table shared by the replicas, and
  the image each replica builds by following it (Kafka's metadata log and ``ClientQuotasImage``).
- ``http_api``: the admin API over HTTP (``/admin/v1``), on the HTTP port.
- ``replicas``: the live sink replicas, announced in the data root, which the quota managers are told
  as KIP-257's cluster metadata.

The Kafka wire listener reaches the same operations for the client-quota RPCs
(``ingest.transports.kafka.apis``).
"""

from ingest.admin.config_log import ConfigImage, ConfigLog, ConfigLogFollower, QuotaChange
from ingest.admin.http_api import admin_routes
from ingest.admin.operations import QuotaAlteration, SinkAdmin, SuperUserAuthorizer
from ingest.admin.replicas import ReplicaDirectory

__all__ = [
    "ConfigImage",
    "ConfigLog",
    "ConfigLogFollower",
    "QuotaAlteration",
    "QuotaChange",
    "ReplicaDirectory",
    "SinkAdmin",
    "SuperUserAuthorizer",
    "admin_routes",
]
