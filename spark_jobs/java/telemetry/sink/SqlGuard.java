package telemetry.sink;

import java.util.Locale;
import java.util.Set;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.FunctionIdentifier;
import org.apache.spark.sql.catalyst.TableIdentifier;
import org.apache.spark.sql.catalyst.analysis.LocalTempView$;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal$;
import org.apache.spark.sql.catalyst.expressions.SubqueryExpression;
import org.apache.spark.sql.catalyst.parser.ParseException;
import org.apache.spark.sql.catalyst.parser.ParserInterface;
import org.apache.spark.sql.catalyst.plans.logical.Command;
import org.apache.spark.sql.catalyst.plans.logical.Limit$;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.ParsedStatement;
import org.apache.spark.sql.catalyst.plans.logical.View;
import org.apache.spark.sql.execution.command.CreateViewCommand;
import org.apache.spark.sql.execution.command.SetCommand;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import scala.Function1;
import scala.Option;
import scala.Tuple2;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.BoxedUnit;

/**
 * The read-only guard of {@code telemetry-sink sql-server}: a Spark session extension ({@code
 * spark.sql.extensions=telemetry.sink.SqlGuard}) that every client session (JDBC/ODBC through the
 * Thrift server, Spark Connect) carries.
 *
 * <p>After analysis, a client's plan may only read: the server's {@code telemetry} views (global
 * temporary views, made by the server's own session, which is {@link #trust trusted} and not
 * checked), rows it writes itself ({@code VALUES}, {@code range}), and its own temporary views and
 * session variables. Anything else is refused before it runs, with {@link Refused}: DDL and DML,
 * caching, jars, functions and settings; files read by path ({@code parquet.`/path`}) or any other
 * relation; code (Python and Scala functions, {@code reflect}/{@code java_method}, {@code
 * TRANSFORM ... USING} scripts). Statements' results hold at most the configured rows: the parser
 * puts a {@code LIMIT} over every query a client sends as SQL.
 */
public final class SqlGuard implements Function1<SparkSessionExtensions, BoxedUnit> {

  /** What a client may not do, said to the client as it is. */
  public static final class Refused extends RuntimeException {
    private static final long serialVersionUID = 1L;

    Refused(String what) {
      super("telemetry-sink sql-server is read-only: " + what + " is refused");
    }
  }

  private static volatile SparkSession trusted;
  private static volatile int maxRows;
  private static volatile String namespace = "telemetry";

  /** The commands a client may run: listing, describing, its own session's views and variables. */
  private static final Set<String> ALLOWED_COMMANDS =
      Set.of(
          "ShowTablesCommand", "ShowTables", "ShowViewsCommand", "ShowViews",
          "ShowNamespacesCommand", "ShowNamespaces", "ShowColumnsCommand", "ShowColumns",
          "ShowFunctionsCommand", "ShowFunctions", "ShowCatalogsCommand", "ShowCatalogs",
          "ShowCurrentNamespaceCommand", "ShowCurrentNamespace", "ShowTablePropertiesCommand",
          "ShowTableProperties", "ShowCreateTableCommand", "ShowCreateTable", "ShowTableExtended",
          "DescribeTableCommand", "DescribeRelation", "DescribeColumnCommand", "DescribeColumn",
          "DescribeQueryCommand", "DescribeNamespace", "DescribeDatabaseCommand",
          "DescribeFunctionCommand", "DescribeFunction", "SetCatalogAndNamespace",
          "SetCatalogCommand", "SetNamespaceCommand", "ResetCommand", "ExplainCommand",
          "CreateVariable", "SetVariable", "DropVariable", "SetCommand", "CreateViewCommand");

  /** Leaves a plan may read besides the trusted views: rows the query itself holds or makes. */
  private static final Set<String> ALLOWED_LEAVES =
      Set.of("LocalRelation", "Range", "OneRowRelation", "CTERelationRef", "EmptyRelation");

  /** Nodes and expressions that run a client's code, or shell commands, on the server. */
  private static final String[] CODE =
      new String[] {
        "Python", "Pandas", "InArrow", "ScalaUDF", "ScalaUDAF", "ScalaAggregator", "Reflect",
        "ScriptTransformation", "MapPartitions", "MapElements", "MapGroups", "FlatMapGroups",
        "CoGroup", "AppendColumns", "TypedFilter", "TransformWithState", "UserDefinedGenerator"
      };

  /**
   * Trust {@code session} (the server's own: it makes the views), cap clients' results at {@code
   * rows} rows (0: no cap) and name the namespace of the views.
   */
  public static void configure(SparkSession session, int rows, String views) {
    trusted = session;
    maxRows = rows;
    namespace = views;
  }

