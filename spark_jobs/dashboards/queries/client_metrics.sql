-- The drill-down of clients.sql: every metric of those client instances over the window, measured
-- as in top_clients.sql, with how many series (attribute sets) it has.
WITH shown AS (
  SELECT client_instance_id FROM dashboard_client_rows
  GROUP BY client_instance_id
  ORDER BY MAX(last_time) DESC, client_instance_id
  LIMIT dashboard_max_clients
)
SELECT client_instance_id, metric_name, metric_kind, metric_unit,
       CASE WHEN metric_kind = 'sum' THEN 'increase' ELSE 'average' END AS measure,
       CASE WHEN metric_kind = 'gauge' THEN try_divide(SUM(value_sum), SUM(value_count))
            WHEN metric_kind = 'sum' THEN SUM(value_sum)
            ELSE try_divide(SUM(sum), SUM(count)) END AS value,
       COALESCE(MAX(value_max), MAX(max)) AS peak,
       COUNT(DISTINCT attributes_key) AS series,
       SUM(points) AS points
FROM dashboard_client_rows JOIN shown USING (client_instance_id)
GROUP BY client_instance_id, metric_name, metric_kind, metric_unit
ORDER BY client_instance_id, metric_name, metric_kind, metric_unit
