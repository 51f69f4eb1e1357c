-- For every Kafka client metric, the dashboard_top quota entities with the highest value over the
-- window, measured as in top_clients.sql over all the entity's clients together. `clients` is the
-- most client instances of the entity that sent the metric in one minute.
WITH per_entity AS (
  SELECT metric_name, metric_kind, metric_unit, quota_entity,
         CASE WHEN metric_kind = 'gauge' THEN try_divide(SUM(value_sum), SUM(value_count))
              WHEN metric_kind = 'sum' THEN SUM(value_sum)
              ELSE try_divide(SUM(sum), SUM(count)) END AS value,
         CASE WHEN metric_kind = 'sum' THEN 'increase' ELSE 'average' END AS measure,
         COALESCE(MAX(value_max), MAX(max)) AS peak,
         MAX(clients) AS clients,
         SUM(points) AS points
  FROM dashboard_entity_minutes
  GROUP BY metric_name, metric_kind, metric_unit, quota_entity
),
ranked AS (
  SELECT *, ROW_NUMBER() OVER (
           PARTITION BY metric_name, metric_kind, metric_unit ORDER BY value DESC NULLS LAST, quota_entity) AS rank
  FROM per_entity
)
SELECT metric_name, metric_kind, metric_unit, measure, rank, quota_entity, value, peak, clients, points
FROM ranked
WHERE rank <= dashboard_top
ORDER BY metric_name, metric_kind, metric_unit, rank
