"""TEL-11..TEL-22 and the worked examples G-1..G-8, through ClientMetricsManager."""

from __future__ import annotations

from uuid import UUID

import pytest

from subscriptions import (
    ClientContext,
    ClientInstance,
    ClientMetricsConfig,
    ClientMetricsManager,
    CompressionType,
    ConfigError,
    Errors,
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
    compute_subscription_id,
    kafka_uuid_string,
)
from subscriptions.metrics import Sample
from tests.support.clock import T0
from tests.support.telemetry import CONTEXT, EXAMPLE_UUID, S1_ID, get, make_manager, push

THROTTLED = Errors.THROTTLING_QUOTA_EXCEEDED


def test_G_1_basic_gating() -> None:
    m = make_manager()
    first = get(m, 0)
    assert first.error_code == Errors.NONE
    assert first.subscription_id == S1_ID
    assert first.push_interval_ms == 30000
    assert first.requested_metrics == ("org.apache.kafka.producer.",)
    assert get(m, 1).error_code == THROTTLED
    assert push(m, 2).response.error_code == Errors.NONE
    assert push(m, 3).response.error_code == THROTTLED
    assert push(m, 30001).response.error_code == THROTTLED
    assert push(m, 30002).response.error_code == Errors.NONE
    assert get(m, 45000).error_code == THROTTLED
    assert get(m, 60002).error_code == Errors.NONE
    assert push(m, 60003).response.error_code == Errors.NONE


def test_G_2_terminating_push_then_next_pushes() -> None:
    m = make_manager()
    assert get(m, 0).error_code == Errors.NONE
    assert push(m, 10, terminating=True).response.error_code == Errors.NONE
    assert _terminating(m)
    assert push(m, 20, terminating=True).response.error_code == Errors.INVALID_REQUEST
    assert _terminating(m)
    assert push(m, 30).response.error_code == Errors.INVALID_REQUEST
    assert not _terminating(m)  # overwritten by the rejected push's flag
    assert push(m, 40).response.error_code == THROTTLED  # last_push is T0+10
    assert push(m, 30010).response.error_code == Errors.NONE


def test_G_2_TEL_18_terminating_push_bypasses_the_interval() -> None:
    m = make_manager()
    get(m, 0)
    assert push(m, 5).response.error_code == Errors.NONE
    assert push(m, 6, terminating=True).response.error_code == Errors.NONE
    assert push(m, 7).response.error_code == Errors.INVALID_REQUEST


def test_TEL_18_terminating_push_failing_later_checks_still_sets_terminating() -> None:
    m = make_manager()
    get(m, 0)
    outcome = push(m, 5, terminating=True, subscription_id=1234)
    assert outcome.response.error_code == Errors.UNKNOWN_SUBSCRIPTION_ID
    assert _terminating(m)
    assert push(m, 30005).response.error_code == Errors.INVALID_REQUEST


def test_TEL_18_get_ignores_terminating_and_reevaluation_resets_it() -> None:
    m = make_manager()
    get(m, 0)
    push(m, 5, terminating=True)
    assert get(m, 30005).error_code == Errors.NONE  # Get never looks at terminating
    m.store.update("s2", {"metrics": "x."})
    assert push(m, 30006, subscription_id=_all_matching_id(m)).response.error_code == 0


def _instance(m: ClientMetricsManager) -> ClientInstance:
    instance = m.instance(EXAMPLE_UUID)
    assert instance is not None
    return instance


def _terminating(m: ClientMetricsManager) -> bool:
    return _instance(m).terminating


def _all_matching_id(m: ClientMetricsManager) -> int:
    """The id when every stored subscription matches: ascending names, each in its set order."""
    metrics = [x for s in m.store.by_name() for x in s.metrics_in_set_order]
    interval = min(s.interval_ms for s in m.store.by_name())
    return compute_subscription_id(metrics, interval, EXAMPLE_UUID)


def test_G_3_TEL_13_subscription_change_recreates_the_instance() -> None:
    m = make_manager()
    assert get(m, 0).subscription_id == S1_ID
    assert push(m, 1).response.error_code == Errors.NONE
    m.store.update("s2", {"metrics": "*", "interval.ms": "20000"})
    assert m.store.version == 2
    assert push(m, 200).response.error_code == Errors.UNKNOWN_SUBSCRIPTION_ID
    instance = _instance(m)
    assert instance.subscription_id == -491455084
    assert instance.push_interval_ms == 20000
    assert instance.last_push_ms == T0 + 200  # the fresh instance accepted the push gate
    # PD-1: after 117 the next Get is allowed at once (Kafka's code answers 89 here)
    response = get(m, 201)
    assert response.error_code == Errors.NONE
    assert response.subscription_id == -491455084
    assert response.requested_metrics == ("*",)
    assert push(m, 202, subscription_id=-491455084).response.error_code == THROTTLED
    assert push(m, 20200, subscription_id=-491455084).response.error_code == Errors.NONE


