package telemetry.sink.forwarder;

import java.util.Map;
import org.apache.kafka.common.config.AbstractConfig;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.ConfigDef.Importance;
import org.apache.kafka.common.config.ConfigDef.Range;
import org.apache.kafka.common.config.ConfigDef.Type;
import org.apache.kafka.common.config.types.Password;

/**
 * The forwarder's settings: broker configs under {@value #PREFIX}, typed and checked by Kafka's own
 * {@link ConfigDef} when the broker starts (a bad value stops the broker with Kafka's message). A
 * secret (the token, key store passwords) may come from a Kafka config provider ({@code
 * ${file:/etc/kafka/secrets.properties:token}}): the broker resolves it before the plugin sees it.
 */
final class ForwarderConfig extends AbstractConfig {

  static final String PREFIX = "telemetry.sink.forwarder.";
  static final String ENDPOINT = PREFIX + "endpoint";
  static final String BEARER_TOKEN = PREFIX + "bearer.token";
  static final String TRUSTSTORE_LOCATION = PREFIX + "ssl.truststore.location";
  static final String TRUSTSTORE_PASSWORD = PREFIX + "ssl.truststore.password";
  static final String KEYSTORE_LOCATION = PREFIX + "ssl.keystore.location";
  static final String KEYSTORE_PASSWORD = PREFIX + "ssl.keystore.password";
  static final String QUEUE_MAX_PUSHES = PREFIX + "queue.max.pushes";
  static final String BATCH_MAX_PUSHES = PREFIX + "batch.max.pushes";
  static final String BATCH_MAX_BYTES = PREFIX + "batch.max.bytes";
  static final String BATCH_MAX_RESOURCE_METRICS = PREFIX + "batch.max.resource.metrics";
  static final String COMPRESSION = PREFIX + "compression.type";
  static final String LINGER_MS = PREFIX + "linger.ms";
  static final String REQUEST_TIMEOUT_MS = PREFIX + "request.timeout.ms";
  static final String DELIVERY_TIMEOUT_MS = PREFIX + "delivery.timeout.ms";
  static final String RETRY_BACKOFF_MS = PREFIX + "retry.backoff.ms";
  static final String RETRY_BACKOFF_MAX_MS = PREFIX + "retry.backoff.max.ms";

  static final ConfigDef DEFINITION =
      new ConfigDef()
          .define(ENDPOINT, Type.STRING, ConfigDef.NO_DEFAULT_VALUE, new ConfigDef.NonEmptyString(),
              Importance.HIGH, "The sink's OTLP/HTTP metrics endpoint, e.g. https://telemetry-sink:4318/v1/metrics.")
          .define(BEARER_TOKEN, Type.PASSWORD, null, Importance.HIGH,
              "The token the forwarder authenticates with (Authorization: Bearer); its principal must be one of "
                  + "the sink's security.trusted_forwarders. Null: none (mTLS, or an anonymous sender).")
          .define(TRUSTSTORE_LOCATION, Type.STRING, null, Importance.MEDIUM,
              "A PKCS12 trust store for an https endpoint; null: the JVM's default trust.")
          .define(TRUSTSTORE_PASSWORD, Type.PASSWORD, null, Importance.MEDIUM, "The trust store's password.")
          .define(KEYSTORE_LOCATION, Type.STRING, null, Importance.MEDIUM,
              "A PKCS12 key store with the forwarder's client certificate (mTLS); null: none.")
          .define(KEYSTORE_PASSWORD, Type.PASSWORD, null, Importance.MEDIUM, "The key store's password.")
          .define(QUEUE_MAX_PUSHES, Type.INT, 10_000, Range.atLeast(1), Importance.MEDIUM,
              "Pushes waiting to be forwarded, at most; when full, the oldest is dropped and counted.")
          .define(BATCH_MAX_PUSHES, Type.INT, 200, Range.between(1, 1000), Importance.LOW,
              "Pushes sent in one request, at most.")
          .define(BATCH_MAX_BYTES, Type.INT, 1_048_576, Range.atLeast(1024), Importance.LOW,
              "Payload bytes in one request before compression, at most (a single larger push goes alone).")
          .define(BATCH_MAX_RESOURCE_METRICS, Type.INT, 1000, Range.atLeast(1), Importance.LOW,
              "ResourceMetrics in one request, at most: the sink's limits.max_resource_metrics (a Java "
                  + "client's push holds one per metric, about a hundred).")
          .define(COMPRESSION, Type.STRING, "gzip", ConfigDef.ValidString.in("gzip", "none"), Importance.LOW,
              "How a request's body is compressed (Content-Encoding): the labels repeat in every "
                  + "ResourceMetrics, and gzip takes most of them back.")
          .define(LINGER_MS, Type.LONG, 100L, Range.atLeast(0), Importance.LOW,
              "How long a request waits for more pushes to fill its batch.")
          .define(REQUEST_TIMEOUT_MS, Type.LONG, 30_000L, Range.atLeast(1), Importance.LOW,
              "How long one request to the sink may take before it is retried: longer than the sink's "
                  + "exporter.options.commit_timeout_ms (15 s), so that a slow commit is answered, not resent.")
          .define(DELIVERY_TIMEOUT_MS, Type.LONG, 120_000L, Range.atLeast(1), Importance.LOW,
              "How long a push may wait to be forwarded, retries included; an older one is dropped and counted.")
          .define(RETRY_BACKOFF_MS, Type.LONG, 100L, Range.atLeast(1), Importance.LOW,
              "The first wait before a failed request is retried; it doubles after each failure.")
          .define(RETRY_BACKOFF_MAX_MS, Type.LONG, 10_000L, Range.atLeast(1), Importance.LOW,
              "The longest wait between retries (the circuit breaker's open time).");

  ForwarderConfig(Map<?, ?> brokerConfigs) {
    super(DEFINITION, brokerConfigs, false);
  }

  String secret(String key) {
    Password password = getPassword(key);
    return password == null ? null : password.value();
  }
}
