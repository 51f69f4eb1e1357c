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
import org.apache.kafka.server.telemetry.ClientTelemetryPayload;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The metrics reporter both entry classes are ({@link TelemetrySinkForwarder} for Kafka 4.2 and later,
 * {@link LegacyTelemetrySinkForwarder} for 3.7 to 4.1): it reads the settings, labels each push with
 * what the broker knows of its client, and queues it for the {@link SinkSender}'s thread; it reports
 * none of the broker's own metrics. It uses only classes every broker from 3.7 on has.
 */
abstract class Forwarding implements MetricsReporter {

  private static final Logger log = LoggerFactory.getLogger(Forwarding.class);

  /** What Kafka's payload says of OTLP protobuf ({@code ClientTelemetryPayload.contentType}). */
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

  /** Labels and queues one push; {@code pushIntervalMs} is null where the broker's API has none. */
  final void forward(AuthorizableRequestContext request, ClientTelemetryPayload payload, Integer pushIntervalMs) {
    SinkSender to = sender;
    if (to == null) {
      return;
    }
    if (!OTLP.contains(payload.contentType())) {
      to.metrics().malformed();
      return;
    }
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
    byte[] identity = labels.resourceField(); // on every ResourceMetrics; the context on the first
    labels
        .add("kafka.cluster.id", clusterId)
        .add("kafka.listener.name", request.listenerName())
        .add("kafka.security.protocol", request.securityProtocol().name);
    if (pushIntervalMs != null) {
      labels.add("kafka.push.interval.ms", pushIntervalMs);
    }
    labels.add("kafka.push.terminating", payload.isTerminating());
    ByteBuffer data = payload.data().duplicate();
    byte[] bytes = new byte[data.remaining()];
    data.get(bytes);
    try {
      to.offer(OtlpLabels.label(bytes, labels.resourceField(), identity, System.currentTimeMillis()));
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