def test_G_3_get_first_after_a_change_succeeds_at_once() -> None:
    m = make_manager()
    get(m, 0)
    m.store.update("s2", {"metrics": "*", "interval.ms": "20000"})
    response = get(m, 5)
    assert response.error_code == Errors.NONE
    assert response.subscription_id == -491455084


def test_TEL_13_reevaluation_keeps_attributes_and_resets_state() -> None:
    m = make_manager({"java": {"metrics": "a.", "match": "client_software_name=apache-kafka-java"}})
    get(m, 0)
    push(m, 1, subscription_id=_instance(m).subscription_id, terminating=True)
    m.store.update("other", {"metrics": "b.", "match": "client_id=nobody"})
    other_client = ClientContext(client_id="changed", client_software_name="librdkafka")
    assert get(m, 2, context=other_client).error_code == Errors.NONE
    instance = _instance(m)
    assert instance.context.client_software_name == "apache-kafka-java"
    assert instance.resolution.requested_metrics == ("a.",)
    assert not instance.terminating
    assert instance.last_error == Errors.NONE


def test_G_4_PD_1_wrong_id_then_immediate_get() -> None:
    m = make_manager()
    get(m, 0)
    assert push(m, 1, subscription_id=1234).response.error_code == Errors.UNKNOWN_SUBSCRIPTION_ID
    assert get(m, 2).error_code == Errors.NONE  # PD-1 (as coded in Kafka: 89)
    assert push(m, 3).response.error_code == THROTTLED  # last_get stayed at T0
    assert get(m, 4).error_code == THROTTLED  # one early Get per error


def test_PD_1_early_get_after_unsupported_compression() -> None:
    m = make_manager()
    get(m, 0)
    assert push(m, 1, compression=9).response.error_code == Errors.UNSUPPORTED_COMPRESSION_TYPE
    assert get(m, 2).error_code == Errors.NONE


def test_G_5_TEL_16_validation_order() -> None:
    m = make_manager(config=ClientMetricsConfig(telemetry_max_bytes=100))
    assert get(m, 0).error_code == Errors.NONE
    big = b"x" * 1000
    r = push(m, 1, subscription_id=1234, compression=9, metrics=big).response
    assert r.error_code == Errors.UNKNOWN_SUBSCRIPTION_ID
    r = push(m, 30001, compression=9, metrics=big).response
    assert r.error_code == Errors.UNSUPPORTED_COMPRESSION_TYPE
    r = push(m, 60001, compression=4, metrics=b"x" * 101).response
    assert r.error_code == Errors.TELEMETRY_TOO_LARGE
    outcome = push(m, 90001, compression=0, metrics=b"x" * 100)
    assert outcome.response.error_code == Errors.NONE
    assert outcome.accepted is not None
    r = push(m, 90002, compression=5, metrics=b"").response
    assert r.error_code == THROTTLED  # the interval is checked first


def test_G_6_TEL_21_exporter_failure_is_invalid_record() -> None:
    m = make_manager()
    get(m, 0)
    outcome = push(m, 1, metrics=b"123456789")
    assert outcome.accepted is not None
    response = m.push_failed(outcome.accepted, Errors.INVALID_RECORD, T0 + 1)
    assert response.error_code == Errors.INVALID_RECORD
    assert response.throttle_time_ms == 0
    instance = _instance(m)
    assert instance.last_error == Errors.INVALID_RECORD
    empty = push(m, 30001, metrics=b"")
    assert empty.response.error_code == Errors.NONE
    assert empty.accepted is None  # nothing to export


@pytest.mark.parametrize("instance_id", [None, UUID(int=0), UUID(int=1)])
def test_G_7_null_zero_or_reserved_id_push_is_invalid_request(instance_id: UUID | None) -> None:
    m = make_manager()
    assert push(m, 0, instance_id=instance_id).response.error_code == Errors.INVALID_REQUEST
    assert m.instance_count == 0  # nothing recorded


