package telemetry.sink.oracle;

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Map;
import org.apache.kafka.common.utils.internals.Exit;

/**
 * Kafka's command-line tools in one long-lived JVM, so that a test runs a tool in milliseconds instead
 * of a JVM start. Each line on stdin is a tool's name and its arguments, separated by tabs; for each,
 * the tool's {@code main} runs with its {@code System.out} and {@code System.err} captured, and its
 * first {@code Exit.exit} ends it as it would end the script's JVM (its status and what it had
 * printed by then are the answer), and stdout gets {@code DONE <status> <out bytes> <err bytes>}, a
 * newline and the two outputs. The tools are the classes {@code kafka-*.sh} runs ({@link #TOOLS}).
 */
public final class KafkaTools {

  static final Map<String, String> TOOLS =
      Map.of(
          "kafka-client-metrics", "org.apache.kafka.tools.ClientMetricsCommand",
          "kafka-configs", "org.apache.kafka.tools.ConfigCommand",
          "kafka-jmx", "org.apache.kafka.tools.JmxTool");

  /** Thrown by {@code Exit.exit}, which would end the JVM: the tool is over. */
  private static final class Exited extends RuntimeException {
    private static final long serialVersionUID = 1L;

    Exited() {
      super(null, null, false, false);
    }
  }

  /** The run in progress: its outputs, and what it had printed when it first called {@code Exit.exit}. */
  private static final class Run {
    final ByteArrayOutputStream out = new ByteArrayOutputStream();
    final ByteArrayOutputStream err = new ByteArrayOutputStream();
    Integer status;
    int outMark;
    int errMark;

    /** The first {@code Exit.exit}: the script's JVM would end here, with what was printed so far. */
    void exited(int code) {
      if (status == null) {
        System.out.flush();
        System.err.flush();
        status = code;
        outMark = out.size();
        errMark = err.size();
      }
      throw new Exited();
    }
  }

  private static Run current;

  public static void main(String[] args) throws Exception {
    PrintStream answers = System.out;
    Exit.setExitProcedure((status, message) -> current.exited(status));
    BufferedReader requests =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    for (String line; (line = requests.readLine()) != null; ) {
      String[] words = line.split("\t", -1);
      current = new Run();
      int status = run(words[0], Arrays.copyOfRange(words, 1, words.length), current);
      byte[] said = Arrays.copyOf(current.out.toByteArray(), current.status == null ? current.out.size() : current.outMark);
      byte[] complained = Arrays.copyOf(current.err.toByteArray(), current.status == null ? current.err.size() : current.errMark);
      answers.print("DONE " + status + " " + said.length + " " + complained.length + "\n");
      answers.write(said);
      answers.write(complained);
      answers.flush();
    }
  }

  private static int run(String tool, String[] args, Run run) {
    PrintStream stdout = System.out;
    PrintStream stderr = System.err;
    PrintStream capturedOut = new PrintStream(run.out, true, StandardCharsets.UTF_8);
    PrintStream capturedErr = new PrintStream(run.err, true, StandardCharsets.UTF_8);
    System.setOut(capturedOut);
    System.setErr(capturedErr);
    try {
      String name = TOOLS.get(tool);
      if (name == null) {
        capturedErr.println("no such tool: " + tool);
        return 127;
      }
      Class.forName(name).getMethod("main", String[].class).invoke(null, (Object) args);
      return run.status == null ? 0 : run.status;
    } catch (InvocationTargetException e) {
      if (run.status != null) {
        return run.status;
      }
      e.getCause().printStackTrace(capturedErr);
      return 1;
    } catch (ReflectiveOperationException e) {
      e.printStackTrace(capturedErr);
      return 1;
    } finally {
      capturedOut.flush();
      capturedErr.flush();
      System.setOut(stdout);
      System.setErr(stderr);
    }
  }
}
