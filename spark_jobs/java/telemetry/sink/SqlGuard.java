package telemetry.sink;

import java.util.ArrayDeque;
import java.util.Deque;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSession$;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.FunctionIdentifier;
import org.apache.spark.sql.catalyst.TableIdentifier;
import org.apache.spark.sql.catalyst.analysis.ExpressionWithUnresolvedIdentifier;
import org.apache.spark.sql.catalyst.analysis.LocalTempView$;
import org.apache.spark.sql.catalyst.analysis.PlanWithUnresolvedIdentifier;
import org.apache.spark.sql.catalyst.analysis.ResolvedIdentifier;
import org.apache.spark.sql.catalyst.analysis.ResolvedNamespace;
import org.apache.spark.sql.catalyst.analysis.ResolvedTable;
import org.apache.spark.sql.catalyst.analysis.UnresolvedAttribute;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.ExpressionInfo;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.Literal$;
import org.apache.spark.sql.catalyst.expressions.SubqueryExpression;
import org.apache.spark.sql.catalyst.parser.ParseException;
import org.apache.spark.sql.catalyst.parser.ParserInterface;
import org.apache.spark.sql.catalyst.plans.logical.Command;
import org.apache.spark.sql.catalyst.plans.logical.Limit$;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.ParsedStatement;
import org.apache.spark.sql.catalyst.plans.logical.View;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.catalyst.trees.TreeNode;
import org.apache.spark.sql.connector.catalog.CatalogPlugin;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.SparkStrategy;
import org.apache.spark.sql.execution.command.CreateViewCommand;
import org.apache.spark.sql.execution.command.SetCatalogCommand;
import org.apache.spark.sql.execution.command.SetCommand;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import scala.Function1;
import scala.Option;
import scala.Product;
import scala.Tuple2;
import scala.Tuple3;
import scala.collection.Iterator;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.BoxedUnit;

/**
 * The read-only guard of {@code telemetry-sink sql-server}: a Spark session extension ({@code
 * spark.sql.extensions=telemetry.sink.SqlGuard}) that every client session (JDBC/ODBC through the
 * Thrift server, Spark Connect) carries. The server's own session is {@link #trust trusted} and not
 * checked. What reaches a session before any plan (JDBC connection settings, Spark Connect requests)
 * is checked before: {@link ReadOnlyThriftServer}, {@link ConnectGuard}.
 *
 * <p>Every client statement goes through four checks, each before the step it protects:
 *
 * <ol>
 *   <li><b>the parser</b> ({@link CappingParser}): a statement that names a catalog other than the
 *       session's ({@code spark_catalog}), by any name Spark would resolve to one, is refused
 *       before the catalog is loaded, and so is one that names a file by path ({@code
 *       parquet.`/path`}, which the server's {@code spark.sql.runSQLOnFiles=false} turns off
 *       anyway); a statement whose planning parsed more than {@link #MAX_PARSES} SQL texts (nested
 *       views are parsed again at each use) is refused; every query a client sends as SQL gets a
 *       {@code LIMIT} of the configured rows;
 *   <li><b>functions</b>: the XML functions ({@link #REFUSED_FUNCTIONS}: their options name files or
 *       URLs the server would open, {@code rowValidationXSDPath}) are refused when they are resolved;
 *   <li><b>during planning</b> (a resolution rule, an optimizer rule and a planner strategy): the
 *       statement's timeout counts from its start ({@link QueryTimeout#check}), and a plan of more
 *       than {@link #MAX_PLAN_NODES} nodes (views expanded, expressions included) is refused, so
 *       that no statement can keep the driver planning;
 *   <li><b>after analysis</b>: the plan may only read the server's {@code telemetry} views (global
 *       temporary views made by the trusted session), rows it writes itself ({@code VALUES}, {@code
 *       range}), its own temporary views and session variables. Anything else is refused before it
 *       runs, with {@link Refused}: DDL and DML, caching, jars, functions and settings; files read by
 *       path ({@code parquet.`/path`}) or any other relation; code (Python and Scala functions,
 *       {@code reflect}/{@code java_method}, {@code TRANSFORM ... USING} scripts).
 * </ol>
 *
 * <p>Every refusal is logged and counted, with the client's user and address ({@link Audit}).
 */
public final class SqlGuard implements Function1<SparkSessionExtensions, BoxedUnit> {

