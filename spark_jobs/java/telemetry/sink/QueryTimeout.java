package telemetry.sink;

import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.spark.SparkContext;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerJobStart;

/**
 * The query timeout of {@code telemetry-sink sql-server}, which no client setting can raise. It counts
 * from a client statement's start: the first time the server sees the statement, which is when its
 * SQL is parsed (JDBC/ODBC; the Thrift server names the statement's job group first), when {@link
 * ConnectGuard} lets a Spark Connect request through, or, failing both, its first planning step or
 * Spark job. So planning (parsing, analysis, optimisation, physical planning) counts too.
 *
 * <ul>
 *   <li>While planning, {@link SqlGuard}'s rules call {@link #check} often; past the timeout (or when
 *       the statement's thread was interrupted: a cancelled JDBC statement) it throws {@link
 *       TimedOut}, which ends the statement.
 *   <li>At the timeout, the statement's Spark jobs are cancelled, present and future: a JDBC
 *       statement's job group, a Spark Connect operation's tag. A job that starts later for an
 *       expired statement is cancelled at once.
 * </ul>
 *
 * <p>A statement is known by its job group (JDBC/ODBC), its Spark Connect operation tag, or the
 * Spark Connect call the current thread handles (analysis requests, which run no job). Jobs of none
 * of these (the server's own) have no timeout. A statement that is done by its timeout is not
 * affected: cancelling a finished group cancels nothing.
 */
public final class QueryTimeout extends SparkListener {

  static final String GROUP = "spark.jobGroup.id";
  static final String TAGS = "spark.job.tags";
  static final String CONNECT_OPERATION = "SparkConnect_OperationTag";

  /** How long an expired statement is remembered, at least, so that its late jobs are cancelled. */
  static final long MIN_GRACE_MS = 60_000;

  /** One client statement: when it started, whether it is past its timeout, how much it planned. */
  static final class Statement {
    final long startNanos = System.nanoTime();
    final AtomicInteger parses = new AtomicInteger();
    /** Whether {@link StatementBackoff} let it start. */
    final AtomicBoolean admitted = new AtomicBoolean();
  }

  /** A statement ran past its timeout while it was being planned (or was cancelled meanwhile). */
  public static final class TimedOut extends RuntimeException {
    private static final long serialVersionUID = 1L;

    TimedOut(String message) {
      super(message);
    }
  }

  private static volatile QueryTimeout installed;
  private static final ThreadLocal<String> CALL = new ThreadLocal<>();

  private final SparkContext context;
  private final long timeoutMs;
  private final ConcurrentHashMap<String, Statement> statements = new ConcurrentHashMap<>();
  private final ScheduledExecutorService timer =
      Executors.newSingleThreadScheduledExecutor(
          runnable -> {
            Thread thread = new Thread(runnable, "telemetry-sink-query-timeout");
            thread.setDaemon(true);
            return thread;
          });

  /** The server's timeout: {@code timeoutMs} from each client statement's start (see the class). */
  public QueryTimeout(SparkContext context, long timeoutMs) {
    this.context = context;
    this.timeoutMs = timeoutMs;
    installed = this;
  }

  // -- where statements start -------------------------------------------------------------------

  /** The Spark Connect operation tagged {@code tag} starts now (if it has not yet). */
  static void begin(String tag) {
    QueryTimeout timeout = installed;
    if (timeout != null) {
      timeout.start("tag:" + tag);
    }
  }

  /** The current thread starts handling a Spark Connect call (a statement of its own). */
  static void beginCall() {
    CALL.set("call:" + UUID.randomUUID());
  }

  /** The current thread is done with its Spark Connect call. */
  static void endCall() {
    CALL.remove();
  }

  /** The statement the current thread works for, started now if it was not yet; null if none. */
  static Statement current(SparkContext sc) {
    QueryTimeout timeout = installed;
    if (timeout == null) {
      return null;
    }
    String key = key(sc.getLocalProperty(GROUP), sc.getLocalProperty(TAGS));
    if (key == null) {
      key = CALL.get();
    }
    return key == null ? null : timeout.start(key);
  }

  /**
   * Throw {@link TimedOut} if the statement the current thread plans is past its timeout, or the
   * thread was interrupted (its statement cancelled). Starts the statement's clock if it had not;
   * returns the statement (null: the thread works for none).
   */
  static Statement check(SparkContext sc) {
    if (Thread.currentThread().isInterrupted()) {
      throw new TimedOut(
          "telemetry-sink sql-server: the statement was cancelled while it was planned");
    }
    QueryTimeout timeout = installed;
    Statement statement = current(sc);
    if (timeout != null && statement != null && timeout.expired(statement)) {
      throw new TimedOut(timeout.reason() + " (while it was planned)");
    }
    return statement;
  }

  // -- jobs -------------------------------------------------------------------------------------

  @Override
  public void onJobStart(SparkListenerJobStart jobStart) {
    Properties properties = jobStart.properties();
    if (properties == null) {
      return;
    }
    String key = key(properties.getProperty(GROUP), properties.getProperty(TAGS));
    if (key != null && expired(start(key))) {
      cancel(key);
    }
  }

  /** A statement's key: its job group, else its Spark Connect operation tag; null if neither. */
  static String key(String group, String tags) {
    if (group != null) {
      return "group:" + group;
    }
    if (tags != null) {
      for (String tag : tags.split(",")) {
        if (tag.startsWith(CONNECT_OPERATION)) {
          return "tag:" + tag;
        }
      }
    }
    return null;
  }

  private Statement start(String key) {
    return statements.computeIfAbsent(
        key,
        k -> {
          long grace = Math.max(timeoutMs, MIN_GRACE_MS);
          timer.schedule(
              () -> {
                cancel(k);
                timer.schedule(() -> statements.remove(k), grace, TimeUnit.MILLISECONDS);
              },
              timeoutMs,
              TimeUnit.MILLISECONDS);
          return new Statement();
        });
  }

  /**
   * Whether the statement whose key is {@code key} ({@link #key}) has run past its timeout: its jobs
   * that fail now fail for it, whichever timeout cancelled them (this one, or the Thrift server's own).
   */
  static boolean pastTimeout(String key) {
    QueryTimeout timeout = installed;
    Statement statement = timeout == null || key == null ? null : timeout.statements.get(key);
    return statement != null && timeout.expired(statement);
  }

  private boolean expired(Statement statement) {
    return System.nanoTime() - statement.startNanos > TimeUnit.MILLISECONDS.toNanos(timeoutMs);
  }

  private void cancel(String key) {
    if (key.startsWith("group:")) {
      context.cancelJobGroupAndFutureJobs(key.substring("group:".length()), reason());
    } else if (key.startsWith("tag:")) {
      context.cancelJobsWithTag(key.substring("tag:".length()), reason());
    } // a call runs no jobs: its planning checks are all there is
  }

  /** In the reason a statement's jobs are cancelled for at its timeout. */
  static final String PAST_TIMEOUT = "the query ran past its timeout";

  private String reason() {
    return "telemetry-sink sql-server: " + PAST_TIMEOUT + " of " + timeoutMs / 1000.0 + " s";
  }

  /** Stop the timer (no cancellation fires after this). */
  public void stop() {
    timer.shutdownNow();
    statements.clear();
    if (installed == this) {
      installed = null;
    }
  }
}
