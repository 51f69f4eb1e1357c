package telemetry.sink;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * The series key of a point's attributes as the Python decoder writes it: {@code json.dumps(attributes,
 * sort_keys=True, separators=(",", ":"))}, that is keys in code point order, and every character
 * outside printable ASCII escaped as Python's JSON encoder escapes it.
 */
final class CanonicalJson {
  private static final char[] HEX = "0123456789abcdef".toCharArray();

  private CanonicalJson() {}

  static String of(Map<String, String> attributes) {
    List<String> keys = new ArrayList<>(attributes.keySet());
    keys.sort(CanonicalJson::compareCodePoints);
    StringBuilder out = new StringBuilder(16 + attributes.size() * 24);
    out.append('{');
    for (String key : keys) {
      if (out.length() > 1) {
        out.append(',');
      }
      string(out, key);
      out.append(':');
      string(out, attributes.get(key));
    }
    return out.append('}').toString();
  }

  /** Python orders strings by code point; Java's compareTo by UTF-16 unit, which differs past U+D7FF. */
  private static int compareCodePoints(String a, String b) {
    int i = 0;
    int j = 0;
    while (i < a.length() && j < b.length()) {
      int x = a.codePointAt(i);
      int y = b.codePointAt(j);
      if (x != y) {
        return Integer.compare(x, y);
      }
      i += Character.charCount(x);
      j += Character.charCount(y);
    }
    return Integer.compare(a.length() - i, b.length() - j);
  }

  private static void string(StringBuilder out, String text) {
    out.append('"');
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      switch (c) {
        case '"':
          out.append("\\\"");
          break;
        case '\\':
          out.append("\\\\");
          break;
        case '\n':
          out.append("\\n");
          break;
        case '\r':
          out.append("\\r");
          break;
        case '\t':
          out.append("\\t");
          break;
        case '\b':
          out.append("\\b");
          break;
        case '\f':
          out.append("\\f");
          break;
        default:
          if (c >= ' ' && c <= '~') {
            out.append(c);
          } else { // UTF-16 units, so a character past U+FFFF is its surrogate pair, as in Python
            out.append("\\u").append(HEX[c >> 12]).append(HEX[(c >> 8) & 15]).append(HEX[(c >> 4) & 15])
                .append(HEX[c & 15]);
          }
      }
    }
    out.append('"');
  }
}