  /** What a client may not do, said to the client as it is. */
  public static final class Refused extends RuntimeException {
    private static final long serialVersionUID = 1L;

    Refused(String what) {
      super(PREFIX + what + " is refused");
    }
  }

  /** How every refusal starts, on every path (guard, Spark Connect, JDBC settings). */
  static final String PREFIX = "telemetry-sink sql-server is read-only: ";

  /**
   * The most nodes a client's plan may have, views expanded, expressions and subqueries included.
   * The largest dashboard query has about 1,300.
   */
  public static final int MAX_PLAN_NODES = 50_000;

  /**
   * The most SQL texts one client statement may parse: its own and, once per use, those of the
   * views it reads (Spark parses a SQL view again each time a plan uses it). Nested views that use
   * each other twice double this at each level.
   */
  public static final int MAX_PARSES = 1_000;

  /** Functions a client may not call: their options name files or URLs the server would open. */
  public static final Set<String> REFUSED_FUNCTIONS = Set.of("from_xml", "schema_of_xml", "to_xml");

  /**
   * Data sources Spark would read a file of by path as {@code format.`path`} (with {@code
   * spark.sql.runSQLOnFiles}, which the server turns off); a class name (with a dot) is one too.
   */
  static final Set<String> FILE_FORMATS =
      Set.of(
          "parquet", "orc", "json", "csv", "text", "avro", "xml", "binaryfile", "delta", "jdbc",
          "hive", "libsvm", "image", "protobuf", "kafka", "noop");

  /** The catalogs a statement may name: the session's and Spark's built-in pseudo-catalog. */
  static final Set<String> SESSION_CATALOGS = Set.of("spark_catalog", "system");

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

  /** Expressions that parse or write XML with options naming files or URLs. */
  private static final Set<String> XML = Set.of("XmlToStructs", "SchemaOfXml", "StructsToXml");

