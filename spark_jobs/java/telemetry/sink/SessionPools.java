package telemetry.sink;

import java.util.BitSet;
import java.util.HashMap;
import java.util.Map;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerEvent;
import org.apache.spark.sql.hive.thriftserver.ui.SparkListenerThriftServerSessionClosed;

/**
 * The scheduler pool of each JDBC/ODBC session, so that sessions share the executors' cores fairly.
 *
 * <p>The server runs Spark's FAIR scheduler ({@code spark.scheduler.mode=FAIR}); each session opens
 * with its own pool ({@code spark.sql.thriftserver.scheduler.pool}, which Spark's Thrift server
 * applies to every statement of the session and which no client can change: no session settings,
 * no {@code SET}). A free task slot goes to the pool with the fewest running tasks, so a session
 * whose statements hold every core (a heavy query, sent again and again) leaves the next free slot to
 * another session's query instead of queueing it behind all of its own (Spark's FIFO order).
 *
 * <p>Pools are named {@code session-<n>}, n the lowest number no open session has: Spark keeps every
 * pool it ever made and looks through all of them at each scheduling round, so the names are reused
 * (a closed session's number is given back when Spark's Thrift server says the session closed,
 * whether the client closed it or it timed out). So there are never more pools than sessions open at
 * once.
 */
public final class SessionPools extends SparkListener {

  /** The session setting Spark's Thrift server takes a session's pool from. */
  static final String POOL_SETTING = "spark.sql.thriftserver.scheduler.pool";

  static final String PREFIX = "session-";

  private static final Map<String, Integer> NUMBERS = new HashMap<>(); // session id -> its number
  private static final BitSet TAKEN = new BitSet();

  /** The pool of the session whose id is {@code sessionId}, which opens now. */
  public static synchronized String open(String sessionId) {
    Integer number = NUMBERS.get(sessionId);
    if (number == null) {
      number = TAKEN.nextClearBit(0);
      TAKEN.set(number);
      NUMBERS.put(sessionId, number);
    }
    return PREFIX + number;
  }

  /** The session whose id is {@code sessionId} closed: its pool's number is free again. */
  public static synchronized void closed(String sessionId) {
    Integer number = NUMBERS.remove(sessionId);
    if (number != null) {
      TAKEN.clear(number);
    }
  }

  @Override
  public void onOtherEvent(SparkListenerEvent event) {
    if (event instanceof SparkListenerThriftServerSessionClosed closed) {
      closed(closed.sessionId());
    }
  }
}
