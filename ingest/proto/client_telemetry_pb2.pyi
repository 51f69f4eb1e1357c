from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class GetTelemetrySubscriptionsRequest(_message.Message):
    __slots__ = ("client_instance_id",)
    CLIENT_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    client_instance_id: bytes
    def __init__(self, client_instance_id: _Optional[bytes] = ...) -> None: ...

class GetTelemetrySubscriptionsResponse(_message.Message):
    __slots__ = ("throttle_time_ms", "error_code", "client_instance_id", "subscription_id", "accepted_compression_types", "push_interval_ms", "telemetry_max_bytes", "delta_temporality", "requested_metrics")
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    CLIENT_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_ID_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_COMPRESSION_TYPES_FIELD_NUMBER: _ClassVar[int]
    PUSH_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    TELEMETRY_MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    DELTA_TEMPORALITY_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_METRICS_FIELD_NUMBER: _ClassVar[int]
    throttle_time_ms: int
    error_code: int
    client_instance_id: bytes
    subscription_id: int
    accepted_compression_types: _containers.RepeatedScalarFieldContainer[int]
    push_interval_ms: int
    telemetry_max_bytes: int
    delta_temporality: bool
    requested_metrics: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, throttle_time_ms: _Optional[int] = ..., error_code: _Optional[int] = ..., client_instance_id: _Optional[bytes] = ..., subscription_id: _Optional[int] = ..., accepted_compression_types: _Optional[_Iterable[int]] = ..., push_interval_ms: _Optional[int] = ..., telemetry_max_bytes: _Optional[int] = ..., delta_temporality: _Optional[bool] = ..., requested_metrics: _Optional[_Iterable[str]] = ...) -> None: ...

class PushTelemetryRequest(_message.Message):
    __slots__ = ("client_instance_id", "subscription_id", "terminating", "compression_type", "metrics")
    CLIENT_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_ID_FIELD_NUMBER: _ClassVar[int]
    TERMINATING_FIELD_NUMBER: _ClassVar[int]
    COMPRESSION_TYPE_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    client_instance_id: bytes
    subscription_id: int
    terminating: bool
    compression_type: int
    metrics: bytes
    def __init__(self, client_instance_id: _Optional[bytes] = ..., subscription_id: _Optional[int] = ..., terminating: _Optional[bool] = ..., compression_type: _Optional[int] = ..., metrics: _Optional[bytes] = ...) -> None: ...

class PushTelemetryResponse(_message.Message):
    __slots__ = ("throttle_time_ms", "error_code")
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    throttle_time_ms: int
    error_code: int
    def __init__(self, throttle_time_ms: _Optional[int] = ..., error_code: _Optional[int] = ...) -> None: ...
