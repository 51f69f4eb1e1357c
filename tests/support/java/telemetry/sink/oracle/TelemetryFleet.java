package telemetry.sink.oracle;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Many of Kafka's Java producers (kafka-clients 4.4) in one JVM, each a telemetry client, for the
 * Kafka listener benchmark: {@code TelemetryFleet KEY=VALUE...} takes those client configs for every
 * producer and reads commands on stdin. {@code add N} makes N more producers (client ids {@code
 * fleet-0}, {@code fleet-1}, ...), waits until each knows its client instance id (it has fetched its
 * telemetry subscription, and from then on pushes as that says) and prints {@code ready TOTAL}; the
 * end of stdin closes them all (each its terminating push) and prints {@code closed}. A producer that
 * gets no instance id within a minute ends the driver with an error.
 */
public final class TelemetryFleet {

  private static final Duration INSTANCE_ID_WAIT = Duration.ofSeconds(60);
  private static final int STARTERS = 16;

  public static void main(String[] args) throws Exception {
    Properties configs = new Properties();
    for (String arg : args) {
      String[] pair = arg.split("=", 2);
      configs.put(pair[0], pair[1]);
    }
    List<KafkaProducer<byte[], byte[]>> producers = new ArrayList<>();
    ExecutorService starters = Executors.newFixedThreadPool(STARTERS);
    BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    try {
      for (String line = stdin.readLine(); line != null; line = stdin.readLine()) {
        int count = Integer.parseInt(line.substring("add ".length()).trim());
        List<Future<KafkaProducer<byte[], byte[]>>> started = new ArrayList<>();
        for (int i = 0; i < count; i++) {
          Properties own = new Properties();
          own.putAll(configs);
          own.put("client.id", "fleet-" + (producers.size() + i));
          started.add(starters.submit(() -> started(own)));
        }
        for (Future<KafkaProducer<byte[], byte[]>> producer : started) {
          producers.add(producer.get());
        }
        System.out.println("ready " + producers.size());
        System.out.flush();
      }
    } finally {
      starters.shutdown();
      List<Future<?>> closing = new ArrayList<>();
      ExecutorService closers = Executors.newFixedThreadPool(STARTERS);
      for (KafkaProducer<byte[], byte[]> producer : producers) {
        closing.add(closers.submit(() -> producer.close(Duration.ofSeconds(5))));
      }
      for (Future<?> done : closing) {
        done.get();
      }
      closers.shutdown();
    }
    System.out.println("closed");
    System.out.flush();
  }

  private static KafkaProducer<byte[], byte[]> started(Properties configs) {
    KafkaProducer<byte[], byte[]> producer =
        new KafkaProducer<>(configs, new ByteArraySerializer(), new ByteArraySerializer());
    producer.clientInstanceId(INSTANCE_ID_WAIT); // throws if it has none by then
    return producer;
  }
}
