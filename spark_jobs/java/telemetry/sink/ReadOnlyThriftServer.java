package telemetry.sink;

import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.regex.Pattern;
import org.apache.hadoop.hive.common.ServerUtils;
import org.apache.hadoop.hive.conf.HiveConf;
import org.apache.hive.service.CompositeService;
import org.apache.hive.service.Service;
import org.apache.hive.service.auth.TSetIpAddressProcessor;
import org.apache.hive.service.cli.CLIService;
import org.apache.hive.service.cli.HiveSQLException;
import org.apache.hive.service.cli.SessionHandle;
import org.apache.hive.service.cli.session.SessionManager;
import org.apache.hive.service.cli.thrift.ThriftBinaryCLIService;
import org.apache.hive.service.cli.thrift.ThriftCLIService;
import org.apache.hive.service.cli.thrift.ThriftHttpCLIService;
import org.apache.hive.service.rpc.thrift.TOpenSessionReq;
import org.apache.hive.service.rpc.thrift.TOpenSessionResp;
import org.apache.hive.service.server.HiveServer2;
import org.apache.spark.SparkContext;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.hive.HiveUtils$;
import org.apache.spark.sql.hive.thriftserver.HiveThriftServer2;
import org.apache.spark.sql.hive.thriftserver.HiveThriftServer2$;
import org.apache.spark.sql.hive.thriftserver.server.SparkSQLOperationManager;
import org.apache.thrift.TException;

/**
 * Spark's Thrift JDBC/ODBC server ({@code HiveThriftServer2}), started as {@code
 * HiveThriftServer2.startWithContext} starts it, with one change: its Thrift service checks the
 * settings a client sends when it opens a session, before Spark or Hive sees them.
 *
 * <p>A JDBC URL's {@code ;?key=value} (hiveconf) and {@code #key=value} (hivevar) parts, and any
 * other entry of the {@code OpenSession} request's configuration ({@code set:system:...} would set a
 * JVM system property, {@code set:metaconf:...} the metastore's), would be applied to the session
 * with no plan the guard could check: Spark's session manager copies them into the session's
 * settings ({@code spark.sql.catalog.<name>} loads a catalog plugin, {@code
 * spark.sql.thriftServer.queryTimeout} raises the timeout). So a session may open with {@link
 * #ALLOWED} entries only, which the JDBC driver sends itself; any other is refused, and the
 * connection fails with {@code telemetry-sink sql-server is read-only: the session setting ... is
 * refused}.
 *
 * <p>Each session's user and address are remembered for the audit trail ({@link Clients}), and each
 * session runs its statements in a scheduler pool of its own ({@link SessionPools}).
 */
public final class ReadOnlyThriftServer {

  /**
   * The session settings a client may send: the database of the JDBC URL, and the fetch size the
   * Hive JDBC driver sends on its own.
   */
  static final Map<String, Pattern> ALLOWED =
      Map.of(
          "use:database", Pattern.compile("[A-Za-z_][A-Za-z0-9_]{0,127}"),
          "set:hiveconf:hive.server2.thrift.resultset.default.fetch.size",
              Pattern.compile("[0-9]{1,9}"));

  private ReadOnlyThriftServer() {}

  /**
   * Start the Thrift server over {@code session} (the server's own; each client gets a new session
   * of it), listening as the Hive settings in the session's configuration say.
   */
  public static HiveThriftServer2 start(SparkSession session) throws Exception {
    HiveThriftServer2$.MODULE$.systemExitOnError().set(false);
    SparkContext context = session.sparkContext();
    HiveConf conf =
        HiveUtils$.MODULE$
            .newClientForExecution(context.conf(), session.sessionState().newHadoopConf())
            .conf();
    ServerUtils.cleanUpScratchDir(conf);
    HiveThriftServer2 server = new HiveThriftServer2(session);
    server.init(conf);

    // the Thrift service Spark made, swapped for ours (which differs in OpenSession only) before
    // anything listens: the service binds its port when it starts
    Field thriftField = field(HiveServer2.class, "thriftCLIService");
    Field cliField = field(HiveServer2.class, "cliService");
    ThriftCLIService sparks = (ThriftCLIService) thriftField.get(server);
    CLIService cli = (CLIService) cliField.get(server);
    ThriftCLIService guarded = HiveServer2.isHTTPTransportMode(conf) ? new Http(cli) : new Binary(cli);
    guarded.init(conf);
    thriftField.set(server, guarded);
    @SuppressWarnings("unchecked")
    List<Service> services = (List<Service>) field(CompositeService.class, "serviceList").get(server);
    int index = services.indexOf(sparks);
    if (index < 0) {
      throw new IllegalStateException("Spark's Thrift server has no Thrift service to guard");
    }
    services.set(index, guarded);

    // what startWithContext does after starting, done before: a session that opens at once needs it
    Method listener =
        HiveThriftServer2$.class.getDeclaredMethod(
            "createListenerAndUI", HiveThriftServer2.class, SparkContext.class);
    listener.setAccessible(true);
    listener.invoke(HiveThriftServer2$.MODULE$, server, context);
    context.addSparkListener(new SessionPools());
    server.start();
    return server;
  }