  @Override
  public BoxedUnit apply(SparkSessionExtensions extensions) {
    extensions.injectCheckRule(
        session ->
            plan -> {
              if (session != trusted) {
                check(plan);
              }
              return BoxedUnit.UNIT;
            });
    extensions.injectParser((session, parser) -> new CappingParser(session, parser));
    return BoxedUnit.UNIT;
  }

  /** Refuse {@code plan} unless it only reads what a client may read (see the class). */
  public static void check(LogicalPlan plan) {
    if (plan instanceof View view && view.isTempView() && isServerView(view)) {
      return; // the server's own view: made by the trusted session, from the tables
    }
    String name = plan.getClass().getSimpleName();
    refuseCode(name);
    if (plan instanceof Command || plan instanceof ParsedStatement) {
      if (!ALLOWED_COMMANDS.contains(name)) {
        throw new Refused(describe(name));
      }
      if (plan instanceof SetCommand set) {
        Option<Tuple2<String, Option<String>>> kv = set.kv();
        if (kv.isDefined() && kv.get()._2().isDefined()) {
          throw new Refused("changing a setting (SET " + kv.get()._1() + "=...)");
        }
      }
      if (plan instanceof CreateViewCommand view) {
        if (view.viewType() != LocalTempView$.MODULE$) {
          throw new Refused("creating a view other than a TEMPORARY one");
        }
        check(view.plan());
      }
      if (name.equals("ExplainCommand")) {
        return; // what it explains is analysed, and so checked, on its own
      }
    } else if (plan.children().isEmpty()
        && !ALLOWED_LEAVES.contains(name)
        && !name.startsWith("Resolved")) { // what a name resolved to (a view, a namespace): no rows
      throw new Refused(
          "reading anything but the " + namespace + " views (" + name + ")");
    }
    for (Expression expression : each(plan.expressions())) {
      checkExpression(expression);
    }
    for (LogicalPlan child : each(plan.children())) {
      check(child);
    }
  }

  private static void checkExpression(Expression expression) {
    refuseCode(expression.getClass().getSimpleName());
    if (expression instanceof SubqueryExpression subquery) {
      check(subquery.plan());
    }
    for (Expression child : each(expression.children())) {
      checkExpression(child);
    }
  }

  private static void refuseCode(String name) {
    for (String code : CODE) {
      if (name.contains(code) || name.endsWith("InR")) {
        throw new Refused("running code on the server (" + name + ")");
      }
    }
  }

  private static boolean isServerView(View view) {
    TableIdentifier id = view.desc().identifier();
    return id.database().isDefined() && id.database().get().equalsIgnoreCase(namespace);
  }

  private static String describe(String command) {
    String words = command.replace("Command", "").replaceAll("([a-z])([A-Z])", "$1 $2");
    return words.toUpperCase(Locale.ROOT) + " (" + command + ")";
  }

  private static <T> Iterable<T> each(Seq<T> seq) {
    return CollectionConverters.asJava(seq);
  }

  /** Spark's parser, with a {@code LIMIT maxRows} over every query a client sends as SQL. */
  static final class CappingParser implements ParserInterface {
    private final SparkSession session;
    private final ParserInterface parser;

    CappingParser(SparkSession session, ParserInterface parser) {
      this.session = session;
      this.parser = parser;
    }

    @Override
    public LogicalPlan parsePlan(String sql) throws ParseException {
      LogicalPlan plan = parser.parsePlan(sql);
      int rows = maxRows;
      if (rows <= 0
          || session == trusted
          || plan instanceof Command
          || plan instanceof ParsedStatement) {
        return plan;
      }
      return (LogicalPlan) (Object) Limit$.MODULE$.apply(Literal$.MODULE$.apply(rows), plan);
    }

    @Override
    public Expression parseExpression(String sql) throws ParseException {
      return parser.parseExpression(sql);
    }

    @Override
    public TableIdentifier parseTableIdentifier(String sql) throws ParseException {
      return parser.parseTableIdentifier(sql);
    }

    @Override
    public FunctionIdentifier parseFunctionIdentifier(String sql) throws ParseException {
      return parser.parseFunctionIdentifier(sql);
    }

    @Override
    public Seq<String> parseMultipartIdentifier(String sql) throws ParseException {
      return parser.parseMultipartIdentifier(sql);
    }

    @Override
    public LogicalPlan parseQuery(String sql) throws ParseException {
      return parser.parseQuery(sql);
    }

    @Override
    public StructType parseRoutineParam(String sql) throws ParseException {
      return parser.parseRoutineParam(sql);
    }

    @Override
    public StructType parseTableSchema(String sql) throws ParseException {
      return parser.parseTableSchema(sql);
    }

    @Override
    public DataType parseDataType(String sql) throws ParseException {
      return parser.parseDataType(sql);
    }
  }
}
