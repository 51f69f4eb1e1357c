package telemetry.sink;

import org.apache.spark.sql.api.java.UDF4;

/**
 * SQL function {@code telemetry_otlp_decodable(payload, text_bytes, max_repeated_bytes,
 * wire_count_from)}: whether {@link OtlpPoints} answers for the push, checked without making its rows.
 */
public final class OtlpDecodable implements UDF4<byte[], Long, Long, Long, Boolean> {
  private static final long serialVersionUID = 1L;

  @Override
  public Boolean call(byte[] payload, Long textBytes, Long maxRepeatedBytes, Long wireCountFrom) {
    return OtlpDecoder.decode(payload, textBytes, maxRepeatedBytes, wireCountFrom, false) != null;
  }
}
