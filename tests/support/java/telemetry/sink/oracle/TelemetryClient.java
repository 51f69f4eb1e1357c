package telemetry.sink.oracle;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Kafka's Java client (kafka-clients 4.4) as a telemetry client: {@code TelemetryClient producer|consumer
 * KEY=VALUE...} makes a producer or a consumer with those client configs ({@code enable.metrics.push}
 * is Kafka's default, true), asks it for its client instance id (which makes it fetch its telemetry
 * subscription), sends {@code records=N} records if a producer is asked to, prints {@code instance
 * <id>}, then keeps it open, pushing its metrics as its
 * subscription says, until a line arrives on stdin; then it closes the client (its terminating push)
 * and prints {@code closed}.
 */
public final class TelemetryClient {

  /** The argument {@code records=N}: a producer first sends N records to {@link #TOPIC}, one by one. */
  private static final String RECORDS = "records";

  private static final String TOPIC = "telemetry-client-records";

  public static void main(String[] args) throws Exception {
    Properties configs = new Properties();
    int records = 0;
    for (int i = 1; i < args.length; i++) {
      String[] pair = args[i].split("=", 2);
      if (pair[0].equals(RECORDS)) {
        records = Integer.parseInt(pair[1]);
      } else {
        configs.put(pair[0], pair[1]);
      }
    }
    AutoCloseable client;
    String id;
    if (args[0].equals("producer")) {
      KafkaProducer<byte[], byte[]> producer =
          new KafkaProducer<>(configs, new ByteArraySerializer(), new ByteArraySerializer());
      client = producer;
      id = producer.clientInstanceId(Duration.ofSeconds(60)).toString();
      for (int n = 0; n < records; n++) {
        producer.send(new ProducerRecord<>(TOPIC, Integer.toString(n).getBytes(StandardCharsets.UTF_8))).get();
      }
    } else {
      consume(configs);
      return;
    }
    System.out.println("instance " + id);
    System.out.flush();
    new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
    client.close();
    System.out.println("closed");
    System.out.flush();
  }

  /**
   * A consumer talks to the cluster only inside {@code poll}, so it polls (an assigned partition of a
   * topic that need not exist: what matters is that it polls) until it knows its instance id and then
   * until the line on stdin, which a thread of its own waits for.
   */
  private static void consume(Properties configs) throws Exception {
    AtomicBoolean done = new AtomicBoolean();
    Thread stdin =
        new Thread(
            () -> {
              try {
                new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
              } catch (IOException e) {
                // the test ended: close anyway
              }
              done.set(true);
            });
    stdin.setDaemon(true);
    try (KafkaConsumer<byte[], byte[]> consumer =
        new KafkaConsumer<>(configs, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
      consumer.assign(List.of(new TopicPartition("telemetry-oracle", 0)));
      Uuid id = null;
      while (id == null) {
        poll(consumer);
        try {
          id = consumer.clientInstanceId(Duration.ofMillis(100));
        } catch (TimeoutException e) {
          // not yet
        }
      }
      System.out.println("instance " + id);
      System.out.flush();
      stdin.start();
      while (!done.get()) {
        poll(consumer);
      }
    }
    System.out.println("closed");
    System.out.flush();
  }

  private static void poll(KafkaConsumer<byte[], byte[]> consumer) {
    try {
      consumer.poll(Duration.ofMillis(100));
    } catch (KafkaException e) {
      // an answer the consumer does not like (the sink serves no records): it polls on
    }
  }
}
