package telemetry.sink;

import io.opentelemetry.proto.common.v1.AnyValue;
import io.opentelemetry.proto.common.v1.KeyValue;
import io.opentelemetry.proto.metrics.v1.AggregationTemporality;
import io.opentelemetry.proto.metrics.v1.ExponentialHistogramDataPoint;
import io.opentelemetry.proto.metrics.v1.HistogramDataPoint;
import io.opentelemetry.proto.metrics.v1.Metric;
import io.opentelemetry.proto.metrics.v1.MetricsData;
import io.opentelemetry.proto.metrics.v1.NumberDataPoint;
import io.opentelemetry.proto.metrics.v1.ResourceMetrics;
import io.opentelemetry.proto.metrics.v1.ScopeMetrics;
import io.opentelemetry.proto.metrics.v1.SummaryDataPoint;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;

/**
 * The JVM side of the decode job (spark_jobs.transforms.decode documents the mapping): an OTLP
 * MetricsData payload to the point columns of its silver rows, or null when the Python decoder must
 * decide the push.
 *
 * <p>This decoder answers only for pushes it is sure of, and then gives exactly the Python decoder's
 * rows. Null ("ask Python") for a payload that does not parse, any point that breaks the data model or
 * a bound (a zero time, a time past 2^63 ns, counts or flags out of range, histogram bounds and
 * buckets that disagree), a
 * payload big enough for the wire count, repeated text that could go over its bound, and attribute
 * values whose text form it does not reproduce (doubles, arrays, key-value lists). The Python decoder
 * then decodes the push or quarantines it with its reason, so reasons are never written twice.
 */
public final class OtlpDecoder {
  private static final long NANOS_PER_MICRO = 1000L;
  private static final long MICROS_PER_DAY = 86_400_000_000L;

  private OtlpDecoder() {}

  /** Thrown inside the decoder when the Python decoder must decide the push. */
  private static final class AskPython extends Exception {
    private static final long serialVersionUID = 1L;

    AskPython() {
      super(null, null, false, false);
    }
  }

  private static final AskPython ASK_PYTHON = new AskPython();

  /**
   * The push's rows, or null when the Python decoder must decide: a struct of its resources'
   * attributes, its metric headers, its attribute sets (with their keys) and its points, each point
   * with the numbers of its resource, header and attribute set, so that what points share is made
   * once per push. {@code rows} false checks only, and answers an empty struct when it would give
   * rows.
   */
  public static Row decode(
      byte[] payload, long textBytes, long maxRepeatedBytes, long wireCountFrom, boolean rows) {
    if (payload == null || payload.length > wireCountFrom) {
      return null;
    }
    try {
      return new Push(textBytes, payload.length, maxRepeatedBytes, rows).decode(MetricsData.parseFrom(payload));
    } catch (AskPython | RuntimeException | java.io.IOException | StackOverflowError e) {
      return null;
    }
  }

  private static final class Push {
    private final long textBytes;
    private final long payloadBytes;
    private final long maxRepeatedBytes;
    private final boolean rows;
    private final List<Map<String, String>> resources = new ArrayList<>();
    private final List<Row> headers = new ArrayList<>();
    private final List<Row> attributeSets = new ArrayList<>();
    private final Map<List<KeyValue>, Integer> attributeSetNumbers = new HashMap<>();
    private final List<Row> points = new ArrayList<>();
    private long lastDay = Long.MIN_VALUE;
    private String lastDate;

    Push(long textBytes, long payloadBytes, long maxRepeatedBytes, boolean rows) {
      this.textBytes = textBytes;
      this.payloadBytes = payloadBytes;
      this.maxRepeatedBytes = maxRepeatedBytes;
      this.rows = rows;
    }