  private static Field field(Class<?> owner, String name) throws NoSuchFieldException {
    Field field = owner.getDeclaredField(name);
    field.setAccessible(true);
    return field;
  }

  /**
   * Why a session may not open with {@code configuration} (the {@code OpenSession} request's), or
   * null when it may: every entry must be {@link #ALLOWED}, with a value of the allowed form.
   */
  static String refusal(Map<String, String> configuration) {
    if (configuration == null) {
      return null;
    }
    for (Map.Entry<String, String> entry : configuration.entrySet()) {
      Pattern allowed = ALLOWED.get(entry.getKey());
      String value = entry.getValue() == null ? "" : entry.getValue();
      if (allowed == null || !allowed.matcher(value).matches()) {
        return "the session setting " + describe(entry.getKey());
      }
    }
    return null;
  }

  private static String describe(String key) {
    String lower = key.toLowerCase(Locale.ROOT);
    if (lower.startsWith("set:hiveconf:")) {
      return key.substring("set:hiveconf:".length()) + " (;?key=value in a JDBC URL)";
    }
    if (lower.startsWith("set:hivevar:")) {
      return key.substring("set:hivevar:".length()) + " (#key=value in a JDBC URL)";
    }
    if (lower.startsWith("use:")) {
      return key + " (a database name other than a plain identifier)";
    }
    return key;
  }

  /** Open a session unless its settings are refused; remember its client. */
  private static TOpenSessionResp open(CLIService cli, TOpenSessionReq request, Opener opener)
      throws TException {
    // the Thrift call's thread knows who calls: the HTTP servlet or the binary transport's processor
    String user =
        first(
            SessionManager.getUserName(),
            TSetIpAddressProcessor.getUserName(),
            request.getUsername());
    String address = ClientAddress.current();
    String refused = refusal(request.getConfiguration());
    if (refused != null) {
      SqlGuard.Refused refusal = new SqlGuard.Refused(refused);
      Audit.refused(user, address, refusal.getMessage());
      TOpenSessionResp answer = new TOpenSessionResp();
      answer.setStatus(HiveSQLException.toTStatus(new HiveSQLException(refusal.getMessage())));
      return answer;
    }
    TOpenSessionResp answer = opener.open(request);
    if (answer.isSetSessionHandle()) {
      SparkSQLOperationManager operations =
          (SparkSQLOperationManager) cli.getSessionManager().getOperationManager();
      SparkSession session =
          operations.sessionToContexts().get(new SessionHandle(answer.getSessionHandle()));
      if (session != null) {
        Clients.session(session, user, address);
        String id = new SessionHandle(answer.getSessionHandle()).getSessionId().toString();
        session.conf().set(SessionPools.POOL_SETTING, SessionPools.open(id));
      }
    }
    return answer;
  }

  private static String first(String one, String two, String three) {
    return one != null ? one : two != null ? two : three;
  }

  @FunctionalInterface
  private interface Opener {
    TOpenSessionResp open(TOpenSessionReq request) throws TException;
  }

  /** The binary (SASL) transport's Thrift service, with the session settings checked. */
  static final class Binary extends ThriftBinaryCLIService {
    Binary(CLIService cli) {
      super(cli);
    }

    @Override
    public TOpenSessionResp OpenSession(TOpenSessionReq request) throws TException {
      return open(cliService, request, super::OpenSession);
    }
  }

  /** The HTTP transport's Thrift service, with the session settings checked. */
  static final class Http extends ThriftHttpCLIService {
    Http(CLIService cli) {
      super(cli);
    }

    @Override
    public TOpenSessionResp OpenSession(TOpenSessionReq request) throws TException {
      return open(cliService, request, super::OpenSession);
    }
  }
}