  /** Unresolved nodes whose name lists ({@code Seq<String>}) may start with a catalog. */
  private static final Set<String> NAMED =
      Set.of(
          "UnresolvedRelation", "UnresolvedNamespace", "UnresolvedIdentifier", "UnresolvedTable",
          "UnresolvedView", "UnresolvedTableOrView", "UnresolvedFunctionName", "UnresolvedFunction",
          "UnresolvedTableValuedFunction", "UnresolvedProcedure", "RelationTimeTravel",
          "UnresolvedTVFAliases");

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
    extensions.injectParser((session, parser) -> new CappingParser(session, parser));
    extensions.injectResolutionRule(session -> new Planning(session, true));
    extensions.injectOptimizerRule(session -> new Planning(session, false));
    extensions.injectPlannerStrategy(PlanningStrategy::new);
    extensions.injectCheckRule(
        session ->
            plan -> {
              if (session != trusted) {
                started(session);
                audited(
                    session,
                    () -> {
                      check(plan);
                      bound(plan);
                    });
              }
              return BoxedUnit.UNIT;
            });
    for (String name : REFUSED_FUNCTIONS) {
      extensions.injectFunction(
          new Tuple3<>(
              FunctionIdentifier.apply(name),
              new ExpressionInfo(SqlGuard.class.getName(), null, name),
              (Function1<Seq<Expression>, Expression>)
                  arguments -> {
                    Refused refused =
                        new Refused(
                            "the XML function " + name + " (its options can name files and URLs)");
                    audit(active(), refused);
                    throw refused;
                  }));
    }
    return BoxedUnit.UNIT;
  }

  /**
   * A step of a client's statement (parsing, analysis, planning): its timeout checked, and, the first
   * time, its user's wait after exhausting the server's limits ({@link StatementBackoff}).
   */
  private static void started(SparkSession session) {
    StatementBackoff.admit(session, QueryTimeout.check(session.sparkContext()));
  }

  /** Run {@code check}; a refusal it throws is audited as {@code session}'s client's. */
  private static void audited(SparkSession session, Runnable check) {
    try {
      check.run();
    } catch (Refused refused) {
      audit(session, refused);
      throw refused;
    }
  }

  private static void audit(SparkSession session, Refused refused) {
    Clients.Client client = Clients.of(session);
    Audit.refused(client.user(), client.address(), refused.getMessage());
  }

  private static SparkSession active() {
    Option<SparkSession> session = SparkSession$.MODULE$.getActiveSession();
    return session.isDefined() ? session.get() : null;
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
    CatalogPlugin catalog = catalogOf(plan);
    if (catalog != null && !SESSION_CATALOGS.contains(catalog.name().toLowerCase(Locale.ROOT))) {
      throw new Refused("the catalog " + catalog.name());
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
    if (XML.contains(name)) {
      throw new Refused("reading or writing XML (" + name + ")");
    }
  }

  /** The catalog a resolved name names, or null. */
  private static CatalogPlugin catalogOf(LogicalPlan plan) {
    if (plan instanceof ResolvedNamespace namespace) {
      return namespace.catalog();
    }
    if (plan instanceof ResolvedIdentifier identifier) {
      return identifier.catalog();
    }
    if (plan instanceof ResolvedTable table) {
      return table.catalog();
    }
    return null;
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

  // -- plan size --------------------------------------------------------------------------------

  /** Refuse {@code plan} if it has more than {@link #MAX_PLAN_NODES} nodes (see {@link #nodes}). */
  static void bound(LogicalPlan plan) {
    if (nodes(plan, MAX_PLAN_NODES) > MAX_PLAN_NODES) {
      throw new Refused(
          "a plan of more than " + MAX_PLAN_NODES + " nodes (views expanded, expressions included)");
    }
  }

  /**
   * The nodes of {@code plan}, counted as a tree (a subtree used twice counts twice, as planning
   * goes through it twice), expressions, subqueries and views' plans included; counting stops past
   * {@code limit}, so it takes time in proportion to {@code limit} at most.
   */
  static int nodes(LogicalPlan plan, int limit) {
    int count = 0;
    Deque<Object> todo = new ArrayDeque<>();
    todo.push(plan);
    while (!todo.isEmpty() && count <= limit) {
      Object node = todo.pop();
      count++;
      if (node instanceof LogicalPlan logical) {
        for (LogicalPlan child : each(logical.children())) {
          todo.push(child);
        }
        for (Object inner : each(logical.innerChildren())) {
          if (inner instanceof LogicalPlan innerPlan) {
            todo.push(innerPlan);
          }
        }
        for (Expression expression : each(logical.expressions())) {
          todo.push(expression);
        }
      } else if (node instanceof Expression expression) {
        if (expression instanceof SubqueryExpression subquery) {
          todo.push(subquery.plan());
        }
        for (Expression child : each(expression.children())) {
          todo.push(child);
        }
      }
    }
    return count;
  }

  // -- names: other catalogs and files, refused before they are resolved -------------------------

  /** The catalogs configured in {@code session} besides the session's (lower case). */
  static Set<String> otherCatalogs(SparkSession session) {
    Set<String> found = new HashSet<>();
    String prefix = "spark.sql.catalog.";
    SQLConf conf = session.sessionState().conf();
    for (String key : CollectionConverters.asJava(conf.getAllConfs()).keySet()) {
      if (key.startsWith(prefix) && key.indexOf('.', prefix.length()) < 0) {
        String catalog = key.substring(prefix.length()).toLowerCase(Locale.ROOT);
        if (!SESSION_CATALOGS.contains(catalog)) {
          found.add(catalog);
        }
      }
    }
    String current = conf.getConfString("spark.sql.defaultCatalog", "spark_catalog");
    if (!SESSION_CATALOGS.contains(current.toLowerCase(Locale.ROOT))) {
      found.add(current.toLowerCase(Locale.ROOT));
    }
    return found;
  }

  /**
   * Refuse a parsed (unresolved) tree that names a file by path ({@code parquet.`/path`}), or one
   * of {@code catalogs}: a table, view, namespace or function name that starts with one, {@code SET
   * CATALOG} one, or, beside such catalogs, an {@code IDENTIFIER(...)} clause that is not a literal
   * (which analysis could make into any name).
   */
  static void refuseNames(Object tree, Set<String> catalogs, ParserInterface parser) {
    Deque<Object> todo = new ArrayDeque<>();
    todo.push(tree);
    int visited = 0;
    while (!todo.isEmpty()) {
      if (++visited > MAX_PLAN_NODES * 4) {
        throw new Refused("a statement of more than " + MAX_PLAN_NODES * 4 + " parts");
      }
      Object node = todo.pop();
      if (node instanceof TableIdentifier table) {
        refuseName(table.nameParts(), catalogs);
      } else if (node instanceof FunctionIdentifier function) {
        refuseName(function.nameParts(), catalogs);
      } else if (node instanceof TreeNode<?> treeNode) {
        String kind = treeNode.getClass().getSimpleName();
        Expression identifier = null;
        if (treeNode instanceof PlanWithUnresolvedIdentifier plan) {
          identifier = plan.identifierExpr();
        } else if (treeNode instanceof ExpressionWithUnresolvedIdentifier expression) {
          identifier = expression.identifierExpr();
        } else if (treeNode instanceof SetCatalogCommand setCatalog) {
          identifier = setCatalog.catalogNameExpr();
        }
        if (identifier != null) {
          List<String> name = literalName(identifier, parser);
          refuseFile(name);
          refuseName(name, catalogs);
        }
        Iterator<Object> elements = treeNode.productIterator();
        while (elements.hasNext()) {
          Object element = elements.next();
          if (NAMED.contains(kind) && isName(element)) {
            List<?> name = CollectionConverters.asJava((scala.collection.Seq<?>) element);
            if (kind.equals("UnresolvedRelation")) {
              refuseFile(name);
            }
            refuseName(name, catalogs);
          } else {
            push(todo, element);
          }
        }
        for (Object inner : each(treeNode.innerChildren())) {
          todo.push(inner);
        }
        if (treeNode instanceof SubqueryExpression subquery) {
          todo.push(subquery.plan());
        }
      }
    }
  }

  private static void push(Deque<Object> todo, Object element) {
    if (element instanceof TreeNode<?> || element instanceof TableIdentifier
        || element instanceof FunctionIdentifier) {
      todo.push(element);
    } else if (element instanceof Option<?> option) {
      if (option.isDefined()) {
        push(todo, option.get());
      }
    } else if (element instanceof scala.collection.Iterable<?> iterable) {
      for (Object item : CollectionConverters.asJava(iterable)) {
        push(todo, item);
      }
    } else if (element instanceof Product product
        && product.getClass().getName().startsWith("scala.Tuple")) {
      Iterator<Object> items = product.productIterator();
      while (items.hasNext()) {
        push(todo, items.next());
      }
    }
  }

  private static boolean isName(Object element) {
    if (!(element instanceof scala.collection.Seq<?> seq) || seq.isEmpty()) {
      return false;
    }
    for (Object part : CollectionConverters.asJava(seq)) {
      if (!(part instanceof String)) {
        return false;
      }
    }
    return true;
  }

  /** The name an IDENTIFIER clause's (or SET CATALOG's) expression gives, if it is a literal. */
  private static List<String> literalName(Expression expression, ParserInterface parser) {
    if (expression instanceof Literal literal && literal.value() != null) {
      String text = literal.value().toString();
      try {
        return CollectionConverters.asJava(parser.parseMultipartIdentifier(text));
      } catch (ParseException e) {
        return List.of(text);
      }
    }
    if (expression instanceof UnresolvedAttribute attribute) {
      return CollectionConverters.asJava(attribute.nameParts());
    }
    return null; // made during analysis: any name
  }

  /** Refuse {@code format.`path`}: a file read by path. */
  private static void refuseFile(List<?> name) {
    if (name != null && name.size() == 2) {
      String format = String.valueOf(name.get(0)).toLowerCase(Locale.ROOT);
      if (FILE_FORMATS.contains(format) || format.contains(".")) {
        throw new Refused(
            "reading anything but the " + namespace + " views (a file by path: " + name.get(0)
                + ".`...`)");
      }
    }
  }

  private static void refuseName(Iterable<?> name, Set<String> catalogs) {
    if (name == null) {
      if (catalogs.isEmpty()) {
        return; // no other catalog to reach; files by path are off (spark.sql.runSQLOnFiles)
      }
      throw new Refused(
          "a name made during analysis (IDENTIFIER of an expression) beside other catalogs");
    }
    java.util.Iterator<?> parts = name.iterator();
    if (parts.hasNext()) {
      String first = String.valueOf(parts.next());
      if (catalogs.contains(first.toLowerCase(Locale.ROOT))) {
        throw new Refused("the catalog " + first);
      }
    }
  }

  private static void refuseName(scala.collection.Seq<String> name, Set<String> catalogs) {
    refuseName(CollectionConverters.asJava(name), catalogs);
  }

  // -- planning: bounded in time and size ---------------------------------------------------------

  /**
   * A rule that changes nothing: as analysis (or optimisation) runs it, the statement's timeout is
   * checked ({@link QueryTimeout#check}) and, during analysis, the plan's size ({@link #bound}).
   * Analysis runs it again on each view's plan as it expands the view, so a statement whose views
   * multiply its plan is stopped while it grows.
   */
  static final class Planning extends Rule<LogicalPlan> {
    private final SparkSession session;
    private final boolean bounded;

    Planning(SparkSession session, boolean bounded) {
      this.session = session;
      this.bounded = bounded;
    }

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
      if (session != trusted) {
        started(session);
        if (bounded) {
          audited(session, () -> bound(plan));
        }
      }
      return plan;
    }
  }

  /** A planner strategy that plans nothing: it checks the statement's timeout at each node. */
  static final class PlanningStrategy extends SparkStrategy {
    private final SparkSession session;

    PlanningStrategy(SparkSession session) {
      this.session = session;
    }

    @Override
    public Seq<SparkPlan> apply(LogicalPlan plan) {
      if (session != trusted) {
        started(session);
      }
      return CollectionConverters.asScala(List.<SparkPlan>of()).toList();
    }
  }

  // -- the parser ---------------------------------------------------------------------------------

  /**
   * Spark's parser, for a client session: it starts the statement's clock (and checks it), counts
   * the SQL texts the statement parses ({@link #MAX_PARSES}), refuses names of other catalogs and of
   * files ({@link #refuseNames}) and puts a {@code LIMIT maxRows} over every query a client sends as
   * SQL.
   */
  static final class CappingParser implements ParserInterface {
    private final SparkSession session;
    private final ParserInterface parser;

    CappingParser(SparkSession session, ParserInterface parser) {
      this.session = session;
      this.parser = parser;
    }

    private boolean client() {
      return session != trusted;
    }

    /** One more SQL text parsed for the current statement: its clock, and the count of texts. */
    private void parsing() {
      started(session);
      QueryTimeout.Statement statement = QueryTimeout.current(session.sparkContext());
      if (statement != null && statement.parses.incrementAndGet() > MAX_PARSES) {
        throw new Refused(
            "a statement that parses more than " + MAX_PARSES + " SQL texts (views nested too deep)");
      }
    }

    private <T> T checked(T tree) {
      refuseNames(tree, otherCatalogs(session), parser);
      return tree;
    }

    private List<String> checkedName(Seq<String> name) {
      refuseName(name, otherCatalogs(session));
      return CollectionConverters.asJava(name);
    }

    @Override
    public LogicalPlan parsePlan(String sql) throws ParseException {
      if (!client()) {
        return parser.parsePlan(sql);
      }
      try {
        parsing();
        LogicalPlan plan = checked(parser.parsePlan(sql));
        int rows = maxRows;
        if (rows <= 0 || plan instanceof Command || plan instanceof ParsedStatement) {
          return plan;
        }
        return (LogicalPlan) (Object) Limit$.MODULE$.apply(Literal$.MODULE$.apply(rows), plan);
      } catch (Refused refused) {
        audit(session, refused);
        throw refused;
      }
    }

    @Override
    public LogicalPlan parseQuery(String sql) throws ParseException {
      if (!client()) {
        return parser.parseQuery(sql);
      }
      try {
        parsing();
        return checked(parser.parseQuery(sql));
      } catch (Refused refused) {
        audit(session, refused);
        throw refused;
      }
    }

    @Override
    public Expression parseExpression(String sql) throws ParseException {
      Expression expression = parser.parseExpression(sql);
      if (client()) {
        audited(session, () -> checked(expression));
      }
      return expression;
    }

    @Override
    public TableIdentifier parseTableIdentifier(String sql) throws ParseException {
      TableIdentifier name = parser.parseTableIdentifier(sql);
      if (client()) {
        audited(session, () -> checkedName(name.nameParts()));
      }
      return name;
    }

    @Override
    public FunctionIdentifier parseFunctionIdentifier(String sql) throws ParseException {
      FunctionIdentifier name = parser.parseFunctionIdentifier(sql);
      if (client()) {
        audited(session, () -> checkedName(name.nameParts()));
      }
      return name;
    }

    @Override
    public Seq<String> parseMultipartIdentifier(String sql) throws ParseException {
      Seq<String> name = parser.parseMultipartIdentifier(sql);
      if (client()) {
        audited(session, () -> checkedName(name));
      }
      return name;
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
