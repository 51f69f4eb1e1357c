package telemetry.sink.oracle;

import java.util.List;
import java.util.Map;
import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.metrics.MetricsReporter;
import org.apache.kafka.server.telemetry.ClientTelemetryExporter;
import org.apache.kafka.server.telemetry.ClientTelemetryExporterProvider;

/**
 * A metrics reporter that is a client-telemetry exporter provider and exports nothing: a Kafka broker
 * advertises GetTelemetrySubscriptions and PushTelemetry only when a reporter like this is configured
 * ({@code metric.reporters}), so the tests' broker loads it to answer the telemetry APIs as Kafka does.
 */
public final class NoopTelemetryReporter implements MetricsReporter, ClientTelemetryExporterProvider {

  @Override
  public void configure(Map<String, ?> configs) {}

  @Override
  public void init(List<KafkaMetric> metrics) {}

  @Override
  public void metricChange(KafkaMetric metric) {}

  @Override
  public void metricRemoval(KafkaMetric metric) {}

  @Override
  public void close() {}

  @Override
  public ClientTelemetryExporter clientTelemetryExporter() {
    return (context, payload) -> {};
  }
}
