package telemetry.sink;

import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import org.apache.spark.connect.proto.ExecutePlanRequest;
import org.apache.spark.connect.proto.UserContext;
import org.apache.spark.sql.connect.config.Connect$;
import org.apache.spark.sql.connect.service.ExecuteJobTag$;
import org.sparkproject.connect.grpc.ForwardingServerCallListener;
import org.sparkproject.connect.grpc.Grpc;
import org.sparkproject.connect.grpc.Metadata;
import org.sparkproject.connect.grpc.ServerCall;
import org.sparkproject.connect.grpc.ServerCallHandler;
import org.sparkproject.connect.grpc.ServerInterceptor;
import org.sparkproject.connect.grpc.Status;
import org.sparkproject.connect.protobuf.Descriptors.FieldDescriptor;
import org.sparkproject.connect.protobuf.Message;
import scala.Option;

/**
 * The read-only guard of {@code telemetry-sink sql-server}'s Spark Connect endpoint: a gRPC
 * interceptor ({@code spark.connect.grpc.interceptor.classes=telemetry.sink.ConnectGuard}) that sees
 * every request before Spark Connect does, so before anything in it is planned, analysed or run.
 *
 * <ol>
 *   <li><b>The token.</b> With a token ({@code spark.connect.authenticate.token}, or the JVM's
 *       {@code SPARK_CONNECT_AUTHENTICATE_TOKEN}), a call without it is refused ({@code
 *       UNAUTHENTICATED}) and counted as a failed login. Spark's own token check runs after this one.
 *   <li><b>The calls.</b> Only {@link #CALLS} may be made: running and analysing plans, reading
 *       settings, interrupting, reattaching to and releasing one's own operations. Artifacts ({@code
 *       addArtifacts}, {@code copyFromLocalToFs}, Python files and jars), {@code CloneSession} and any
 *       call this list does not know are refused.
 *   <li><b>The request.</b> Every message of a request, walked through its protobuf descriptor (so
 *       nested relations, expressions and types are all seen), must be of a type on the allowlist
 *       {@link #MESSAGES}: reads, SQL, projections, joins, aggregates, literals, casts, functions by
 *       name, the catalog's listing calls, SQL commands (which the SQL guard checks) and temporary
 *       views. Everything else is refused: client code of any kind (Python and Scala UDFs, UDTFs
 *       and their {@code analyze}, data sources, {@code mapInPandas}/{@code applyInPandas}, typed
 *       aggregates, user-defined types), writes, streaming ({@code foreach}, {@code foreachBatch},
 *       listeners), files by path, caching and checkpoints, settings changes ({@code
 *       spark.conf.set}/{@code unset}), ML, pipelines, extensions ({@code Any}), compressed plans
 *       (which this walk cannot see into), and any relation or command a newer Spark adds.
 *       Some allowed types have fields that are refused: {@link #fieldRefusal}.
 * </ol>
 *
 * <p>A refusal answers {@code PERMISSION_DENIED} with {@code telemetry-sink sql-server is read-only:
 * <what> is refused} and is audited ({@link Audit}) with the request's {@code user_id} and the
 * connection's address. A request let through starts its statement's clock ({@link QueryTimeout})
 * and names its client for the guard's own refusals ({@link Clients}).
 */
public final class ConnectGuard implements ServerInterceptor {

  /** The most protobuf messages one request may hold (a plan's relations, expressions, types...). */
  public static final int MAX_MESSAGES = 20_000;

  /** The Spark Connect calls a client may make. */
  static final Set<String> CALLS =
      Set.of(
          "ExecutePlan", "AnalyzePlan", "Config", "Interrupt", "ReattachExecute", "ReleaseExecute",
          "ReleaseSession", "FetchErrorDetails", "GetStatus");

  private static final String P = "spark.connect.";

