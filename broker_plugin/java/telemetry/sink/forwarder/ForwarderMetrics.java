package telemetry.sink.forwarder;

import java.util.List;
import java.util.function.IntSupplier;
import java.util.function.LongSupplier;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.metrics.JmxReporter;
import org.apache.kafka.common.metrics.KafkaMetricsContext;
import org.apache.kafka.common.metrics.MetricConfig;
import org.apache.kafka.common.metrics.Metrics;
import org.apache.kafka.common.metrics.Sensor;
import org.apache.kafka.common.metrics.stats.Avg;
import org.apache.kafka.common.metrics.stats.CumulativeSum;
import org.apache.kafka.common.metrics.stats.Max;
import org.apache.kafka.common.metrics.stats.Rate;
import org.apache.kafka.common.utils.Time;

/**
 * The forwarder's own metrics, as Kafka metrics on the broker's JMX: {@code
 * kafka.server:type=telemetry-sink-forwarder}, attributes {@code forwarded-total}, {@code
 * forwarded-rate}, {@code dropped-total} (the queue was full, or a push waited past {@code
 * delivery.timeout.ms}), {@code rejected-total} (the sink refused it for good), {@code
 * malformed-total} (not an OTLP protobuf payload), {@code retried-total} (requests retried), {@code
 * queue-size}, {@code request-latency-avg} and {@code -max} (ms) and {@code retry-backoff-ms} (the
 * wait before the next attempt: 0 while the sink answers, up to {@code retry.backoff.max.ms} while
 * the breaker is open).
 */
final class ForwarderMetrics implements AutoCloseable {

  static final String GROUP = "telemetry-sink-forwarder";

  private final Metrics metrics;
  private final Sensor forwarded;
  private final Sensor dropped;
  private final Sensor rejected;
  private final Sensor malformed;
  private final Sensor retried;
  private final Sensor latency;

  ForwarderMetrics(IntSupplier queueSize, LongSupplier backoffMs) {
    metrics =
        new Metrics(new MetricConfig(), List.of(new JmxReporter()), Time.SYSTEM,
            new KafkaMetricsContext("kafka.server"));
    forwarded = counter("forwarded", "pushes the sink accepted", true);
    dropped = counter("dropped", "pushes dropped: the queue was full, or one waited too long", false);
    rejected = counter("rejected", "pushes the sink refused for good", false);
    malformed = counter("malformed", "pushes that were not OTLP protobuf", false);
    retried = counter("retried", "requests to the sink retried", false);
    latency = metrics.sensor("request-latency");
    latency.add(name("request-latency-avg", "a request's round trip to the sink, ms"), new Avg());
    latency.add(name("request-latency-max", "the longest round trip to the sink, ms"), new Max());
    metrics.addMetric(name("queue-size", "pushes waiting to be forwarded"),
        (config, now) -> queueSize.getAsInt());
    metrics.addMetric(name("retry-backoff-ms", "the wait before the next attempt, ms"),
        (config, now) -> backoffMs.getAsLong());
  }

  private Sensor counter(String what, String description, boolean rate) {
    Sensor sensor = metrics.sensor(what);
    sensor.add(name(what + "-total", description), new CumulativeSum());
    if (rate) {
      sensor.add(name(what + "-rate", description + ", per second"), new Rate());
    }
    return sensor;
  }

  private MetricName name(String name, String description) {
    return metrics.metricName(name, GROUP, description);
  }

  void forwarded(int pushes, long latencyMs) {
    forwarded.record(pushes);
    latency.record(latencyMs);
  }

  void dropped(int pushes) {
    dropped.record(pushes);
  }

  void rejected(int pushes) {
    rejected.record(pushes);
  }

  void malformed() {
    malformed.record();
  }

  void retried() {
    retried.record();
  }

  @Override
  public void close() {
    metrics.close();
  }
}
