package telemetry.sink.forwarder;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * The broker's labels added to a client's OTLP {@code MetricsData}, without an OTLP library.
 *
 * <p>Protobuf merges a message field that appears twice, and appends to a repeated field: so a
 * second {@code resource} (field 1 of {@code ResourceMetrics}) that holds only attributes (field 1 of
 * {@code Resource}), written after the client's own, adds those attributes after the client's. The
 * sink reads the last value of a repeated key, so the broker's labels win over anything the client
 * wrote under the same names. Every {@code ResourceMetrics} gets the client's identity (the sink reads
 * it per {@code ResourceMetrics}); the broker's context goes on the first alone.
 *
 * <p>A Java client's push holds one {@code ResourceMetrics} per metric, all with one resource: the
 * consecutive ones that share a resource are merged into one (their scope metrics in order), which an
 * OTLP reader takes as the same data, so the labels are written once a push, not once a metric, and
 * the forwarded body is a quarter of the size. Only two levels are walked ({@code MetricsData} and
 * each {@code ResourceMetrics}: each field's tag and length), so the work is linear in the payload's
 * size and nothing below is parsed; a payload not well formed at those levels is refused.
 */
final class OtlpLabels {

  private static final int LENGTH_DELIMITED = 2;

  private final ByteArrayOutputStream attributes = new ByteArrayOutputStream();

  /** Adds a string attribute (an OTLP {@code KeyValue} with a {@code string_value}). */
  OtlpLabels add(String key, String value) {
    if (value != null) {
      byte[] text = value.getBytes(StandardCharsets.UTF_8);
      ByteArrayOutputStream any = new ByteArrayOutputStream();
      writeField(any, 1, text); // AnyValue.string_value
      keyValue(key, any.toByteArray());
    }
    return this;
  }

  /** Adds an integer attribute (an OTLP {@code KeyValue} with an {@code int_value}). */
  OtlpLabels add(String key, long value) {
    ByteArrayOutputStream any = new ByteArrayOutputStream();
    writeVarint(any, (3L << 3)); // AnyValue.int_value, varint
    writeVarint(any, value);
    keyValue(key, any.toByteArray());
    return this;
  }

  /** Adds a boolean attribute (an OTLP {@code KeyValue} with a {@code bool_value}). */
  OtlpLabels add(String key, boolean value) {
    ByteArrayOutputStream any = new ByteArrayOutputStream();
    writeVarint(any, (2L << 3)); // AnyValue.bool_value, varint
    writeVarint(any, value ? 1 : 0);
    keyValue(key, any.toByteArray());
    return this;
  }

  private void keyValue(String key, byte[] anyValue) {
    ByteArrayOutputStream pair = new ByteArrayOutputStream();
    writeField(pair, 1, key.getBytes(StandardCharsets.UTF_8)); // KeyValue.key
    writeField(pair, 2, anyValue); // KeyValue.value
    writeField(attributes, 1, pair.toByteArray()); // Resource.attributes
  }

  /** The bytes appended to each {@code ResourceMetrics}: a {@code resource} field of the attributes. */
  byte[] resourceField() {
    ByteArrayOutputStream field = new ByteArrayOutputStream();
    writeField(field, 1, attributes.toByteArray()); // ResourceMetrics.resource
    return field.toByteArray();
  }

  /**
   * {@code metricsData} labelled, as a push accepted at {@code acceptedAtMs}: each run of consecutive
   * {@code ResourceMetrics} that share a resource and schema (a Java client sends one per metric, all
   * with the same resource) becomes one, its scope metrics in order, so the labels go once per run;
   * the first gets {@code first} appended and each other {@code rest}. A {@code ResourceMetrics} with a
   * field beyond those three is kept whole, alone. IllegalArgumentException when the top level of
   * {@code metricsData}, or of one of its {@code ResourceMetrics}, is not well formed.
   */
  static ForwardedPush label(byte[] metricsData, byte[] first, byte[] rest, long acceptedAtMs) {
    ByteArrayOutputStream out = new ByteArrayOutputStream(metricsData.length / 2 + first.length + 16);
    Run run = null;
    int resourceMetrics = 0;
    int[] at = {0};
    while (at[0] < metricsData.length) {
      int[] field = field(metricsData, at, "MetricsData");
      if (field[0] != 1) { // an unknown field, kept as it came
        writeField(out, field[0], metricsData, field[1], field[2]);
        continue;
      }
      Run next = Run.of(metricsData, field[1], field[2]);
      if (run != null && run.sameResource(next)) {
        run.scopes.addAll(next.scopes);
        continue;
      }
      if (run != null) {
        run.writeTo(out, resourceMetrics++ == 0 ? first : rest);
      }
      run = next;
    }
    if (run != null) {
      run.writeTo(out, resourceMetrics++ == 0 ? first : rest);
    }
    return new ForwardedPush(out.toByteArray(), resourceMetrics, acceptedAtMs);
  }

  /**
   * One field of a message at {@code at} (moved past it): its number, start and end; only
   * length-delimited fields are taken, as every field of {@code MetricsData} and {@code
   * ResourceMetrics} is one.
   */
  private static int[] field(byte[] data, int[] at, String message) {
    long tag = readVarint(data, at);
    int fieldNumber = (int) (tag >>> 3);
    int wireType = (int) (tag & 7);
    if (wireType != LENGTH_DELIMITED) {
      throw new IllegalArgumentException(message + " field " + fieldNumber + " has wire type " + wireType);
    }
    long length = readVarint(data, at);
    if (length < 0 || length > data.length - at[0]) {
      throw new IllegalArgumentException(message + " field " + fieldNumber + " overruns the payload");
    }
    int start = at[0];
    at[0] += (int) length;
    return new int[] {fieldNumber, start, at[0]};
  }

  /**
   * A run of {@code ResourceMetrics} being merged: the resource and schema URL of its first (each a
   * range of the payload; empty when absent) and the ranges of every scope metrics of the run; or a
   * {@code ResourceMetrics} with other fields, which is never merged ({@code whole}).
   */
  private static final class Run {
    private final byte[] data;
    private final int[] resource;
    private final int[] schemaUrl;
    private final List<int[]> scopes = new ArrayList<>();
    private final int[] whole;

    private Run(byte[] data, int[] resource, int[] schemaUrl, int[] whole) {
      this.data = data;
      this.resource = resource;
      this.schemaUrl = schemaUrl;
      this.whole = whole;
    }

    static Run of(byte[] data, int start, int end) {
      int[] resource = null;
      int[] schemaUrl = null;
      List<int[]> scopes = new ArrayList<>();
      int[] at = {start};
      while (at[0] < end) {
        int tagAt = at[0];
        long tag = readVarint(data, at);
        if ((tag & 7) != LENGTH_DELIMITED) { // a field OTLP does not define here: kept as it came
          return new Run(data, null, null, new int[] {1, start, end});
        }
        at[0] = tagAt;
        int[] field = field(data, at, "ResourceMetrics");
        if (at[0] > end) {
          throw new IllegalArgumentException("ResourceMetrics field " + field[0] + " overruns it");
        }
        if (field[0] == 1 && resource == null) {
          resource = field;
        } else if (field[0] == 2) {
          scopes.add(field);
        } else if (field[0] == 3 && schemaUrl == null) {
          schemaUrl = field;
        } else { // a field this does not merge: the ResourceMetrics goes as it came
          return new Run(data, null, null, new int[] {1, start, end});
        }
      }
      Run run = new Run(data, resource, schemaUrl, null);
      run.scopes.addAll(scopes);
      return run;
    }

    boolean sameResource(Run other) {
      return whole == null && other.whole == null && same(resource, other.resource)
          && same(schemaUrl, other.schemaUrl);
    }

    private boolean same(int[] a, int[] b) {
      if (a == null || b == null) {
        return a == b;
      }
      return Arrays.equals(data, a[1], a[2], data, b[1], b[2]);
    }

    void writeTo(ByteArrayOutputStream out, byte[] labels) {
      if (whole != null) {
        writeVarint(out, (1L << 3) | LENGTH_DELIMITED);
        writeVarint(out, whole[2] - whole[1] + labels.length);
        out.write(data, whole[1], whole[2] - whole[1]);
        out.write(labels, 0, labels.length);
        return;
      }
      long length = labels.length;
      for (int[] part : parts()) {
        length += fieldLength(part[0], part[2] - part[1]);
      }
      writeVarint(out, (1L << 3) | LENGTH_DELIMITED);
      writeVarint(out, length);
      if (resource != null) {
        writeField(out, 1, data, resource[1], resource[2]);
      }
      out.write(labels, 0, labels.length);
      for (int[] scope : scopes) {
        writeField(out, 2, data, scope[1], scope[2]);
      }
      if (schemaUrl != null) {
        writeField(out, 3, data, schemaUrl[1], schemaUrl[2]);
      }
    }

    private List<int[]> parts() {
      List<int[]> parts = new ArrayList<>(scopes);
      if (resource != null) {
        parts.add(resource);
      }
      if (schemaUrl != null) {
        parts.add(schemaUrl);
      }
      return parts;
    }
  }

  /** The bytes of a length-delimited field {@code number} of {@code length} bytes: tag, length, value. */
  private static long fieldLength(int number, int length) {
    return varintLength(((long) number << 3) | LENGTH_DELIMITED) + varintLength(length) + length;
  }

  private static int varintLength(long value) {
    int bytes = 1;
    while ((value & ~0x7FL) != 0) {
      value >>>= 7;
      bytes++;
    }
    return bytes;
  }

  private static void writeField(ByteArrayOutputStream out, int number, byte[] data, int start, int end) {
    writeVarint(out, ((long) number << 3) | LENGTH_DELIMITED);
    writeVarint(out, end - start);
    out.write(data, start, end - start);
  }

  private static void writeField(ByteArrayOutputStream out, int number, byte[] value) {
    writeVarint(out, ((long) number << 3) | LENGTH_DELIMITED);
    writeVarint(out, value.length);
    out.write(value, 0, value.length);
  }

  private static void writeVarint(ByteArrayOutputStream out, long value) {
    while ((value & ~0x7FL) != 0) {
      out.write((int) ((value & 0x7F) | 0x80));
      value >>>= 7;
    }
    out.write((int) value);
  }

  private static long readVarint(byte[] data, int[] at) {
    long value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at[0] >= data.length) {
        throw new IllegalArgumentException("MetricsData ends inside a varint");
      }
      byte b = data[at[0]++];
      value |= (long) (b & 0x7F) << shift;
      if ((b & 0x80) == 0) {
        return value;
      }
    }
    throw new IllegalArgumentException("MetricsData has a varint over 10 bytes");
  }
}
