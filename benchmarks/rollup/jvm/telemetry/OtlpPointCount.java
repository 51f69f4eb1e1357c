package telemetry;

import io.opentelemetry.proto.metrics.v1.*;
import org.apache.spark.sql.api.java.UDF1;

/** Prototype: parse and visit every point (the JVM decode ceiling; measurement only). */
public final class OtlpPointCount implements UDF1<byte[], Long> {
  @Override
  public Long call(byte[] payload) throws Exception {
    MetricsData data = MetricsData.parseFrom(payload);
    long n = 0; double sink = 0;
    for (ResourceMetrics rm : data.getResourceMetricsList())
      for (ScopeMetrics sm : rm.getScopeMetricsList())
        for (Metric m : sm.getMetricsList()) {
          java.util.List<NumberDataPoint> points = m.hasSum() ? m.getSum().getDataPointsList()
              : m.hasGauge() ? m.getGauge().getDataPointsList() : java.util.List.of();
          for (NumberDataPoint p : points) { n++; sink += p.getAsDouble() + p.getTimeUnixNano() + p.getAttributesCount(); }
        }
    return sink == -1 ? -1 : n;
  }
}
