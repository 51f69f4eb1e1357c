package telemetry.sink.forwarder;

/**
 * One push the broker accepted, ready to forward: the client's {@code MetricsData} with the broker's
 * labels already added ({@link OtlpLabels}), how many {@code ResourceMetrics} it holds (the sink
 * takes a bounded number in one request), and when the broker handed it over.
 */
record ForwardedPush(byte[] labelled, int resourceMetrics, long acceptedAtMs) {}