  /** The message types a request may hold (full protobuf names). */
  static final Set<String> MESSAGES =
      Set.of(
          // requests, and what every request carries
          P + "ExecutePlanRequest", P + "ExecutePlanRequest.RequestOption", P + "ReattachOptions",
          P + "ResultChunkingOptions", P + "AnalyzePlanRequest", P + "ConfigRequest",
          P + "InterruptRequest", P + "ReattachExecuteRequest", P + "ReleaseExecuteRequest",
          P + "ReleaseExecuteRequest.ReleaseAll", P + "ReleaseExecuteRequest.ReleaseUntil",
          P + "ReleaseSessionRequest", P + "FetchErrorDetailsRequest", P + "GetStatusRequest",
          P + "GetStatusRequest.OperationStatusRequest", P + "UserContext",
          // analysis requests that only look
          P + "AnalyzePlanRequest.Schema", P + "AnalyzePlanRequest.Explain",
          P + "AnalyzePlanRequest.TreeString", P + "AnalyzePlanRequest.IsLocal",
          P + "AnalyzePlanRequest.IsStreaming", P + "AnalyzePlanRequest.InputFiles",
          P + "AnalyzePlanRequest.SparkVersion", P + "AnalyzePlanRequest.DDLParse",
          P + "AnalyzePlanRequest.SameSemantics", P + "AnalyzePlanRequest.SemanticHash",
          P + "AnalyzePlanRequest.JsonToDDL",
          // settings: reading only
          P + "ConfigRequest.Operation", P + "ConfigRequest.Get", P + "ConfigRequest.GetWithDefault",
          P + "ConfigRequest.GetOption", P + "ConfigRequest.GetAll", P + "ConfigRequest.IsModifiable",
          P + "KeyValue",
          // plans: a relation, or one of two commands
          P + "Plan", P + "Command", P + "SqlCommand", P + "SqlCommand.ArgsEntry",
          P + "SqlCommand.NamedArgumentsEntry", P + "CreateDataFrameViewCommand",
          // ML: only emptying the session's model cache, which every PySpark client does as it exits
          P + "MlCommand", P + "MlCommand.CleanCache",
          // relations
          P + "Relation", P + "RelationCommon", P + "Origin", P + "PythonOrigin", P + "JvmOrigin",
          P + "StackTraceElement", P + "Read", P + "Read.NamedTable", P + "Project", P + "Filter",
          P + "Join", P + "Join.JoinDataType", P + "SetOperation", P + "Sort", P + "Limit",
          P + "Aggregate", P + "Aggregate.Pivot", P + "Aggregate.GroupingSets", P + "SQL",
          P + "SQL.ArgsEntry", P + "SQL.NamedArgumentsEntry", P + "LocalRelation", P + "Sample",
          P + "Offset", P + "Deduplicate", P + "Range", P + "SubqueryAlias", P + "Repartition",
          P + "ToDF", P + "WithColumnsRenamed", P + "WithColumnsRenamed.RenameColumnsMapEntry",
          P + "WithColumnsRenamed.Rename", P + "ShowString", P + "HtmlString", P + "Drop",
          P + "Tail", P + "WithColumns", P + "Hint", P + "Unpivot", P + "Unpivot.Values",
          P + "ToSchema", P + "RepartitionByExpression", P + "CollectMetrics", P + "AsOfJoin",
          P + "LateralJoin", P + "NearestByJoin", P + "WithRelations", P + "Transpose",
          P + "UnresolvedTableValuedFunction", P + "NAFill", P + "NADrop", P + "NAReplace",
          P + "NAReplace.Replacement", P + "StatSummary", P + "StatCrosstab", P + "StatDescribe",
          P + "StatCov", P + "StatCorr", P + "StatApproxQuantile", P + "StatFreqItems",
          P + "StatSampleBy", P + "StatSampleBy.Fraction",
          // the catalog: listing and describing
          P + "Catalog", P + "CurrentDatabase", P + "SetCurrentDatabase", P + "ListDatabases",
          P + "ListTables", P + "ListViews", P + "ListFunctions", P + "ListColumns",
          P + "GetDatabase", P + "GetTable", P + "GetFunction", P + "DatabaseExists",
          P + "TableExists", P + "FunctionExists", P + "IsCached", P + "CurrentCatalog",
          P + "ListCatalogs", P + "GetTableProperties", P + "GetCreateTableString",
          // expressions
          P + "Expression", P + "ExpressionCommon", P + "Expression.Literal",
          P + "Expression.Literal.Decimal", P + "Expression.Literal.CalendarInterval",
          P + "Expression.Literal.Array", P + "Expression.Literal.Map", P + "Expression.Literal.Struct",
          P + "Expression.Literal.SpecializedArray", P + "Expression.Literal.Time", P + "Bools",
          P + "Ints", P + "Longs", P + "Floats", P + "Doubles", P + "Strings",
          P + "Expression.UnresolvedAttribute", P + "Expression.UnresolvedFunction",
          P + "Expression.ExpressionString", P + "Expression.UnresolvedStar", P + "Expression.Alias",
          P + "Expression.Cast", P + "Expression.UnresolvedRegex", P + "Expression.SortOrder",
          P + "Expression.LambdaFunction", P + "Expression.Window", P + "Expression.Window.WindowFrame",
          P + "Expression.Window.WindowFrame.FrameBoundary", P + "Expression.UnresolvedExtractValue",
          P + "Expression.UpdateFields", P + "Expression.UnresolvedNamedLambdaVariable",
          P + "CallFunction", P + "NamedArgumentExpression", P + "SubqueryExpression",
          P + "SubqueryExpression.TableArgOptions",
          // data types, but user-defined ones (a class the server would load)
          P + "DataType", P + "DataType.NULL", P + "DataType.Binary", P + "DataType.Boolean",
          P + "DataType.Byte", P + "DataType.Short", P + "DataType.Integer", P + "DataType.Long",
          P + "DataType.Float", P + "DataType.Double", P + "DataType.Decimal", P + "DataType.String",
          P + "DataType.Char", P + "DataType.VarChar", P + "DataType.Date", P + "DataType.Timestamp",
          P + "DataType.TimestampNTZ", P + "DataType.CalendarInterval",
          P + "DataType.YearMonthInterval", P + "DataType.DayTimeInterval", P + "DataType.Array",
          P + "DataType.Struct", P + "DataType.StructField", P + "DataType.Map", P + "DataType.Variant",
          P + "DataType.Geometry", P + "DataType.Geography", P + "DataType.Unparsed",
          P + "DataType.Time");

