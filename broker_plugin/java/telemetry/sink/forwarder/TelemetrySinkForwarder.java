package telemetry.sink.forwarder;

import java.net.InetAddress;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.metrics.MetricsContext;
import org.apache.kafka.common.metrics.MetricsReporter;
import org.apache.kafka.common.requests.RequestContext;
import org.apache.kafka.server.authorizer.AuthorizableRequestContext;
import org.apache.kafka.server.telemetry.ClientTelemetryContext;
import org.apache.kafka.server.telemetry.ClientTelemetryExporter;
import org.apache.kafka.server.telemetry.ClientTelemetryExporterProvider;
import org.apache.kafka.server.telemetry.ClientTelemetryPayload;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A Kafka broker plugin (a {@code metric.reporters} entry) that forwards every client-telemetry push
 * the broker accepts (KIP-714, Kafka 4.2's {@code ClientTelemetryExporterProvider}) to telemetry-sink
 * over OTLP/HTTP, naming the client in resource attributes the sink reads (its docs/forwarders.md):
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
 * nothing it does waits on the sink.
 */
public final class TelemetrySinkForwarder
    implements MetricsReporter, ClientTelemetryExporterProvider, ClientTelemetryExporter {

  private static final Logger log = LoggerFactory.getLogger(TelemetrySinkForwarder.class);
  /** What Kafka 4.4's payload says of OTLP protobuf ({@code ClientTelemetryPayload.contentType}). */
  private static final Set<String> OTLP = Set.of("OTLP", "application/x-protobuf");

  private volatile SinkSender sender;
  private Thread thread;
  private volatile String nodeId;
  private volatile String clusterId;
  private volatile boolean requestContextReadable = true;

  @Override
  public void configure(Map<String, ?> configs) {
    ForwarderConfig config = new ForwarderConfig(configs);
    Object node = configs.get("node.id");
    nodeId = node == null ? null : node.toString();
    sender = new SinkSender(config);
    thread = new Thread(sender, "telemetry-sink-forwarder");
    thread.setDaemon(true);
    thread.start();
    log.info("forwarding client telemetry to {}", config.getString(ForwarderConfig.ENDPOINT));
  }

  @Override
  public void contextChange(MetricsContext context) {
    Map<String, String> labels = context.contextLabels();
    clusterId = labels.getOrDefault("kafka.cluster.id", clusterId);
    String broker = labels.getOrDefault("kafka.broker.id", labels.get("kafka.node.id"));
    if (broker != null) {
      nodeId = broker;
    }
  }

  @Override
  public ClientTelemetryExporter clientTelemetryExporter() {
    return this;
  }

  @Override
  public void exportMetrics(ClientTelemetryContext context, ClientTelemetryPayload payload) {
    SinkSender to = sender;
    if (to == null) {
      return;
    }
    if (!OTLP.contains(payload.contentType())) {
      to.metrics().malformed();
      return;
    }
    AuthorizableRequestContext request = context.authorizableRequestContext();
    OtlpLabels labels =
        new OtlpLabels()
            .add("client_instance_id", payload.clientInstanceId().toString())
            .add("client_id", request.clientId())
            .add("principal", request.principal().toString());
    InetAddress address = request.clientAddress();
    if (address != null) {
      labels.add("client_source_address", address.getHostAddress());
    }
    addRequestContext(request, labels);
    if (nodeId != null) {
      labels.add("node_id", nodeId);
    }
    labels
        .add("kafka.cluster.id", clusterId)
        .add("kafka.listener.name", request.listenerName())
        .add("kafka.security.protocol", request.securityProtocol().name)
        .add("kafka.push.interval.ms", context.pushIntervalMs())
        .add("kafka.push.terminating", payload.isTerminating());
    ByteBuffer data = payload.data().duplicate();
    byte[] bytes = new byte[data.remaining()];
    data.get(bytes);
    try {
      to.offer(OtlpLabels.label(bytes, labels.resourceField(), System.currentTimeMillis()));
    } catch (IllegalArgumentException e) {
      to.metrics().malformed();
    }
  }

  /** The client's software and source port, from the broker's request context when it can be read. */
  private void addRequestContext(AuthorizableRequestContext request, OtlpLabels labels) {
    if (!requestContextReadable || !(request instanceof RequestContext)) {
      return;
    }
    try {
      RequestContext context = (RequestContext) request;
      labels
          .add("client_software_name", context.clientInformation.softwareName())
          .add("client_software_version", context.clientInformation.softwareVersion());
      String[] parts = context.connectionId.split("-"); // local-remote-index (Kafka's Selector)
      if (parts.length >= 2) {
        String remote = parts[1];
        labels.add("client_source_port", remote.substring(remote.lastIndexOf(':') + 1));
      }
    } catch (LinkageError | RuntimeException e) {
      requestContextReadable = false; // a broker whose request context differs: go on without them
      log.warn("the broker's request context cannot be read ({}); forwarding without the client's "
          + "software name, version and source port", e.toString());
    }
  }

  @Override
  public void init(List<KafkaMetric> metrics) {}

  @Override
  public void metricChange(KafkaMetric metric) {}

  @Override
  public void metricRemoval(KafkaMetric metric) {}

  @Override
  public void close() {
    SinkSender to = sender;
    if (to == null) {
      return;
    }
    to.close();
    try {
      thread.join(5_000);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    to.metrics().close();
  }
}
