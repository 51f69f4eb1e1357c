package telemetry.sink;

import java.util.ArrayDeque;
import java.util.Deque;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.scheduler.JobFailed;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerJobEnd;
import org.apache.spark.scheduler.SparkListenerJobStart;
import org.apache.spark.sql.SparkSession;

/**
 * The statements of a user whose statements exhaust the server's limits wait before they run.
 *
 * <p>A statement <em>exhausts</em> a limit when one of its Spark jobs fails because a task ran out of
 * the executor's heap ({@code java.lang.OutOfMemoryError}), because its result outgrew {@code
 * spark.driver.maxResultSize}, or because the statement ran past its timeout ({@link
 * QueryTimeout}'s or the Thrift server's own, which cancels with no reason given: a job that fails
 * while its statement is past the timeout counts). Each of these costs every other client: the executor JVM they share spends its
 * cores and its heap on the statement (and its garbage collector stops all of their tasks) until it
 * fails. Failing is free for the one who sends it, so without a price a client could send it again at
 * once, forever.
 *
 * <p>The price is paid by the user ({@link Clients#principal}: a JDBC/ODBC login's user name, one
 * principal for all Spark Connect clients; as Kafka keeps quotas per principal, clients that share
 * one share its price): the next statement of a user whose statements
 * exhausted a limit {@code n} times in the last {@link #WINDOW_MS} waits, before anything of it is
 * planned or run, until {@link #delayMs}(n) after the last of them: {@link #BASE_DELAY_MS}, then
 * twice as long each time, up to {@link #MAX_DELAY_MS}. Running well does not forget them (anyone
 * can run {@code SELECT 1} between two attacks); only time does. At most {@link #MAX_WAITING}
 * statements of a user wait at once (each holds one of the Thrift server's threads); one more is
 * refused at once with {@link #MESSAGE}. Other users' statements never wait for a user's.
 *
 * <p>Every exhaustion is counted ({@link Audit#EXHAUSTED}) and logged with the user, every wait
 * counted ({@link Audit#STATEMENT_DELAYED}). At most {@link #MAX_REMEMBERED} users are remembered,
 * the least recently failed forgotten first.
 */
public final class StatementBackoff extends SparkListener {

  /** The local property that carries a statement's user to its jobs. */
  static final String USER_PROPERTY = "telemetry.sink.user";

  /** How long an exhaustion counts. */
  static final long WINDOW_MS = 10 * 60_000;

  /** The wait after the first exhaustion in the window, doubled by each further one, up to the most. */
  static final long BASE_DELAY_MS = 1_000;

  static final long MAX_DELAY_MS = 60_000;

  /** The most exhaustions of a user remembered (enough to reach {@link #MAX_DELAY_MS}). */
  static final int MAX_COUNTED = 16;

  /** The most statements of one user that wait at once. */
  static final int MAX_WAITING = 4;

  /** The most users remembered. */
  static final int MAX_REMEMBERED = 10_000;

  /** What a statement refused for too many waiting is told. */
  static final String MESSAGE =
      "telemetry-sink sql-server: this user's statements exhausted the server's limits (executor"
          + " memory, result size or timeout) and wait before they run; "
          + MAX_WAITING
          + " wait already";

  /** A statement refused because too many of its user's statements wait. */
  public static final class Refused extends RuntimeException {
    private static final long serialVersionUID = 1L;

    Refused() {
      super(MESSAGE);
    }
  }

  /** One user's recent exhaustions (times, oldest first) and its statements waiting now. */
  private static final class Debt {
    final Deque<Long> times = new ArrayDeque<>();
    int waiting;
  }

  private static final Map<String, Debt> USERS =
      new LinkedHashMap<>(64, 0.75f, true) {
        private static final long serialVersionUID = 1L;

        @Override
        protected boolean removeEldestEntry(Map.Entry<String, Debt> eldest) {
          return size() > MAX_REMEMBERED && eldest.getValue().waiting == 0;
        }
      };

  /** A running job's user, and its statement's key ({@link QueryTimeout#key}; null if none). */
  private record Job(String user, String statement) {}

  private final Map<Integer, Job> jobs = new ConcurrentHashMap<>();

  /**
   * The wait after {@code exhaustions} in the window (0 for none): {@link #BASE_DELAY_MS} times
   * 2^(exhaustions - 1), at most {@link #MAX_DELAY_MS}.
   */
  public static long delayMs(int exhaustions) {
    return Backoff.doubled(exhaustions, BASE_DELAY_MS, MAX_DELAY_MS);
  }