def test_G_8_push_to_a_broker_that_never_saw_the_instance() -> None:
    m = make_manager()
    assert push(m, 0).response.error_code == Errors.NONE
    assert m.instance_count == 1
    assert get(m, 1).error_code == THROTTLED


def test_TEL_11_zero_id_gets_a_fresh_usable_id() -> None:
    taken = UUID("11111111-1111-4111-8111-111111111111")
    candidates = iter(
        [
            UUID(int=0),
            UUID(int=1),
            UUID("f8000000-0000-4000-8000-000000000000"),  # Kafka string starts with '-'
            taken,  # already cached
            UUID("22222222-2222-4222-8222-222222222222"),
        ]
    )
    m = make_manager(new_uuid=lambda: next(candidates))
    assert get(m, 0, instance_id=taken).error_code == Errors.NONE
    assert kafka_uuid_string(UUID("f8000000-0000-4000-8000-000000000000")).startswith("-")
    response = get(m, 0, instance_id=UUID(int=0))
    assert response.client_instance_id == UUID("22222222-2222-4222-8222-222222222222")
    assert get(m, 0, instance_id=None).error_code == Errors.INVALID_REQUEST  # no candidates left


def test_TEL_11_generated_ids_are_random_v4() -> None:
    m = make_manager()
    ids = {get(m, 0, instance_id=None).client_instance_id for _ in range(50)}
    assert len(ids) == 50
    assert all(i.version == 4 and not kafka_uuid_string(i).startswith("-") for i in ids)


def test_TEL_11_any_other_id_is_used_as_given_even_the_reserved_one() -> None:
    m = make_manager()
    response = get(m, 0, instance_id=UUID(int=1))
    assert response.error_code == Errors.NONE
    assert response.client_instance_id == UUID(int=1)


def test_TEL_15_PD_4_successful_get_response_fields() -> None:
    m = make_manager(config=ClientMetricsConfig(telemetry_max_bytes=4096))
    assert get(m, 0) == GetTelemetrySubscriptionsResponse(
        throttle_time_ms=0,
        error_code=Errors.NONE,
        client_instance_id=EXAMPLE_UUID,  # echoed even though the client supplied it
        subscription_id=S1_ID,
        accepted_compression_types=(4, 3, 1, 2),
        push_interval_ms=30000,
        telemetry_max_bytes=4096,
        delta_temporality=True,
        requested_metrics=("org.apache.kafka.producer.",),
    )


def test_TEL_15_PD_7_throttled_get_carries_the_wait_and_defaults() -> None:
    m = make_manager()
    get(m, 0)
    assert get(m, 1000) == GetTelemetrySubscriptionsResponse(
        29000, THROTTLED, UUID(int=0), 0, (), 0, 0, False, ()
    )
    instance = _instance(m)
    assert instance.last_error == Errors.NONE  # a throttled Get does not change last_error


def test_TEL_15_nothing_subscribed_gives_empty_metrics_and_default_interval() -> None:
    response = get(make_manager({}), 0)
    assert response.requested_metrics == ()
    assert response.push_interval_ms == 300000
    assert response.subscription_id == -699715863


def test_PD_7_throttled_push_carries_the_wait() -> None:
    m = make_manager()
    get(m, 0)
    push(m, 1)
    assert push(m, 10001).response.throttle_time_ms == 20000


@pytest.mark.parametrize("compression", [0, 1, 2, 3, 4])
def test_TEL_19_PD_6_accepted_compression_ids(compression: int) -> None:
    m = make_manager()
    get(m, 0)
    outcome = push(m, 1, compression=compression)
    assert outcome.response.error_code == Errors.NONE
    assert outcome.accepted is not None
    assert outcome.accepted.compression_type == CompressionType(compression)


@pytest.mark.parametrize("compression", [5, 100, -1, 127, -128])
def test_TEL_19_other_compression_ids_are_unsupported(compression: int) -> None:
    m = make_manager()
    get(m, 0)
    r = push(m, 1, compression=compression).response
    assert r.error_code == Errors.UNSUPPORTED_COMPRESSION_TYPE


def test_TEL_20_telemetry_max_bytes_boundary() -> None:
    m = make_manager(config=ClientMetricsConfig(telemetry_max_bytes=10))
    get(m, 0)
    assert push(m, 1, metrics=b"x" * 10).response.error_code == Errors.NONE
    assert push(m, 30001, metrics=b"x" * 11).response.error_code == Errors.TELEMETRY_TOO_LARGE
    assert make_manager().config.telemetry_max_bytes == 1048576