  /** Functions refused by name, besides the SQL guard's: they call Java methods by name. */
  static final Set<String> CODE_FUNCTIONS = Set.of("reflect", "java_method", "try_reflect");

  private static final Metadata.Key<String> AUTHORIZATION =
      Metadata.Key.of("Authorization", Metadata.ASCII_STRING_MARSHALLER);
  private static final Metadata.Key<byte[]> DETAILS =
      Metadata.Key.of("grpc-status-details-bin", Metadata.BINARY_BYTE_MARSHALLER);

  private final byte[] expected;

  /** Made by Spark Connect from {@code spark.connect.grpc.interceptor.classes}. */
  public ConnectGuard() {
    Option<String> token = Connect$.MODULE$.getAuthenticateToken();
    expected =
        token.isDefined() && !token.get().isEmpty()
            ? ("Bearer " + token.get()).getBytes(StandardCharsets.UTF_8)
            : null;
  }

  @Override
  public <Q, A> ServerCall.Listener<Q> interceptCall(
      ServerCall<Q, A> call, Metadata headers, ServerCallHandler<Q, A> next) {
    String address = address(call);
    if (expected != null) {
      String given = headers.get(AUTHORIZATION);
      if (given == null
          || !MessageDigest.isEqual(given.getBytes(StandardCharsets.UTF_8), expected)) {
        String why = given == null ? "no token" : "a wrong token";
        Audit.loginFailed(null, address, "Spark Connect: " + why);
        close(
            call,
            Status.UNAUTHENTICATED,
            "telemetry-sink sql-server: Spark Connect needs the server's token"
                + " (sc://HOST:PORT/;token=...)");
        return new ServerCall.Listener<>() {};
      }
    }
    String method = call.getMethodDescriptor().getBareMethodName();
    if (method == null || !CALLS.contains(method)) {
      refuse(
          call,
          new Clients.Client(null, address),
          "the Spark Connect call " + method + explainCall(method));
      return new ServerCall.Listener<>() {};
    }
    return new Inspecting<>(next.startCall(call, headers), call, address);
  }

