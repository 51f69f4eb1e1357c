package telemetry.sink;

import java.lang.reflect.Constructor;
import javax.security.sasl.AuthenticationException;
import org.apache.hive.service.auth.PasswdAuthenticationProvider;

/**
 * The Thrift server's {@code CUSTOM} authentication for {@code telemetry-sink sql-server --ldap-url}:
 * Hive's own LDAP check ({@code LdapAuthenticationProviderImpl}, a bind as {@code uid=<user>,<base
 * DN>} with the client's password, configured by the {@code hive.server2.authentication.ldap.*}
 * system properties), run through {@link LoginGate} like a password file's: a bounded number of
 * binds at once, failures answered late, every failure audited.
 */
public final class LdapAuthenticator implements PasswdAuthenticationProvider {

  private static volatile PasswdAuthenticationProvider hive;

  @Override
  public void Authenticate(String user, String password) throws AuthenticationException {
    LoginGate.login(
        "LDAP",
        user,
        () -> {
          hive().Authenticate(user, password);
          return null;
        });
  }

  /** Hive's LDAP check (its constructor is package-private), made once: its settings do not change. */
  private static PasswdAuthenticationProvider hive() throws AuthenticationException {
    PasswdAuthenticationProvider provider = hive;
    if (provider == null) {
      try {
        Constructor<?> constructor =
            Class.forName("org.apache.hive.service.auth.LdapAuthenticationProviderImpl")
                .getDeclaredConstructor();
        constructor.setAccessible(true);
        provider = (PasswdAuthenticationProvider) constructor.newInstance();
      } catch (ReflectiveOperationException | RuntimeException e) {
        throw new AuthenticationException("Hive's LDAP authentication is not available", e);
      }
      hive = provider;
    }
    return provider;
  }
}