def test_TEL_16_accepted_push_carries_payload_and_context() -> None:
    m = make_manager()
    get(m, 0)
    outcome = push(m, 7, compression=4, metrics=b"zstd-bytes", terminating=True)
    assert outcome.accepted is not None
    accepted = outcome.accepted
    assert accepted.client_instance_id == EXAMPLE_UUID
    assert accepted.subscription_id == S1_ID
    assert accepted.terminating is True
    assert accepted.metrics == b"zstd-bytes"
    assert accepted.context == CONTEXT
    assert accepted.received_ms == T0 + 7


def test_TEL_16_null_metrics_succeed_without_export() -> None:
    m = make_manager()
    get(m, 0)
    outcome = push(m, 1, metrics=None)
    assert outcome.response.error_code == Errors.NONE
    assert outcome.accepted is None


def test_TEL_22_unexpected_failure_is_invalid_request_not_a_crash() -> None:
    def broken_uuid() -> UUID:
        raise RuntimeError("entropy pool on fire")

    m = make_manager(new_uuid=broken_uuid)
    assert get(m, 0, instance_id=None).error_code == Errors.INVALID_REQUEST
    assert get(m, 0).error_code == Errors.NONE  # and the manager keeps working


def test_PD_12_transient_export_failure_is_throttled_until_next_push() -> None:
    m = make_manager()
    get(m, 0)
    outcome = push(m, 1000)
    assert outcome.accepted is not None
    response = m.push_failed(outcome.accepted, THROTTLED, T0 + 1000)
    assert response.error_code == THROTTLED
    assert response.throttle_time_ms == 30000
    assert push(m, 31000).response.error_code == Errors.NONE  # retried at the next interval


def test_PD_8_instances_bound_to_a_connection_go_when_it_closes() -> None:
    m = make_manager()
    wire = CONTEXT._replace(connection_id="conn-1")
    get(m, 0, context=wire)
    get(m, 0, instance_id=UUID(int=99))  # gRPC/HTTP: no connection
    assert m.connection_closed("conn-1") == 1
    assert m.instance(EXAMPLE_UUID) is None
    assert get(m, 1, context=wire).error_code == Errors.NONE  # simply re-created


def test_PD_9_first_get_allowed_even_with_a_clock_at_zero() -> None:
    m = make_manager()
    response = m.process_get(GetTelemetrySubscriptionsRequest(EXAMPLE_UUID), CONTEXT, 0)
    assert response.error_code == Errors.NONE


def test_TEL_12_expired_instance_is_recreated_with_fresh_timestamps() -> None:
    m = make_manager()
    get(m, 0)
    push(m, 1)
    assert m.expire(T0 + 1 + 90000) == 1  # 3 x 30000
    assert m.instance_count == 0
    assert get(m, 90002).error_code == Errors.NONE


def test_TEL_12_cache_capacity_from_config() -> None:
    m = make_manager(config=ClientMetricsConfig(cache_max_size=10))
    for n in range(25):
        get(m, 0, instance_id=UUID(int=n + 2))
    assert m.instance_count == 10


def test_TEL_24_counters() -> None:
    m = make_manager(config=ClientMetricsConfig(cache_max_size=1))
    get(m, 0)
    get(m, 1)
    push(m, 2)
    push(m, 3, instance_id=None)
    get(m, 4, instance_id=UUID(int=50))
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in m.samples()}
    p = "telemetry_sink_client_metrics_"
    assert samples[p + "instance_count", ()] == 1
    assert samples[p + "instance_evictions_total", ()] == 1
    assert samples[p + "requests_total", (("api", "GetTelemetrySubscriptions"),)] == 3
    assert samples[p + "requests_total", (("api", "PushTelemetry"),)] == 2
    throttled_get = (("api", "GetTelemetrySubscriptions"), ("code", "89"))
    assert samples[p + "errors_total", (*throttled_get, ("error", "THROTTLING_QUOTA_EXCEEDED"))] == 1
    invalid_push = (("api", "PushTelemetry"), ("code", "42"), ("error", "INVALID_REQUEST"))
    assert samples[p + "errors_total", invalid_push] == 1
    assert samples[p + "throttled_total", (("api", "GetTelemetrySubscriptions"),)] == 1
    assert samples[p + "accepted_pushes_total", ()] == 1
    assert all(isinstance(s, Sample) for s in m.samples())


def test_manager_rejects_invalid_config() -> None:
    with pytest.raises(ConfigError, match=r"telemetry\.max\.bytes"):
        make_manager(config=ClientMetricsConfig(telemetry_max_bytes=0))