    Row decode(MetricsData data) throws AskPython {
      long count = 0;
      for (ResourceMetrics resourceMetrics : data.getResourceMetricsList()) {
        for (ScopeMetrics scopeMetrics : resourceMetrics.getScopeMetricsList()) {
          for (Metric metric : scopeMetrics.getMetricsList()) {
            count += pointCount(metric);
          }
        }
      }
      // the Python decoder counts the text repeated into the rows only past this: let it decide then
      if (count > 0 && (textBytes + payloadBytes) > maxRepeatedBytes / count) {
        throw ASK_PYTHON;
      }
      for (ResourceMetrics resourceMetrics : data.getResourceMetricsList()) {
        int resource = resources.size();
        resources.add(attributes(resourceMetrics.getResource().getAttributesList()));
        for (ScopeMetrics scopeMetrics : resourceMetrics.getScopeMetricsList()) {
          String scopeName = scopeMetrics.getScope().getName();
          String scopeVersion = scopeMetrics.getScope().getVersion();
          for (Metric metric : scopeMetrics.getMetricsList()) {
            if (pointCount(metric) == 0) {
              continue;
            }
            Header header = new Header(resource, headers.size());
            headers.add(Header.row(scopeName, scopeVersion, metric));
            switch (metric.getDataCase()) {
              case GAUGE:
                numbers(header, metric.getGauge().getDataPointsList());
                break;
              case SUM:
                numbers(header, metric.getSum().getDataPointsList());
                break;
              case HISTOGRAM:
                for (HistogramDataPoint p : metric.getHistogram().getDataPointsList()) {
                  histogram(header, p);
                }
                break;
              case EXPONENTIAL_HISTOGRAM:
                for (ExponentialHistogramDataPoint p : metric.getExponentialHistogram().getDataPointsList()) {
                  exponentialHistogram(header, p);
                }
                break;
              case SUMMARY:
                for (SummaryDataPoint p : metric.getSummary().getDataPointsList()) {
                  summary(header, p);
                }
                break;
              default:
                break;
            }
          }
        }
      }
      return RowFactory.create(resources, headers, attributeSets, points);
    }

    private static long pointCount(Metric metric) {
      switch (metric.getDataCase()) {
        case GAUGE:
          return metric.getGauge().getDataPointsCount();
        case SUM:
          return metric.getSum().getDataPointsCount();
        case HISTOGRAM:
          return metric.getHistogram().getDataPointsCount();
        case EXPONENTIAL_HISTOGRAM:
          return metric.getExponentialHistogram().getDataPointsCount();
        case SUMMARY:
          return metric.getSummary().getDataPointsCount();
        default:
          return 0;
      }
    }

    private void numbers(Header header, List<NumberDataPoint> points) throws AskPython {
      for (NumberDataPoint p : points) {
        Double value;
        switch (p.getValueCase()) {
          case AS_DOUBLE:
            value = p.getAsDouble();
            break;
          case AS_INT:
            value = (double) p.getAsInt();
            break;
          default:
            value = null;
        }
        add(header, p.getAttributesList(), p.getTimeUnixNano(), p.getStartTimeUnixNano(), p.getFlags(),
            value, null, null, null, null, null, null, null, null, null, null, null, null, null, null);
      }
    }

    private void histogram(Header header, HistogramDataPoint p) throws AskPython {
      List<Double> bounds = p.getExplicitBoundsList();
      List<Long> buckets = p.getBucketCountsList();
      if (!buckets.isEmpty() && buckets.size() != bounds.size() + 1) {
        throw ASK_PYTHON;
      }
      add(header, p.getAttributesList(), p.getTimeUnixNano(), p.getStartTimeUnixNano(), p.getFlags(),
          null, count(p.getCount()), p.hasSum() ? p.getSum() : null, p.hasMin() ? p.getMin() : null,
          p.hasMax() ? p.getMax() : null, bounds, counts(buckets), null, null, null, null, null, null, null,
          null);
    }

    private void exponentialHistogram(Header header, ExponentialHistogramDataPoint p) throws AskPython {
      add(header, p.getAttributesList(), p.getTimeUnixNano(), p.getStartTimeUnixNano(), p.getFlags(),
          null, count(p.getCount()), p.hasSum() ? p.getSum() : null, p.hasMin() ? p.getMin() : null,
          p.hasMax() ? p.getMax() : null, null, null, p.getScale(), count(p.getZeroCount()),
          p.getZeroThreshold(), p.getPositive().getOffset(), counts(p.getPositive().getBucketCountsList()),
          p.getNegative().getOffset(), counts(p.getNegative().getBucketCountsList()), null);
    }

    private void summary(Header header, SummaryDataPoint p) throws AskPython {
      List<Row> quantiles = new ArrayList<>(p.getQuantileValuesCount());
      for (SummaryDataPoint.ValueAtQuantile q : p.getQuantileValuesList()) {
        quantiles.add(RowFactory.create(q.getQuantile(), q.getValue()));
      }
      add(header, p.getAttributesList(), p.getTimeUnixNano(), p.getStartTimeUnixNano(), p.getFlags(),
          null, count(p.getCount()), p.getSum(), null, null, null, null, null, null, null, null, null, null,
          null, quantiles);
    }

    /** A uint64 count as a bigint; over Long.MAX_VALUE (negative here) is for Python to refuse. */
    private static Long count(long value) throws AskPython {
      if (value < 0) {
        throw ASK_PYTHON;
      }
      return value;
    }

