-- For every Kafka client metric, the dashboard_top client instances with the highest value over the
-- window: gauges by their average, sums by their increase, histograms and summaries by their average
-- (sum / count). A client's series (e.g. one per broker, `node.id`) count together. `peak` is the
-- largest value seen (gauges, and histograms that send a max). A metric with no number over the
-- window (no samples: a zero count, NaN gauges) has a null value and ranks last. The client id,
-- principal and quota entity are the ones of the client's latest row. (Only numbers are aggregated
-- over the window's rows, which keeps Spark on hash aggregation; the names are looked up for the
-- ranked clients alone.)
WITH per_client AS (
  SELECT metric_name, metric_kind, metric_unit, client_instance_id,
         CASE WHEN metric_kind = 'gauge' THEN try_divide(SUM(value_sum), SUM(value_count))
              WHEN metric_kind = 'sum' THEN SUM(value_sum)
              ELSE try_divide(SUM(sum), SUM(count)) END AS value,
         CASE WHEN metric_kind = 'sum' THEN 'increase' ELSE 'average' END AS measure,
         COALESCE(MAX(value_max), MAX(max)) AS peak,
         SUM(points) AS points
  FROM dashboard_client_rows
  GROUP BY metric_name, metric_kind, metric_unit, client_instance_id
),
ranked AS (
  SELECT * FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY metric_name, metric_kind, metric_unit
                                 ORDER BY value DESC NULLS LAST, client_instance_id) AS rank
    FROM per_client)
  WHERE rank <= dashboard_top
),
names AS (
  SELECT client_instance_id, client_id, principal, quota_entity,
         ROW_NUMBER() OVER (PARTITION BY client_instance_id
                            ORDER BY seen DESC, client_id, principal, quota_entity) AS latest
  FROM (SELECT client_instance_id, client_id, principal, quota_entity, MAX(last_time) AS seen
        FROM dashboard_client_rows
        WHERE client_instance_id IN (SELECT client_instance_id FROM ranked)
        GROUP BY client_instance_id, client_id, principal, quota_entity)
)
SELECT metric_name, metric_kind, metric_unit, measure, rank, client_instance_id, client_id, principal,
       quota_entity, value, peak, points
FROM ranked JOIN names USING (client_instance_id)
WHERE latest = 1
ORDER BY metric_name, metric_kind, metric_unit, rank
