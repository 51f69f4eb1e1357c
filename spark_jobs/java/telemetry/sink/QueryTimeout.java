package telemetry.sink;

import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import org.apache.spark.SparkContext;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerJobStart;

/**
 * The query timeout of {@code telemetry-sink sql-server}, which no client setting can raise: a
 * listener that, when a client's statement (a JDBC/ODBC statement's job group, a Spark Connect
 * operation's tag) starts its first Spark job, schedules the cancellation of that statement's jobs,
 * present and future, {@code timeoutMs} later. A statement that is done by then is not affected (a
 * cancellation of a finished group cancels nothing). Jobs of neither kind (the server's own) have no
 * timeout.
 */
public final class QueryTimeout extends SparkListener {

  private static final String GROUP = "spark.jobGroup.id";
  private static final String TAGS = "spark.job.tags";
  private static final String CONNECT_OPERATION = "SparkConnect_OperationTag";

  private final SparkContext context;
  private final long timeoutMs;
  private final ConcurrentHashMap<String, Boolean> pending = new ConcurrentHashMap<>();
  private final ScheduledExecutorService timer =
      Executors.newSingleThreadScheduledExecutor(
          runnable -> {
            Thread thread = new Thread(runnable, "telemetry-sink-query-timeout");
            thread.setDaemon(true);
            return thread;
          });

  public QueryTimeout(SparkContext context, long timeoutMs) {
    this.context = context;
    this.timeoutMs = timeoutMs;
  }

  @Override
  public void onJobStart(SparkListenerJobStart jobStart) {
    Properties properties = jobStart.properties();
    if (properties == null) {
      return;
    }
    String group = properties.getProperty(GROUP);
    if (group != null) {
      schedule("group:" + group, () -> context.cancelJobGroupAndFutureJobs(group, reason()));
      return;
    }
    String tags = properties.getProperty(TAGS);
    if (tags == null) {
      return;
    }
    for (String tag : tags.split(",")) {
      if (tag.startsWith(CONNECT_OPERATION)) {
        schedule("tag:" + tag, () -> context.cancelJobsWithTag(tag, reason()));
      }
    }
  }

  private void schedule(String key, Runnable cancel) {
    if (pending.putIfAbsent(key, Boolean.TRUE) == null) {
      timer.schedule(
          () -> {
            pending.remove(key);
            cancel.run();
          },
          timeoutMs,
          TimeUnit.MILLISECONDS);
    }
  }

  private String reason() {
    return "telemetry-sink sql-server: the query ran past its timeout of " + timeoutMs / 1000.0 + " s";
  }

  /** Stop the timer (no cancellation fires after this). */
  public void stop() {
    timer.shutdownNow();
    pending.clear();
  }
}