    private static List<Long> counts(List<Long> values) throws AskPython {
      for (long value : values) {
        count(value);
      }
      return values;
    }

    private void add(
        Header header,
        List<KeyValue> attributes,
        long timeNanos,
        long startNanos,
        int flags,
        Double value,
        Long count,
        Double sum,
        Double min,
        Double max,
        List<Double> explicitBounds,
        List<Long> bucketCounts,
        Integer scale,
        Long zeroCount,
        Double zeroThreshold,
        Integer positiveOffset,
        List<Long> positiveBucketCounts,
        Integer negativeOffset,
        List<Long> negativeBucketCounts,
        List<Row> quantiles)
        throws AskPython {
      if (timeNanos <= 0 || startNanos < 0 || flags < 0) {
        throw ASK_PYTHON; // a zero time, times past 2^63 ns (2262), flags over INT32_MAX
      }
      Integer attributeSet = attributeSetNumbers.get(attributes);
      if (attributeSet == null) {
        Map<String, String> converted = attributes(attributes);
        attributeSet = attributeSets.size();
        attributeSets.add(RowFactory.create(converted, CanonicalJson.of(converted)));
        attributeSetNumbers.put(attributes, attributeSet);
      }
      if (!rows) {
        return;
      }
      long time = timeNanos / NANOS_PER_MICRO;
      long day = time / MICROS_PER_DAY;
      if (day != lastDay) {
        lastDay = day;
        lastDate = LocalDate.ofEpochDay(day).toString();
      }
      points.add(
          RowFactory.create(
              header.resource,
              header.number,
              attributeSet,
              startNanos == 0 ? null : startNanos / NANOS_PER_MICRO,
              time,
              lastDate,
              value,
              count,
              sum,
              min,
              max,
              explicitBounds,
              bucketCounts,
              scale,
              zeroCount,
              zeroThreshold,
              positiveOffset,
              positiveBucketCounts,
              negativeOffset,
              negativeBucketCounts,
              quantiles,
              flags));
    }
  }

  /** The numbers of a point's resource and metric header in its push. */
  private static final class Header {
    final int resource;
    final int number;

    Header(int resource, int number) {
      this.resource = resource;
      this.number = number;
    }

    /** What a point has from its scope and metric. */
    static Row row(String scopeName, String scopeVersion, Metric metric) {
      String kind;
      String temporality;
      Boolean monotonic = null;
      switch (metric.getDataCase()) {
        case SUM:
          kind = "sum";
          temporality = temporality(metric.getSum().getAggregationTemporalityValue());
          monotonic = metric.getSum().getIsMonotonic();
          break;
        case HISTOGRAM:
          kind = "histogram";
          temporality = temporality(metric.getHistogram().getAggregationTemporalityValue());
          break;
        case EXPONENTIAL_HISTOGRAM:
          kind = "exponential_histogram";
          temporality = temporality(metric.getExponentialHistogram().getAggregationTemporalityValue());
          break;
        case GAUGE:
          kind = "gauge";
          temporality = null;
          break;
        case SUMMARY:
          kind = "summary";
          temporality = null;
          break;
        default:
          kind = null;
          temporality = null;
      }
      return RowFactory.create(
          scopeName,
          scopeVersion,
          metric.getName(),
          metric.getUnit(),
          metric.getDescription(),
          kind,
          temporality,
          monotonic);
    }

    private static String temporality(int value) {
      if (value == AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA_VALUE) {
        return "delta";
      }
      if (value == AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE_VALUE) {
        return "cumulative";
      }
      return null;
    }
  }

  /** Key-values as the Python decoder writes them: in order, a repeated key's last value in the
   *  place of its first. */
  private static Map<String, String> attributes(List<KeyValue> keyValues) throws AskPython {
    Map<String, String> out = new LinkedHashMap<>(keyValues.size() * 2);
    for (KeyValue keyValue : keyValues) {
      out.put(keyValue.getKey(), valueString(keyValue.getValue()));
    }
    return out;
  }

  private static String valueString(AnyValue value) throws AskPython {
    switch (value.getValueCase()) {
      case STRING_VALUE:
        return value.getStringValue();
      case VALUE_NOT_SET:
        return "";
      case BOOL_VALUE:
        return value.getBoolValue() ? "true" : "false";
      case INT_VALUE:
        return Long.toString(value.getIntValue());
      case BYTES_VALUE:
        return Base64.getEncoder().encodeToString(value.getBytesValue().toByteArray());
      default:
        throw ASK_PYTHON; // doubles (Python's repr), arrays and key-value lists (its JSON)
    }
  }
}
