package telemetry;

import io.opentelemetry.proto.common.v1.KeyValue;
import io.opentelemetry.proto.metrics.v1.*;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF1;

/** Prototype: an OTLP MetricsData payload -> its number points as rows (measurement only). */
public final class OtlpPoints implements UDF1<byte[], List<Row>> {
  private static Map<String, String> attributes(List<KeyValue> kvs) {
    Map<String, String> out = new HashMap<>(kvs.size() * 2);
    for (KeyValue kv : kvs) {
      out.put(kv.getKey(), kv.getValue().getStringValue());
    }
    return out;
  }

  @Override
  public List<Row> call(byte[] payload) throws Exception {
    MetricsData data = MetricsData.parseFrom(payload);
    List<Row> rows = new ArrayList<>();
    for (ResourceMetrics rm : data.getResourceMetricsList()) {
      for (ScopeMetrics sm : rm.getScopeMetricsList()) {
        for (Metric m : sm.getMetricsList()) {
          List<NumberDataPoint> points;
          String kind;
          if (m.hasSum()) { points = m.getSum().getDataPointsList(); kind = "sum"; }
          else if (m.hasGauge()) { points = m.getGauge().getDataPointsList(); kind = "gauge"; }
          else continue;
          for (NumberDataPoint p : points) {
            double value = p.hasAsDouble() ? p.getAsDouble() : (double) p.getAsInt();
            rows.add(RowFactory.create(m.getName(), kind, p.getTimeUnixNano(), p.getStartTimeUnixNano(),
                value, attributes(p.getAttributesList())));
          }
        }
      }
    }
    return rows;
  }
}
