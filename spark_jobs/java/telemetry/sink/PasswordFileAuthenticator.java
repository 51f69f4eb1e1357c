package telemetry.sink;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.SecureRandom;
import java.util.Base64;
import java.util.List;
import javax.crypto.SecretKeyFactory;
import javax.crypto.spec.PBEKeySpec;
import javax.security.sasl.AuthenticationException;
import org.apache.hive.service.auth.PasswdAuthenticationProvider;

/**
 * The Thrift server's {@code CUSTOM} authentication for {@code telemetry-sink sql-server
 * --password-file}: a user and password are accepted when the file (system property {@value
 * #FILE_PROPERTY}) has a line {@code user:pbkdf2_sha256$iterations$salt$hash} whose hash the
 * password gives (PBKDF2-HMAC-SHA256, the hash in standard base64). The file is read at every
 * login, so a changed Secret takes effect without a restart.
 *
 * <p>A failed login costs the same whether the user exists or not, so its time does not tell: a
 * user without a line (or with a line that does not parse) has the password checked against a
 * made-up hash with as many iterations as the file's costliest line ({@value #DEFAULT_ITERATIONS}
 * when it has none). Every login goes through {@link LoginGate}: a bounded number of checks at once,
 * failures answered late, every failure audited. Every failure says the same thing.
 */
public final class PasswordFileAuthenticator implements PasswdAuthenticationProvider {

  public static final String FILE_PROPERTY = "telemetry.sink.sqlserver.password.file";
  private static final String SCHEME = "pbkdf2_sha256";

  /** The iterations {@code telemetry-sink sql-server --hash-password} gives (OWASP's figure). */
  static final int DEFAULT_ITERATIONS = 600_000;

  /** The most iterations the made-up hash of a missing user takes. */
  static final int MAX_DUMMY_ITERATIONS = 10_000_000;

  private static final byte[] DUMMY_SALT = random(16);
  private static final byte[] DUMMY_HASH = random(32);

  @Override
  public void Authenticate(String user, String password) throws AuthenticationException {
    LoginGate.login("password file", user, () -> check(user, password));
  }

  /**
   * Null when the file accepts {@code user} with {@code password}, else why not (for the audit
   * trail). Runs PBKDF2 once either way: against the user's line, or a made-up one.
   */
  public static String check(String user, String password) throws AuthenticationException {
    String file = System.getProperty(FILE_PROPERTY);
    if (file == null) {
      throw new AuthenticationException("no password file is configured");
    }
    List<String> lines;
    try {
      lines = Files.readAllLines(Path.of(file), StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw new AuthenticationException("the password file cannot be read", e);
    }
    String line = null;
    int costliest = 0;
    for (String candidate : lines) {
      int colon = candidate.indexOf(':');
      if (colon <= 0) {
        continue;
      }
      Hash hash = Hash.parse(candidate.substring(colon + 1).strip());
      if (hash != null) {
        costliest = Math.max(costliest, hash.iterations);
      }
      if (line == null && user != null && candidate.substring(0, colon).equals(user)) {
        line = candidate.substring(colon + 1).strip();
      }
    }
    Hash hash = line == null ? null : Hash.parse(line);
    Hash checked = hash != null ? hash : dummy(costliest);
    boolean matches = checked.matches(password);
    if (line == null) {
      return "no such user";
    }
    if (hash == null) {
      return "the user's line in the password file does not parse";
    }
    return matches && password != null && !password.isEmpty() ? null : "wrong password";
  }

  private static Hash dummy(int costliest) {
    int iterations = costliest > 0 ? Math.min(costliest, MAX_DUMMY_ITERATIONS) : DEFAULT_ITERATIONS;
    return new Hash(iterations, DUMMY_SALT, DUMMY_HASH);
  }

  private static byte[] random(int size) {
    byte[] bytes = new byte[size];
    new SecureRandom().nextBytes(bytes);
    return bytes;
  }

  /** One line's hash: PBKDF2-HMAC-SHA256 of {@code iterations} with {@code salt}. */
  record Hash(int iterations, byte[] salt, byte[] expected) {

    /** The hash of {@code pbkdf2_sha256$iterations$salt$hash}, or null when it does not parse. */
    static Hash parse(String encoded) {
      String[] parts = encoded.split("\\$");
      if (parts.length != 4 || !parts[0].equals(SCHEME)) {
        return null;
      }
      try {
        int iterations = Integer.parseInt(parts[1]);
        byte[] expected = Base64.getDecoder().decode(parts[3]);
        if (iterations < 1 || expected.length == 0) {
          return null;
        }
        return new Hash(iterations, parts[2].getBytes(StandardCharsets.UTF_8), expected);
      } catch (IllegalArgumentException e) {
        return null;
      }
    }

    /** Whether {@code password} gives this hash (an empty or missing one is checked, and fails). */
    boolean matches(String password) {
      char[] chars = password == null || password.isEmpty() ? new char[] {'\0'} : password.toCharArray();
      try {
        PBEKeySpec spec = new PBEKeySpec(chars, salt, iterations, expected.length * 8);
        byte[] actual =
            SecretKeyFactory.getInstance("PBKDF2WithHmacSHA256").generateSecret(spec).getEncoded();
        return MessageDigest.isEqual(expected, actual);
      } catch (IllegalArgumentException | GeneralSecurityException e) {
        return false;
      }
    }
  }
}
