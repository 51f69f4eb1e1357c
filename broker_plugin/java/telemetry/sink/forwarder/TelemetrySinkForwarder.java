package telemetry.sink.forwarder;

import org.apache.kafka.server.telemetry.ClientTelemetryContext;
import org.apache.kafka.server.telemetry.ClientTelemetryExporter;
import org.apache.kafka.server.telemetry.ClientTelemetryExporterProvider;
import org.apache.kafka.server.telemetry.ClientTelemetryPayload;

/**
 * A Kafka broker plugin (a {@code metric.reporters} entry) that forwards every client-telemetry push
 * the broker accepts (KIP-714, through Kafka 4.2's {@code ClientTelemetryExporterProvider}) to
 * telemetry-sink over OTLP/HTTP, naming the client in resource attributes the sink reads (its
 * docs/forwarders.md and docs/broker-plugin.md):
 *
 * <ul>
 *   <li>{@code client_instance_id} (Kafka's base64url form), {@code client_id}, {@code principal}
 *       ({@code User:alice}), {@code client_source_address}, {@code node_id}, from Kafka's public
 *       plugin API and the broker's configs;
 *   <li>{@code client_software_name}, {@code client_software_version} and {@code client_source_port},
 *       which the public API does not carry, from the broker's own request context when it is the
 *       class this plugin was built against, and left out otherwise (a later broker);
 *   <li>{@code kafka.cluster.id} (the reporter's metrics context), {@code kafka.listener.name},
 *       {@code kafka.security.protocol}, {@code kafka.push.interval.ms} and {@code
 *       kafka.push.terminating}, kept by the sink in the landed resource.
 * </ul>
 *
 * <p>The labels are appended after the client's own resource attributes, so the broker's win
 * ({@link OtlpLabels}). A request thread only labels the payload and queues it ({@link SinkSender});
 * nothing it does waits on the sink. Brokers 3.7 to 4.1 load {@link LegacyTelemetrySinkForwarder}.
 */
public final class TelemetrySinkForwarder
    extends Forwarding implements ClientTelemetryExporterProvider, ClientTelemetryExporter {

  @Override
  public ClientTelemetryExporter clientTelemetryExporter() {
    return this;
  }

  @Override
  public void exportMetrics(ClientTelemetryContext context, ClientTelemetryPayload payload) {
    forward(context.authorizableRequestContext(), payload, context.pushIntervalMs());
  }
}
