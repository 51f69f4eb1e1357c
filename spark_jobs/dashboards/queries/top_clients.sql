-- For every Kafka client metric, the dashboard_top client instances with the highest value over the
-- window: gauges by their average, sums by their increase, histograms and summaries by their average
-- (sum / count). A client's series (e.g. one per broker, `node.id`) count together. `peak` is the
-- largest value seen (gauges, and histograms that send a max).
WITH per_client AS (
  SELECT metric_name, metric_kind,
         MAX_BY(metric_unit, last_time) AS metric_unit,
         client_instance_id,
         MAX_BY(client_id, last_time) AS client_id,
         MAX_BY(principal, last_time) AS principal,
         MAX_BY(quota_entity, last_time) AS quota_entity,
         CASE WHEN metric_kind = 'gauge' THEN SUM(value_sum) / SUM(value_count)
              WHEN metric_kind = 'sum' THEN SUM(value_sum)
              ELSE SUM(sum) / SUM(count) END AS value,
         CASE WHEN metric_kind = 'sum' THEN 'increase' ELSE 'average' END AS measure,
         COALESCE(MAX(value_max), MAX(max)) AS peak,
         SUM(points) AS points
  FROM telemetry.rollup_client_1m
  WHERE bucket_hour BETWEEN date_format(dashboard_from, "yyyy-MM-dd'T'HH")
                        AND date_format(dashboard_to, "yyyy-MM-dd'T'HH")
    AND bucket_start >= dashboard_from AND bucket_start < dashboard_to
  GROUP BY metric_name, metric_kind, client_instance_id
),
ranked AS (
  SELECT *, ROW_NUMBER() OVER (
           PARTITION BY metric_name, metric_kind ORDER BY value DESC NULLS LAST, client_instance_id) AS rank
  FROM per_client
)
SELECT metric_name, metric_kind, metric_unit, measure, rank, client_instance_id, client_id, principal,
       quota_entity, value, peak, points
FROM ranked
WHERE rank <= dashboard_top
ORDER BY metric_name, metric_kind, rank
