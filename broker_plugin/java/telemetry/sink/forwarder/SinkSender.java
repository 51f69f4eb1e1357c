package telemetry.sink.forwarder;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import java.util.zip.Deflater;
import java.util.zip.GZIPOutputStream;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The queue of pushes to forward and the one thread that sends them to the sink, in batches, over
 * OTLP/HTTP ({@code POST} of a protobuf {@code MetricsData}: the batch's payloads concatenated, which
 * protobuf reads as one message holding all their {@code ResourceMetrics}).
 *
 * <p>A batch holds at most {@code batch.max.pushes} pushes, {@code batch.max.bytes} bytes and {@code
 * batch.max.resource.metrics} {@code ResourceMetrics} (one push over a bound goes alone), gzipped
 * unless {@code compression.type} is {@code none}.
 *
 * <p>The broker's request threads only {@link #offer} (a lock and an array deque: never blocked by the
 * sink). The queue holds at most {@code queue.max.pushes}; a push offered to a full queue drops the
 * oldest waiting one. A batch the sink did not take is retried, whole and first, after a wait that
 * starts at {@code retry.backoff.ms} and doubles up to {@code retry.backoff.max.ms} (at least the
 * sink's {@code Retry-After}): while the sink is down the breaker stays open that long between
 * attempts, and new pushes queue, the oldest dropped past the bound. Answers: 2xx taken; 408, 429,
 * 5xx, a timeout or a failed connection retried; 413 split in two (a push alone is refused); any
 * other 4xx refused for good (counted, logged). A push older than {@code delivery.timeout.ms} is
 * dropped instead of sent.
 *
 * <p>So that a batch sent again (its answer was lost, or came after {@code request.timeout.ms}) lands
 * once, every request says which pushes it holds: header {@code x-telemetry-sink-forwarded-batch:
 * forwarder=<id>; pushes=<first>-<last>; attempt=<n>}. The id is drawn at random when the plugin
 * starts; pushes are numbered as they are queued; batches go one at a time, in that order, and a batch
 * is resent whole (less its expired pushes) or, after a 413, in halves that are never merged with newer
 * pushes: so the sink can tell by the last number whether it already holds a batch. {@code attempt} is
 * 0 for pushes never sent before, else how many times the batch was sent.
 */
final class SinkSender implements Runnable {

  private static final Logger log = LoggerFactory.getLogger(SinkSender.class);

  private final ReentrantLock lock = new ReentrantLock();
  private final Condition waiting = lock.newCondition();
  private final ArrayDeque<Numbered> queue = new ArrayDeque<>();
  private final String forwarderId = newForwarderId();
  private long nextNumber;
  private long highestSent = -1;
  private final int queueMax;
  private final int batchMaxPushes;
  private final int batchMaxBytes;
  private final int batchMaxResourceMetrics;
  private final boolean gzip;
  private final long lingerMs;
  private final long deliveryTimeoutMs;
  private final long backoffMs;
  private final long backoffMaxMs;
  private final Duration requestTimeout;
  private final URI endpoint;
  private final String authorization;
  private final HttpClient http;
  private final ForwarderMetrics metrics;
  private volatile long currentBackoffMs;
  private volatile boolean closing;

  SinkSender(ForwarderConfig config) {
    queueMax = config.getInt(ForwarderConfig.QUEUE_MAX_PUSHES);
    batchMaxPushes = config.getInt(ForwarderConfig.BATCH_MAX_PUSHES);
    batchMaxBytes = config.getInt(ForwarderConfig.BATCH_MAX_BYTES);
    batchMaxResourceMetrics = config.getInt(ForwarderConfig.BATCH_MAX_RESOURCE_METRICS);
    gzip = "gzip".equals(config.getString(ForwarderConfig.COMPRESSION));
    lingerMs = config.getLong(ForwarderConfig.LINGER_MS);
    deliveryTimeoutMs = config.getLong(ForwarderConfig.DELIVERY_TIMEOUT_MS);
    backoffMs = config.getLong(ForwarderConfig.RETRY_BACKOFF_MS);
    backoffMaxMs = Math.max(backoffMs, config.getLong(ForwarderConfig.RETRY_BACKOFF_MAX_MS));
    requestTimeout = Duration.ofMillis(config.getLong(ForwarderConfig.REQUEST_TIMEOUT_MS));
    endpoint = URI.create(config.getString(ForwarderConfig.ENDPOINT));
    String token = config.secret(ForwarderConfig.BEARER_TOKEN);
    authorization = token == null ? null : "Bearer " + token;
    HttpClient.Builder builder =
        HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).connectTimeout(requestTimeout);
    if ("https".equalsIgnoreCase(endpoint.getScheme())) {
      builder.sslContext(sslContext(config));
    }
    http = builder.build();
    metrics = new ForwarderMetrics(this::queueSize, () -> currentBackoffMs);
  }

  ForwarderMetrics metrics() {
    return metrics;
  }

  /** Queues a push (a request thread calls this): never blocks on the sink. */
  void offer(ForwardedPush push) {
    lock.lock();
    try {
      if (queue.size() >= queueMax) {
        queue.pollFirst();
        metrics.dropped(1);
      }
      queue.addLast(new Numbered(nextNumber++, push));
      waiting.signal();
    } finally {
      lock.unlock();
    }
  }

  int queueSize() {
    lock.lock();
    try {
      return queue.size();
    } finally {
      lock.unlock();
    }
  }

  /** Stops the thread at its next wait; what is still queued then is dropped (and counted). */
  void close() {
    closing = true;
    lock.lock();
    try {
      waiting.signalAll();
    } finally {
      lock.unlock();
    }
  }

  @Override
  public void run() {
    List<Numbered> batch = new ArrayList<>();
    List<Numbered> secondHalf = new ArrayList<>();
    int attempts = 0;
    int secondHalfAttempts = 0;
    long backoff = backoffMs;
    try {
      while (!closing) {
        if (batch.isEmpty()) {
          if (!secondHalf.isEmpty()) { // the rest of a batch split after a 413: alone, never merged
            batch.addAll(secondHalf);
            secondHalf.clear();
            attempts = secondHalfAttempts;
            secondHalfAttempts = 0;
          } else if (fill(batch)) {
            attempts = 0;
          } else {
            continue;
          }
        }
        expire(batch);
        if (batch.isEmpty()) {
          continue;
        }
        long started = System.nanoTime();
        Outcome outcome = send(batch, attempts);
        attempts++;
        long tookMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started);
        if (outcome.status == Status.TAKEN) {
          metrics.forwarded(batch.size(), tookMs);
          batch.clear();
          backoff = backoffMs;
          currentBackoffMs = 0;
        } else if (outcome.status == Status.TOO_LARGE && batch.size() > 1) {
          List<Numbered> later = batch.subList(batch.size() / 2, batch.size());
          secondHalf.addAll(0, later); // before the rest of an earlier split: the numbers stay in order
          secondHalfAttempts = Math.max(secondHalfAttempts, attempts);
          later.clear();
        } else if (outcome.status == Status.REFUSED || outcome.status == Status.TOO_LARGE) {
          log.warn("telemetry-sink refused {} forwarded pushes for good: {}", batch.size(), outcome.detail);
          metrics.rejected(batch.size());
          batch.clear();
        } else {
          metrics.retried();
          long wait = Math.max(backoff, outcome.retryAfterMs);
          currentBackoffMs = wait;
          log.debug("telemetry-sink did not take {} pushes ({}); retrying in {} ms", batch.size(),
              outcome.detail, wait);
          pause(wait);
          backoff = Math.min(backoff * 2, backoffMaxMs);
        }
      }
    } finally {
      lock.lock();
      try {
        metrics.dropped(batch.size() + secondHalf.size() + queue.size());
        queue.clear();
      } finally {
        lock.unlock();
      }
    }
  }

  /** Takes the next batch: waits for a first push, then lingers for more; false when woken empty. */
  private boolean fill(List<Numbered> batch) {
    lock.lock();
    try {
      if (queue.isEmpty()) {
        waiting.await(1, TimeUnit.SECONDS);
        if (queue.isEmpty()) {
          return false;
        }
      }
      long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(lingerMs);
      long remaining;
      while (!closing && queue.size() < batchMaxPushes && (remaining = deadline - System.nanoTime()) > 0) {
        waiting.awaitNanos(remaining);
      }
      int bytes = 0;
      int resourceMetrics = 0;
      while (!queue.isEmpty() && batch.size() < batchMaxPushes) {
        ForwardedPush next = queue.peekFirst().push();
        if (!batch.isEmpty()
            && (bytes + next.labelled().length > batchMaxBytes
                || resourceMetrics + next.resourceMetrics() > batchMaxResourceMetrics)) {
          break;
        }
        batch.add(queue.pollFirst());
        bytes += next.labelled().length;
        resourceMetrics += next.resourceMetrics();
      }
      return true;
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      closing = true;
      return false;
    } finally {
      lock.unlock();
    }
  }

  private void expire(List<Numbered> batch) {
    long oldest = System.currentTimeMillis() - deliveryTimeoutMs;
    int before = batch.size();
    batch.removeIf(numbered -> numbered.push().acceptedAtMs() < oldest);
    if (batch.size() < before) {
      metrics.dropped(before - batch.size());
    }
  }

  private void pause(long ms) {
    lock.lock();
    try {
      long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ms);
      long remaining;
      while (!closing && (remaining = deadline - System.nanoTime()) > 0) {
        waiting.awaitNanos(remaining);
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      closing = true;
    } finally {
      lock.unlock();
    }
  }

  private enum Status { TAKEN, RETRY, TOO_LARGE, REFUSED }

  private record Outcome(Status status, long retryAfterMs, String detail) {}

  /** A queued push and its number: pushes are numbered in the order they are queued. */
  private record Numbered(long number, ForwardedPush push) {}

  /** Sends a batch sent {@code attempts} times before (0 for a new one, or the half of a split one). */
  private Outcome send(List<Numbered> batch, int attempts) {
    ByteArrayOutputStream body = new ByteArrayOutputStream();
    try (OutputStream out = gzip ? new FastGzip(body) : body) {
      for (Numbered numbered : batch) {
        out.write(numbered.push().labelled());
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e); // in memory: cannot happen
    }
    long first = batch.get(0).number();
    long last = batch.get(batch.size() - 1).number();
    int attempt = first <= highestSent ? Math.max(1, attempts) : 0;
    highestSent = Math.max(highestSent, last);
    HttpRequest.Builder request =
        HttpRequest.newBuilder(endpoint)
            .timeout(requestTimeout)
            .header("Content-Type", "application/x-protobuf")
            .header("x-telemetry-sink-forwarded-batch",
                "forwarder=" + forwarderId + "; pushes=" + first + "-" + last + "; attempt=" + attempt)
            .POST(HttpRequest.BodyPublishers.ofByteArray(body.toByteArray()));
    if (gzip) {
      request.header("Content-Encoding", "gzip");
    }
    if (authorization != null) {
      request.header("Authorization", authorization);
    }
    HttpResponse<byte[]> response;
    try {
      response = http.send(request.build(), HttpResponse.BodyHandlers.ofByteArray());
    } catch (IOException e) {
      return new Outcome(Status.RETRY, 0, e.toString());
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      closing = true;
      return new Outcome(Status.RETRY, 0, "interrupted");
    }
    int code = response.statusCode();
    String detail = "HTTP " + code;
    if (code >= 200 && code < 300) {
      return new Outcome(Status.TAKEN, 0, detail);
    }
    if (code == 413) {
      return new Outcome(Status.TOO_LARGE, 0, detail);
    }
    if (code == 408 || code == 429 || code >= 500) {
      long retryAfterMs =
          response.headers().firstValue("Retry-After").map(SinkSender::seconds).orElse(0L) * 1000;
      return new Outcome(Status.RETRY, retryAfterMs, detail);
    }
    return new Outcome(Status.REFUSED, 0, detail + " " + new String(response.body(), StandardCharsets.UTF_8));
  }

  /** This incarnation's name for the sink: 16 random hex digits. */
  private static String newForwarderId() {
    byte[] bytes = new byte[8];
    new SecureRandom().nextBytes(bytes);
    return HexFormat.of().formatHex(bytes);
  }

  /** gzip at its fastest level: the body is mostly the same labels again and again. */
  private static final class FastGzip extends GZIPOutputStream {
    FastGzip(OutputStream out) throws IOException {
      super(out, 65536);
      def.setLevel(Deflater.BEST_SPEED);
    }
  }

  private static long seconds(String value) {
    try {
      return Math.max(0, Long.parseLong(value.trim()));
    } catch (NumberFormatException e) {
      return 0;
    }
  }

  private static SSLContext sslContext(ForwarderConfig config) {
    try {
      SSLContext context = SSLContext.getInstance("TLS");
      TrustManagerFactory trust = null;
      String trustStore = config.getString(ForwarderConfig.TRUSTSTORE_LOCATION);
      if (trustStore != null) {
        trust = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
        trust.init(load(trustStore, config.secret(ForwarderConfig.TRUSTSTORE_PASSWORD)));
      }
      KeyManagerFactory keys = null;
      String keyStore = config.getString(ForwarderConfig.KEYSTORE_LOCATION);
      if (keyStore != null) {
        String password = config.secret(ForwarderConfig.KEYSTORE_PASSWORD);
        keys = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
        keys.init(load(keyStore, password), password == null ? new char[0] : password.toCharArray());
      }
      context.init(keys == null ? null : keys.getKeyManagers(),
          trust == null ? null : trust.getTrustManagers(), null);
      return context;
    } catch (GeneralSecurityException | IOException e) {
      throw new org.apache.kafka.common.config.ConfigException("telemetry.sink.forwarder TLS: " + e);
    }
  }

  private static KeyStore load(String location, String password) throws GeneralSecurityException, IOException {
    KeyStore store = KeyStore.getInstance("PKCS12");
    try (InputStream in = Files.newInputStream(Path.of(location))) {
      store.load(in, password == null ? null : password.toCharArray());
    }
    return store;
  }
}