  private static String explainCall(String method) {
    if ("AddArtifacts".equals(method) || "ArtifactStatus".equals(method)) {
      return " (artifacts: files, jars and Python code sent to the server, copyFromLocalToFs)";
    }
    return "";
  }

  /** Checks each message of a call before it is handed on; a refused call gets nothing further. */
  private static final class Inspecting<Q, A>
      extends ForwardingServerCallListener.SimpleForwardingServerCallListener<Q> {
    private final ServerCall<Q, A> call;
    private final String address;
    private Clients.Client client;
    private boolean refused;

    Inspecting(ServerCall.Listener<Q> delegate, ServerCall<Q, A> call, String address) {
      super(delegate);
      this.call = call;
      this.address = address;
      this.client = new Clients.Client(null, address);
    }

    @Override
    public void onMessage(Q message) {
      if (refused) {
        return;
      }
      if (message instanceof Message request) {
        client = new Clients.Client(userOf(request), address);
        String refusal = refusal(request);
        if (refusal != null) {
          refused = true;
          refuse(call, client, refusal);
          return;
        }
        if (request instanceof ExecutePlanRequest execute && !execute.getOperationId().isEmpty()) {
          String tag =
              ExecuteJobTag$.MODULE$.apply(
                  execute.getUserContext().getUserId(),
                  execute.getSessionId(),
                  execute.getOperationId());
          Clients.operation(tag, client);
          QueryTimeout.begin(tag);
        }
      }
      within(() -> super.onMessage(message));
    }

    @Override
    public void onHalfClose() {
      if (!refused) {
        within(super::onHalfClose);
      }
    }

    /** Run {@code step} as this call's: its client, and a statement of its own for the timeout. */
    private void within(Runnable step) {
      Clients.call(client);
      QueryTimeout.beginCall();
      try {
        step.run();
      } finally {
        QueryTimeout.endCall();
        Clients.call(null);
      }
    }
  }

  private static void refuse(ServerCall<?, ?> call, Clients.Client client, String what) {
    String message = SqlGuard.PREFIX + what + " is refused";
    Audit.refused(client.user(), client.address(), message);
    close(call, Status.PERMISSION_DENIED, message);
  }

  /**
   * Answer {@code call} with {@code status} and {@code message}, also as the rich status ({@code
   * grpc-status-details-bin}) that Spark Connect's clients read their error's message from.
   */
  private static void close(ServerCall<?, ?> call, Status status, String message) {
    Metadata trailers = new Metadata();
    trailers.put(
        DETAILS,
        org.sparkproject.connect.google_protos.rpc.Status.newBuilder()
            .setCode(status.getCode().value())
            .setMessage(message)
            .build()
            .toByteArray());
    try {
      call.close(status.withDescription(message), trailers);
    } catch (IllegalStateException alreadyClosed) {
      // closed meanwhile (the client went away): nothing to answer
    }
  }

  private static String address(ServerCall<?, ?> call) {
    SocketAddress remote = call.getAttributes().get(Grpc.TRANSPORT_ATTR_REMOTE_ADDR);
    if (remote instanceof InetSocketAddress inet && inet.getAddress() != null) {
      return inet.getAddress().getHostAddress();
    }
    return remote == null ? null : remote.toString();
  }

  /** The {@code user_id} a request says it comes from (not authenticated), or null. */
  private static String userOf(Message request) {
    FieldDescriptor field = request.getDescriptorForType().findFieldByName("user_context");
    if (field != null && request.hasField(field)
        && request.getField(field) instanceof UserContext context) {
      return context.getUserId();
    }
    return null;
  }

