package telemetry.sink;

import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The audit trail of {@code telemetry-sink sql-server}: every refused statement or request, every
 * failed or shed login, and every statement that exhausted a limit or waited for it ({@link
 * StatementBackoff}) is logged (logger {@code telemetry.sink.audit}, with the user and the
 * client's address) and counted by kind, for the health server's {@code /metrics}.
 *
 * <p>The counters count every event. The log says at most {@link #LINES_PER_SECOND} lines of a kind
 * a second, so that a client cannot fill the disk by failing on purpose; the first line after a
 * busy second says how many were left out.
 */
public final class Audit {

  private static final Logger LOG = LoggerFactory.getLogger("telemetry.sink.audit");
  private static final Map<String, AtomicLong> COUNTS = new ConcurrentHashMap<>();
  private static final Map<String, Lines> LINES = new ConcurrentHashMap<>();

  /** The counter of refused statements and requests (SQL over JDBC, plans and RPCs over Connect). */
  public static final String REFUSED = "refused_statements";

  /** The counter of failed logins (wrong password, unknown user, refused token). */
  public static final String LOGIN_FAILED = "failed_logins";

  /** The counter of logins refused unchecked because too many were being checked at once. */
  public static final String LOGIN_SHED = "shed_logins";

  /** The counter of statements that exhausted a limit (executor memory, result size, timeout). */
  public static final String EXHAUSTED = "exhausting_statements";

  /** The counter of statements that waited because their user's statements exhausted limits. */
  public static final String STATEMENT_DELAYED = "delayed_statements";

  /** The most lines of one kind logged in one second. */
  public static final int LINES_PER_SECOND = 20;

  private Audit() {}

  /** {@code user} at {@code address} was refused {@code what} (the refusal's own words). */
  public static void refused(String user, String address, String what) {
    count(REFUSED);
    log(REFUSED, "refused: user={} address={} what={}", quoted(user), quoted(address), plain(what));
  }

  /** A login as {@code user} from {@code address} failed, for {@code reason}. */
  public static void loginFailed(String user, String address, String reason) {
    count(LOGIN_FAILED);
    log(LOGIN_FAILED, "login failed: user={} address={} reason={}", quoted(user), quoted(address), plain(reason));
  }

  /** A login as {@code user} from {@code address} was refused unchecked, for {@code reason}. */
  public static void loginShed(String user, String address, String reason) {
    count(LOGIN_SHED);
    log(LOGIN_SHED, "login shed: user={} address={} reason={}", quoted(user), quoted(address), plain(reason));
  }

  /** A statement of {@code user} exhausted {@code limit} ({@link StatementBackoff}). */
  public static void exhausted(String user, String limit) {
    count(EXHAUSTED);
    log(EXHAUSTED, "statement exhausted a limit: user={} limit={}", quoted(user), plain(limit));
  }

  /** A statement of {@code user} at {@code address} waits {@code waitMs} before it runs. */
  public static void statementDelayed(String user, String address, long waitMs) {
    count(STATEMENT_DELAYED);
    log(
        STATEMENT_DELAYED,
        "statement delayed: user={} address={} wait_ms={}",
        quoted(user),
        quoted(address),
        waitMs);
  }

  /** Count one event of {@code kind} (a name of this class's constants, or a new one). */
  public static void count(String kind) {
    COUNTS.computeIfAbsent(kind, k -> new AtomicLong()).incrementAndGet();
  }

  /** Every counter so far, by name (a copy). */
  public static Map<String, Long> counters() {
    Map<String, Long> copy = new TreeMap<>();
    for (String kind : new String[] {REFUSED, LOGIN_FAILED, LOGIN_SHED, EXHAUSTED, STATEMENT_DELAYED}) {
      copy.put(kind, 0L);
    }
    COUNTS.forEach((kind, count) -> copy.put(kind, count.get()));
    return copy;
  }

  /** The lines of one kind logged in the current second, and those left out since the last one. */
  private static final class Lines {
    long second;
    int logged;
    long leftOut;
  }

  private static void log(String kind, String format, Object... arguments) {
    long second = System.currentTimeMillis() / 1000;
    long leftOut;
    Lines lines = LINES.computeIfAbsent(kind, k -> new Lines());
    synchronized (lines) {
      if (lines.second != second) {
        lines.second = second;
        lines.logged = 0;
      }
      if (lines.logged >= LINES_PER_SECOND) {
        lines.leftOut++;
        return;
      }
      lines.logged++;
      leftOut = lines.leftOut;
      lines.leftOut = 0;
    }
    if (leftOut > 0) {
      LOG.warn("{} more {} events were counted but not logged", leftOut, kind);
    }
    LOG.warn(format, arguments);
  }

  /** A value as a log shows it: quoted, control characters escaped, at most 256 characters. */
  static String quoted(String value) {
    return value == null ? "-" : "\"" + escaped(value, 256, true) + "\"";
  }

  /** Words as a log shows them: on one line (control characters escaped), at most 1,024 characters. */
  static String plain(String value) {
    return value == null ? "-" : escaped(value, 1_024, false);
  }

  private static String escaped(String value, int most, boolean quoted) {
    StringBuilder out = new StringBuilder();
    for (int i = 0; i < value.length() && i < most; i++) {
      char c = value.charAt(i);
      if (c < 0x20 || c == 0x7f || (quoted && (c == '"' || c == '\\'))) {
        out.append(String.format("\\u%04x", (int) c));
      } else {
        out.append(c);
      }
    }
    return value.length() > most ? out.append("...").toString() : out.toString();
  }
}
