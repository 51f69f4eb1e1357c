package telemetry.sink.oracle;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.metrics.MetricsReporter;
import org.apache.kafka.server.telemetry.ClientTelemetryExporter;
import org.apache.kafka.server.telemetry.ClientTelemetryExporterProvider;

/**
 * A metrics reporter that is a client-telemetry exporter provider and exports nothing: a Kafka broker
 * advertises GetTelemetrySubscriptions and PushTelemetry only when a reporter like this is configured
 * ({@code metric.reporters}), so the tests' broker loads it to answer the telemetry APIs as Kafka does.
 *
 * <p>It counts the pushes the broker hands it (the pushes the broker accepted). With the broker config
 * {@value #EXPORTS_FILE} set (the Kafka listener benchmark sets it), it writes that count to the file
 * named, ten times a second, replacing it whole; without it, nothing runs beside the count.
 */
public final class NoopTelemetryReporter implements MetricsReporter, ClientTelemetryExporterProvider {

  static final String EXPORTS_FILE = "telemetry.sink.oracle.exports.file";

  private final AtomicLong exports = new AtomicLong();
  private ScheduledExecutorService writer;

  @Override
  public void configure(Map<String, ?> configs) {
    Object file = configs.get(EXPORTS_FILE);
    if (file == null) {
      return;
    }
    Path path = Path.of(file.toString());
    Path next = path.resolveSibling(path.getFileName() + ".next");
    writer =
        Executors.newSingleThreadScheduledExecutor(
            task -> {
              Thread thread = new Thread(task, "telemetry-exports-count");
              thread.setDaemon(true);
              return thread;
            });
    writer.scheduleAtFixedRate(
        () -> {
          try {
            Files.writeString(next, Long.toString(exports.get()), StandardCharsets.US_ASCII);
            Files.move(next, path, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
          } catch (IOException e) {
            throw new UncheckedIOException(e);
          }
        },
        0,
        100,
        TimeUnit.MILLISECONDS);
  }

  @Override
  public void init(List<KafkaMetric> metrics) {}

  @Override
  public void metricChange(KafkaMetric metric) {}

  @Override
  public void metricRemoval(KafkaMetric metric) {}

  @Override
  public void close() {
    if (writer != null) {
      writer.shutdownNow();
    }
  }

  @Override
  public ClientTelemetryExporter clientTelemetryExporter() {
    return (context, payload) -> exports.incrementAndGet();
  }
}