  /**
   * The current thread works on {@code statement} (null: none) of {@code session}'s client: the
   * first time, name its user for its jobs and wait while the user pays for its exhaustions; throws {@link Refused}
   * when too many of the user's statements wait, {@link QueryTimeout.TimedOut} when the statement is
   * cancelled while it waits.
   */
  static void admit(SparkSession session, QueryTimeout.Statement statement) {
    if (statement == null || !statement.admitted.compareAndSet(false, true)) {
      return;
    }
    Clients.Client client = Clients.of(session);
    String user = Clients.principal(session);
    session.sparkContext().setLocalProperty(USER_PROPERTY, user);
    long waitMs = enter(user, System.currentTimeMillis());
    if (waitMs < 0) {
      Audit.refused(user, client.address(), MESSAGE);
      throw new Refused();
    }
    if (waitMs == 0) {
      return;
    }
    Audit.statementDelayed(user, client.address(), waitMs);
    try {
      Thread.sleep(waitMs);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new QueryTimeout.TimedOut(
          "telemetry-sink sql-server: the statement was cancelled while it waited");
    } finally {
      leave(user);
    }
  }

  /**
   * How long a statement of {@code user} starting at {@code nowMillis} waits: 0 for not at all, -1
   * when {@link #MAX_WAITING} wait already. A wait it returns is counted as begun (the caller ends
   * it).
   */
  public static long enter(String user, long nowMillis) {
    synchronized (USERS) {
      Debt debt = USERS.get(user);
      if (debt == null) {
        return 0;
      }
      while (!debt.times.isEmpty() && nowMillis - debt.times.peekFirst() > WINDOW_MS) {
        debt.times.removeFirst();
      }
      if (debt.times.isEmpty()) {
        if (debt.waiting == 0) {
          USERS.remove(user);
        }
        return 0;
      }
      long waitMs = debt.times.peekLast() + delayMs(debt.times.size()) - nowMillis;
      if (waitMs <= 0) {
        return 0;
      }
      if (debt.waiting >= MAX_WAITING) {
        return -1;
      }
      debt.waiting++;
      return waitMs;
    }
  }

  /** A wait that {@link #enter} began for {@code user} is over. */
  public static void leave(String user) {
    synchronized (USERS) {
      Debt debt = USERS.get(user);
      if (debt != null) {
        debt.waiting = Math.max(0, debt.waiting - 1);
      }
    }
  }

  /** A statement of {@code user} exhausted a limit at {@code nowMillis}. */
  public static void exhausted(String user, long nowMillis) {
    synchronized (USERS) {
      Debt debt = USERS.computeIfAbsent(user, k -> new Debt());
      debt.times.addLast(nowMillis);
      while (debt.times.size() > MAX_COUNTED) {
        debt.times.removeFirst();
      }
    }
  }

  /** Forget every user (tests). */
  public static void forget() {
    synchronized (USERS) {
      USERS.clear();
    }
  }

  /**
   * Which limit a failed job's {@code message} says it exhausted ("executor memory", "result size",
   * "timeout"), or null for a failure of another kind.
   */
  public static String exhaustion(String message) {
    if (message == null) {
      return null;
    }
    if (message.contains("java.lang.OutOfMemoryError")) {
      return "executor memory";
    }
    if (message.contains("spark.driver.maxResultSize")) {
      return "result size";
    }
    if (message.contains(QueryTimeout.PAST_TIMEOUT)) {
      return "timeout";
    }
    return null;
  }

  @Override
  public void onJobStart(SparkListenerJobStart jobStart) {
    Properties properties = jobStart.properties();
    String user = properties == null ? null : properties.getProperty(USER_PROPERTY);
    if (user != null) {
      String statement =
          QueryTimeout.key(
              properties.getProperty(QueryTimeout.GROUP), properties.getProperty(QueryTimeout.TAGS));
      jobs.put(jobStart.jobId(), new Job(user, statement));
    }
  }

  @Override
  public void onJobEnd(SparkListenerJobEnd jobEnd) {
    Job job = jobs.remove(jobEnd.jobId());
    if (job == null || !(jobEnd.jobResult() instanceof JobFailed failed)) {
      return;
    }
    String limit = exhaustion(failed.exception().getMessage());
    if (limit == null && QueryTimeout.pastTimeout(job.statement())) {
      limit = "timeout"; // cancelled by the Thrift server's own timeout, which gives no reason
    }
    if (limit != null) {
      exhausted(job.user(), System.currentTimeMillis());
      Audit.exhausted(job.user().isEmpty() ? null : job.user(), limit);
    }
  }
}