  /** Why {@code request} is refused (see the class), or null when it may go on. */
  static String refusal(Message request) {
    return walk(request, null, new int[] {0});
  }

  private static String walk(Message message, String via, int[] count) {
    String type = message.getDescriptorForType().getFullName();
    if (!MESSAGES.contains(type)) {
      return describe(via, type);
    }
    if (++count[0] > MAX_MESSAGES) {
      return "a Spark Connect request of more than " + MAX_MESSAGES + " parts";
    }
    String refused = fieldRefusal(type, message);
    if (refused != null) {
      return refused;
    }
    for (Map.Entry<FieldDescriptor, Object> entry : message.getAllFields().entrySet()) {
      FieldDescriptor field = entry.getKey();
      if (field.getJavaType() != FieldDescriptor.JavaType.MESSAGE) {
        continue;
      }
      String at = message.getDescriptorForType().getName() + "." + field.getName();
      List<?> values = field.isRepeated() ? (List<?>) entry.getValue() : List.of(entry.getValue());
      for (Object value : values) {
        String inner = walk((Message) value, at, count);
        if (inner != null) {
          return inner;
        }
      }
    }
    return null;
  }

  /**
   * Fields of allowed types that are refused: streaming reads, options on a table read (a path),
   * global views, functions that open files or call Java by name.
   */
  static String fieldRefusal(String type, Message message) {
    switch (type) {
      case P + "Read":
        return bool(message, "is_streaming") ? "a streaming read" : null;
      case P + "Read.NamedTable":
        return count(message, "options") > 0 ? "options on a table read" : null;
      case P + "CreateDataFrameViewCommand":
        return bool(message, "is_global") ? "creating a global temporary view" : null;
      case P + "Expression.UnresolvedFunction":
      case P + "CallFunction":
      case P + "UnresolvedTableValuedFunction":
        String name = string(message, "function_name");
        String bare =
            name.substring(name.lastIndexOf('.') + 1).replace("`", "").toLowerCase(Locale.ROOT);
        if (SqlGuard.REFUSED_FUNCTIONS.contains(bare)) {
          return "the XML function " + bare + " (its options can name files and URLs)";
        }
        return CODE_FUNCTIONS.contains(bare) ? "running code on the server (" + bare + ")" : null;
      default:
        return null;
    }
  }

  private static boolean bool(Message message, String name) {
    FieldDescriptor field = message.getDescriptorForType().findFieldByName(name);
    return field != null && Boolean.TRUE.equals(message.getField(field));
  }

  private static int count(Message message, String name) {
    FieldDescriptor field = message.getDescriptorForType().findFieldByName(name);
    return field == null ? 0 : message.getRepeatedFieldCount(field);
  }

  private static String string(Message message, String name) {
    FieldDescriptor field = message.getDescriptorForType().findFieldByName(name);
    return field == null ? "" : String.valueOf(message.getField(field));
  }

  /** A refused message, as the client's words name it: the field that holds it, and its type. */
  private static String describe(String via, String type) {
    String bare = type.startsWith(P) ? type.substring(P.length()) : type;
    if (via == null) {
      return "the Spark Connect request " + bare;
    }
    String field = via.substring(via.indexOf('.') + 1);
    return switch (via.substring(0, via.indexOf('.'))) {
      case "Relation" -> "the Spark Connect relation " + field + " (" + bare + ")";
      case "Command" -> "the Spark Connect command " + field + " (" + bare + ")";
      case "Expression" -> "the Spark Connect expression " + field + " (" + bare + ")";
      case "Catalog" -> "the Spark Connect catalog call " + field + " (" + bare + ")";
      case "Operation" -> "changing a setting (spark.conf." + field + ")";
      case "Plan" -> "a Spark Connect plan's " + field + " (" + bare + ")";
      case "Read" -> "reading a data source or files (spark.read.format(...), " + bare + ")";
      default -> "the Spark Connect " + via + " (" + bare + ")";
    };
  }
}
