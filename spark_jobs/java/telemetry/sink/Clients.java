package telemetry.sink;

import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.WeakHashMap;
import org.apache.spark.sql.SparkSession;

/**
 * Who is asking, for the audit trail ({@link Audit}): the user and address of the client behind a
 * statement, wherever the server refuses it.
 *
 * <ul>
 *   <li>a JDBC/ODBC session's Spark session, registered when the session opens ({@link
 *       ReadOnlyThriftServer}): its statements run in background threads that only know the session;
 *   <li>a Spark Connect call, set by {@link ConnectGuard} on the thread that handles the call
 *       (analysis, settings) and registered by the operation's job tag for the thread that executes
 *       it.
 * </ul>
 *
 * <p>The user of a Spark Connect request is the {@code user_id} the client says it is (Spark Connect
 * authenticates a token, not a user); the address is the connection's.
 */
final class Clients {

  /** One client: its user name and address, either null when not known. */
  record Client(String user, String address) {}

  static final Client UNKNOWN = new Client(null, null);

  /** How many Spark Connect operations are remembered (the oldest is forgotten first). */
  static final int MAX_OPERATIONS = 10_000;

  private static final Map<SparkSession, Client> SESSIONS =
      Collections.synchronizedMap(new WeakHashMap<>());
  private static final ThreadLocal<Client> CALL = new ThreadLocal<>();
  private static final Map<String, Client> OPERATIONS =
      Collections.synchronizedMap(
          new LinkedHashMap<>(16, 0.75f, false) {
            private static final long serialVersionUID = 1L;

            @Override
            protected boolean removeEldestEntry(Map.Entry<String, Client> eldest) {
              return size() > MAX_OPERATIONS;
            }
          });

  private Clients() {}

  /** The JDBC/ODBC session {@code session} belongs to {@code user} at {@code address}. */
  static void session(SparkSession session, String user, String address) {
    SESSIONS.put(session, new Client(user, address));
  }

  /** The Spark Connect operation whose job tag is {@code tag} is {@code client}'s. */
  static void operation(String tag, Client client) {
    OPERATIONS.put(tag, client);
  }

  /** The current thread handles a call of {@code client} (null: of nobody any more). */
  static void call(Client client) {
    if (client == null) {
      CALL.remove();
    } else {
      CALL.set(client);
    }
  }

  /** Whom Spark Connect clients' statements are charged to ({@link #principal}). */
  static final String CONNECT_PRINCIPAL = "(spark connect)";

  /**
   * Whom the statements of {@code session} are charged to ({@link StatementBackoff}): a JDBC/ODBC
   * session's login user; for Spark Connect, one principal for all, the token's holder, since the
   * user a Connect client names is its own say (it could name another's, or a new one each time).
   */
  static String principal(SparkSession session) {
    Client client = session == null ? null : SESSIONS.get(session);
    if (client == null) {
      return CONNECT_PRINCIPAL;
    }
    return client.user() == null ? "" : client.user();
  }

  /** The client behind a statement that {@code session} runs on the current thread. */
  static Client of(SparkSession session) {
    Client client = session == null ? null : SESSIONS.get(session);
    if (client == null) {
      client = CALL.get();
    }
    if (client == null && session != null) {
      String tags = session.sparkContext().getLocalProperty(QueryTimeout.TAGS);
      if (tags != null) {
        for (String tag : tags.split(",")) {
          Client tagged = OPERATIONS.get(tag);
          if (tagged != null) {
            return tagged;
          }
        }
      }
    }
    return client == null ? UNKNOWN : client;
  }
}
