package telemetry.sink;

import java.lang.reflect.Field;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketAddress;
import org.apache.hive.service.Service;
import org.apache.hive.service.auth.TSetIpAddressProcessor;
import org.apache.hive.service.cli.session.SessionManager;
import org.apache.hive.service.cli.thrift.ThriftBinaryCLIService;
import org.apache.hive.service.server.HiveServer2;
import org.apache.thrift.server.TServer;
import org.apache.thrift.transport.TSocket;
import org.apache.thrift.transport.TTransport;
import org.apache.thrift.transport.TTransportException;
import org.apache.thrift.transport.TTransportFactory;
import org.sparkproject.jetty.server.internal.HttpConnection;

/**
 * The address of the JDBC/ODBC client the current thread serves, where Hive does not say it: while
 * a password is checked.
 *
 * <p>Hive sets its own per-thread address ({@code SessionManager.getIpAddress()}, {@code
 * TSetIpAddressProcessor.getUserIpAddress()}) for each Thrift call, after the login: the binary
 * transport checks the password in its SASL handshake, before any call, and the HTTP transport's
 * servlet sets the address after it checked the password. So:
 *
 * <ul>
 *   <li><b>binary:</b> {@link #install} wraps the Thrift server's transport factory, which runs the
 *       handshake on the connection's worker thread, so that the thread knows the connection's
 *       address meanwhile;
 *   <li><b>HTTP:</b> Jetty's connection of the request the thread handles (its remote address);
 *   <li>otherwise (a Thrift call after the login): Hive's own.
 * </ul>
 */
public final class ClientAddress {

  private static final ThreadLocal<String> HANDSHAKE = new ThreadLocal<>();

  private ClientAddress() {}

  /** The client's address (an IP address), or null when the current thread serves no client. */
  public static String current() {
    String address = HANDSHAKE.get();
    if (address == null) {
      address = jetty();
    }
    if (address == null) {
      address = SessionManager.getIpAddress();
    }
    if (address == null) {
      address = TSetIpAddressProcessor.getUserIpAddress();
    }
    return address;
  }

  private static String jetty() {
    try {
      HttpConnection connection = HttpConnection.getCurrentConnection();
      return connection == null ? null : host(connection.getEndPoint().getRemoteSocketAddress());
    } catch (LinkageError | RuntimeException e) { // another Jetty: the address is not known
      return null;
    }
  }

  private static String host(SocketAddress address) {
    if (address instanceof InetSocketAddress inet && inet.getAddress() != null) {
      return inet.getAddress().getHostAddress();
    }
    return null;
  }

  /**
   * Make the binary transport of {@code server} (a started Thrift server) tell its handshakes'
   * addresses; what was done, in words (the HTTP transport needs nothing).
   */
  public static String install(HiveServer2 server) {
    for (Service service : server.getServices()) {
      if (service instanceof ThriftBinaryCLIService) {
        try {
          Field field = ThriftBinaryCLIService.class.getDeclaredField("server");
          field.setAccessible(true);
          TServer thrift = (TServer) field.get(service);
          if (thrift == null) {
            return "the binary transport has no Thrift server yet: addresses of logins unknown";
          }
          wrap(thrift, "inputTransportFactory_");
          wrap(thrift, "outputTransportFactory_");
          return "binary transport: logins know their addresses";
        } catch (ReflectiveOperationException | RuntimeException e) {
          return "the binary transport cannot tell logins' addresses: " + e;
        }
      }
    }
    return "HTTP transport: logins know their addresses";
  }

  private static void wrap(TServer thrift, String name) throws ReflectiveOperationException {
    Field field = TServer.class.getDeclaredField(name);
    field.setAccessible(true);
    TTransportFactory factory = (TTransportFactory) field.get(thrift);
    if (factory != null && !(factory instanceof Remembering)) {
      field.set(thrift, new Remembering(factory));
    }
  }

  /** A transport factory that makes the thread know the connection's address while it opens it. */
  private static final class Remembering extends TTransportFactory {
    private final TTransportFactory inner;

    Remembering(TTransportFactory inner) {
      this.inner = inner;
    }

    @Override
    public TTransport getTransport(TTransport base) throws TTransportException {
      String before = HANDSHAKE.get();
      HANDSHAKE.set(address(base));
      try {
        return inner.getTransport(base);
      } finally {
        if (before == null) {
          HANDSHAKE.remove();
        } else {
          HANDSHAKE.set(before);
        }
      }
    }

    private static String address(TTransport base) {
      if (base instanceof TSocket socket) {
        Socket s = socket.getSocket();
        return s == null ? null : host(s.getRemoteSocketAddress());
      }
      return null;
    }
  }
}
