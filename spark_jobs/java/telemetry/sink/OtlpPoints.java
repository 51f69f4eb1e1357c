package telemetry.sink;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.api.java.UDF4;

/**
 * SQL function {@code telemetry_otlp_points(payload, text_bytes, max_repeated_bytes, wire_count_from)}:
 * a push's silver rows as its resources, metric headers, attribute sets and points (which number
 * them), or null when the Python decoder must decide the push ({@link OtlpDecoder}).
 */
public final class OtlpPoints implements UDF4<byte[], Long, Long, Long, Row> {
  private static final long serialVersionUID = 1L;

  @Override
  public Row call(byte[] payload, Long textBytes, Long maxRepeatedBytes, Long wireCountFrom) {
    return OtlpDecoder.decode(payload, textBytes, maxRepeatedBytes, wireCountFrom, true);
  }
}
