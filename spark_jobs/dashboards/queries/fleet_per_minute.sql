-- Fleet overview per minute: client instances that sent metrics, pushes landed, their bytes and the
-- error answers (any Kafka error code but NONE). Every minute of the window has a row: a minute with
-- nothing at all has zeros (an outage shows as one).
WITH minutes AS (
  SELECT explode(IF(first <= last, sequence(first, last, INTERVAL 1 MINUTE), array())) AS bucket_start
  FROM (SELECT date_trunc('MINUTE', dashboard_from - INTERVAL 1 MICROSECOND) + INTERVAL 1 MINUTE AS first,
               date_trunc('MINUTE', dashboard_to - INTERVAL 1 MICROSECOND) AS last)
),
activity AS (
  SELECT bucket_start,
         SUM(IF(`group` = 'telemetry_pushes' AND metric = 'pushes', value_sum, 0)) AS pushes,
         SUM(IF(`group` = 'telemetry_pushes' AND metric = 'payload_bytes', value_sum, 0)) AS payload_bytes,
         SUM(IF(`group` = 'Requests' AND split(metric, '/')[1] <> '0', value_sum, 0)) AS error_answers
  FROM dashboard_activity
  GROUP BY bucket_start
),
clients AS (
  SELECT bucket_start, COUNT(DISTINCT client_instance_id) AS client_instances
  FROM dashboard_client_minutes
  GROUP BY bucket_start
)
SELECT bucket_start,
       COALESCE(client_instances, 0) AS client_instances,
       CAST(COALESCE(pushes, 0) AS BIGINT) AS pushes,
       CAST(COALESCE(payload_bytes, 0) AS BIGINT) AS payload_bytes,
       CAST(COALESCE(error_answers, 0) AS BIGINT) AS error_answers
FROM minutes LEFT JOIN activity USING (bucket_start) LEFT JOIN clients USING (bucket_start)
ORDER BY bucket_start
