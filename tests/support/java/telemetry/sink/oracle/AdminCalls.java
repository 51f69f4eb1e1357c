package telemetry.sink.oracle;

import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.AlterConfigsOptions;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ListConfigResourcesOptions;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialAlteration;
import org.apache.kafka.clients.admin.UserScramCredentialDeletion;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;

/**
 * Kafka's Java Admin (kafka-clients 4.4) making calls one after another against one cluster, each
 * printed as lines a test compares between a broker and the sink: {@code AdminCalls BOOTSTRAP CALL...},
 * each call its name and arguments joined by {@code :}. Before a call's lines comes {@code > CALL}; a
 * call that fails prints {@code error <exception's simple name>: <message>} (the Admin's exception,
 * unwrapped). Names and entries are printed sorted, so that the order a server lists them in does not
 * matter. Only what a call's arguments name is printed ({@code scram-users:PREFIX} prints the users
 * whose names start with PREFIX). A read given the count of lines expected is repeated until it has
 * them ({@link #settled}).
 */
public final class AdminCalls {

  public static void main(String[] args) throws Exception {
    Properties properties = new Properties();
    properties.put("bootstrap.servers", args[0]);
    properties.put("client.id", "admin-calls");
    try (Admin admin = Admin.create(properties)) {
      for (int i = 1; i < args.length; i++) {
        System.out.println("> " + args[i]);
        String[] call = args[i].split(":");
        try {
          for (String line : settled(admin, call)) {
            System.out.println(line);
          }
        } catch (ExecutionException e) {
          Throwable cause = e.getCause();
          System.out.println("error " + cause.getClass().getSimpleName() + ": " + cause.getMessage());
        }
      }
    }
    System.out.flush();
  }

  /**
   * A call's lines; a read whose last argument is a count of lines ({@code quotas:PREFIX:1}) is made
   * again, for up to 30 s, until it has that many: a broker answers reads from its metadata, which
   * follows a change the controller made a moment later.
   */
  private static List<String> settled(Admin admin, String[] call) throws Exception {
    boolean counted = call.length == 3 && (call[0].equals("quotas") || call[0].equals("scram-users"));
    long deadline = System.nanoTime() + 30_000_000_000L;
    while (true) {
      List<String> lines = call(admin, call);
      if (!counted || lines.size() == Integer.parseInt(call[2]) || System.nanoTime() > deadline) {
        return lines;
      }
      Thread.sleep(100);
    }
  }

  private static List<String> call(Admin admin, String[] call) throws Exception {
    List<String> lines = new ArrayList<>();
    switch (call[0]) {
      case "set-subscription" -> { // set-subscription:NAME:KEY=VALUE,...:validate
        ConfigResource resource = new ConfigResource(ConfigResource.Type.CLIENT_METRICS, call[1]);
        List<AlterConfigOp> ops = new ArrayList<>();
        for (String pair : call[2].split(",")) {
          String[] kv = pair.split("=", 2);
          ops.add(new AlterConfigOp(new ConfigEntry(kv[0], kv[1]), AlterConfigOp.OpType.SET));
        }
        boolean validate = call.length > 3 && call[3].equals("validate");
        admin
            .incrementalAlterConfigs(
                Map.of(resource, ops), new AlterConfigsOptions().validateOnly(validate))
            .all()
            .get();
        lines.add("ok");
      }
      case "append-subscription" -> { // append-subscription:NAME:KEY=VALUE
        ConfigResource resource = new ConfigResource(ConfigResource.Type.CLIENT_METRICS, call[1]);
        String[] kv = call[2].split("=", 2);
        AlterConfigOp op = new AlterConfigOp(new ConfigEntry(kv[0], kv[1]), AlterConfigOp.OpType.APPEND);
        admin.incrementalAlterConfigs(Map.of(resource, List.of(op))).all().get();
        lines.add("ok");
      }
      case "describe-subscription" -> { // describe-subscription:NAME
        ConfigResource resource = new ConfigResource(ConfigResource.Type.CLIENT_METRICS, call[1]);
        Config config = admin.describeConfigs(List.of(resource)).all().get().get(resource);
        Map<String, String> entries = new TreeMap<>();
        for (ConfigEntry entry : config.entries()) {
          entries.put(entry.name(), entry.value() + " " + entry.source() + " " + entry.type());
        }
        entries.forEach((name, said) -> lines.add(name + "=" + said));
      }
      case "list-subscriptions" -> { // list-subscriptions:PREFIX
        Collection<ConfigResource> listed =
            admin
                .listConfigResources(
                    Set.of(ConfigResource.Type.CLIENT_METRICS), new ListConfigResourcesOptions())
                .all()
                .get();
        listed.stream()
            .map(ConfigResource::name)
            .filter(name -> name.startsWith(call[1]))
            .sorted()
            .forEach(lines::add);
      }
      case "upsert-scram" -> { // upsert-scram:USER:MECHANISM:ITERATIONS:PASSWORD
        ScramCredentialInfo info =
            new ScramCredentialInfo(ScramMechanism.fromMechanismName(call[2]), Integer.parseInt(call[3]));
        List<UserScramCredentialAlteration> alterations =
            List.of(new UserScramCredentialUpsertion(call[1], info, call[4]));
        admin.alterUserScramCredentials(alterations).all().get();
        lines.add("ok");
      }
      case "delete-scram" -> { // delete-scram:USER:MECHANISM
        List<UserScramCredentialAlteration> alterations =
            List.of(
                new UserScramCredentialDeletion(call[1], ScramMechanism.fromMechanismName(call[2])));
        admin.alterUserScramCredentials(alterations).all().get();
        lines.add("ok");
      }
      case "scram-users" -> { // scram-users:PREFIX (every user described, those named PREFIX... shown)
        Map<String, UserScramCredentialsDescription> users =
            admin.describeUserScramCredentials().all().get();
        new TreeMap<>(users)
            .forEach(
                (user, description) -> {
                  if (user.startsWith(call[1])) {
                    List<String> infos = new ArrayList<>();
                    for (ScramCredentialInfo info : description.credentialInfos()) {
                      infos.add(info.mechanism() + ":" + info.iterations());
                    }
                    infos.sort(null);
                    lines.add(user + " " + infos);
                  }
                });
      }
      case "set-quota" -> { // set-quota:USER:KEY=VALUE (VALUE "-": removed)
        String[] kv = call[2].split("=", 2);
        Double value = kv[1].equals("-") ? null : Double.valueOf(kv[1]);
        ClientQuotaAlteration alteration =
            new ClientQuotaAlteration(
                new ClientQuotaEntity(Map.of(ClientQuotaEntity.USER, call[1])),
                List.of(new ClientQuotaAlteration.Op(kv[0], value)));
        admin.alterClientQuotas(List.of(alteration)).all().get();
        lines.add("ok");
      }
      case "quotas" -> { // quotas:USER-PREFIX (every quota described, those of users named PREFIX... shown)
        Map<ClientQuotaEntity, Map<String, Double>> quotas =
            admin.describeClientQuotas(ClientQuotaFilter.all()).entities().get();
        List<String> found = new ArrayList<>();
        quotas.forEach(
            (entity, values) -> {
              String user = entity.entries().get(ClientQuotaEntity.USER);
              if (user != null && user.startsWith(call[1])) {
                found.add(new TreeMap<>(entity.entries()) + " " + new TreeMap<>(values));
              }
            });
        found.sort(null);
        lines.addAll(found);
      }
      default -> throw new IllegalArgumentException("no such call: " + call[0]);
    }
    return lines;
  }
}
