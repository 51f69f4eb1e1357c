package telemetry.sink.forwarder;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;

/**
 * The broker's labels added to a client's OTLP {@code MetricsData}, without an OTLP library.
 *
 * <p>Protobuf merges a message field that appears twice, and appends to a repeated field: so appending
 * a second {@code resource} (field 1 of {@code ResourceMetrics}) that holds only attributes (field 1
 * of {@code Resource}) to each {@code ResourceMetrics} (field 1 of {@code MetricsData}) adds those
 * attributes after the client's own. Every {@code ResourceMetrics} gets the client's identity (the sink
 * reads it per {@code ResourceMetrics}); the broker's context goes on the first alone, as a Java
 * client's push holds one {@code ResourceMetrics} per metric. The sink reads the last value of a repeated key, so the broker's
 * labels win over anything the client wrote under the same names. Only the top level of the payload
 * is walked (each field's tag and length), so the work is linear in its size and nothing the client
 * sent is parsed further; a payload whose top level is not well formed is refused.
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
   * {@code metricsData} with {@code first} appended to its first {@code ResourceMetrics} and {@code
   * rest} to each of the others, as a push accepted at {@code acceptedAtMs}; IllegalArgumentException
   * when its top level is not a well-formed {@code MetricsData}.
   */
  static ForwardedPush label(byte[] metricsData, byte[] first, byte[] rest, long acceptedAtMs) {
    int resourceMetrics = 0;
    ByteArrayOutputStream out = new ByteArrayOutputStream(metricsData.length + 4 * first.length + 16);
    int[] at = {0};
    while (at[0] < metricsData.length) {
      long tag = readVarint(metricsData, at);
      int fieldNumber = (int) (tag >>> 3);
      int wireType = (int) (tag & 7);
      if (wireType != LENGTH_DELIMITED) {
        throw new IllegalArgumentException("MetricsData field " + fieldNumber + " has wire type " + wireType);
      }
      long length = readVarint(metricsData, at);
      if (length < 0 || length > metricsData.length - at[0]) {
        throw new IllegalArgumentException("MetricsData field " + fieldNumber + " overruns the payload");
      }
      int start = at[0];
      at[0] += (int) length;
      if (fieldNumber == 1) { // resource_metrics
        byte[] resourceField = resourceMetrics++ == 0 ? first : rest;
        writeVarint(out, tag);
        writeVarint(out, length + resourceField.length);
        out.write(metricsData, start, (int) length);
        out.write(resourceField, 0, resourceField.length);
      } else { // an unknown field, kept as it came
        writeVarint(out, tag);
        writeVarint(out, length);
        out.write(metricsData, start, (int) length);
      }
    }
    return new ForwardedPush(out.toByteArray(), resourceMetrics, acceptedAtMs);
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
