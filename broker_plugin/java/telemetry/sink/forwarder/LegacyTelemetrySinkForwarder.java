package telemetry.sink.forwarder;

import org.apache.kafka.server.authorizer.AuthorizableRequestContext;
import org.apache.kafka.server.telemetry.ClientTelemetryPayload;

/**
 * {@link TelemetrySinkForwarder} for brokers 3.7 to 4.1, through the client-telemetry interface they
 * have ({@code ClientTelemetry}, which Kafka 4.2 deprecated for {@code ClientTelemetryExporterProvider}):
 * the same labels and forwarding, but for {@code kafka.push.interval.ms}, which that interface does
 * not give. It references nothing those brokers lack.
 */
@SuppressWarnings({"deprecation", "removal"}) // the interface of the brokers it serves
public final class LegacyTelemetrySinkForwarder
    extends Forwarding
    implements org.apache.kafka.server.telemetry.ClientTelemetry,
        org.apache.kafka.server.telemetry.ClientTelemetryReceiver {

  @Override
  public org.apache.kafka.server.telemetry.ClientTelemetryReceiver clientReceiver() {
    return this;
  }

  @Override
  public void exportMetrics(AuthorizableRequestContext context, ClientTelemetryPayload payload) {
    forward(context, payload, null);
  }
}
