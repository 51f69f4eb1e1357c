package telemetry.sink;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
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
 * login, so a changed Secret takes effect without a restart. Every failure says the same thing.
 */
public final class PasswordFileAuthenticator implements PasswdAuthenticationProvider {

  public static final String FILE_PROPERTY = "telemetry.sink.sqlserver.password.file";
  private static final String SCHEME = "pbkdf2_sha256";

  @Override
  public void Authenticate(String user, String password) throws AuthenticationException {
    if (user == null || password == null || !verify(user, password)) {
      throw new AuthenticationException("wrong user name or password");
    }
  }

  static boolean verify(String user, String password) throws AuthenticationException {
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
    for (String line : lines) {
      int colon = line.indexOf(':');
      if (colon > 0 && line.substring(0, colon).equals(user)) {
        return matches(line.substring(colon + 1).strip(), password);
      }
    }
    return false;
  }

  private static boolean matches(String encoded, String password) {
    String[] parts = encoded.split("\\$");
    if (parts.length != 4 || !parts[0].equals(SCHEME)) {
      return false;
    }
    try {
      int iterations = Integer.parseInt(parts[1]);
      byte[] salt = parts[2].getBytes(StandardCharsets.UTF_8);
      byte[] expected = Base64.getDecoder().decode(parts[3]);
      PBEKeySpec spec = new PBEKeySpec(password.toCharArray(), salt, iterations, expected.length * 8);
      byte[] actual =
          SecretKeyFactory.getInstance("PBKDF2WithHmacSHA256").generateSecret(spec).getEncoded();
      return MessageDigest.isEqual(expected, actual);
    } catch (IllegalArgumentException | GeneralSecurityException e) {
      return false;
    }
  }
}
