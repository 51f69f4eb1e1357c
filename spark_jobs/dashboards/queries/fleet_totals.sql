-- Fleet overview, one row for the whole window [dashboard_from, dashboard_to): distinct client
-- instances and quota entities seen, pushes landed, their bytes, terminating pushes, error answers
-- (any Kafka error code but NONE), pushes that did not decode, and the longest throttle.
WITH activity AS (
  SELECT quota_entity, `group`, metric, value_sum, value_max
  FROM dashboard_activity
)
SELECT
  (SELECT COUNT(DISTINCT client_instance_id) FROM dashboard_client_rows) AS client_instances,
  COUNT(DISTINCT quota_entity) AS quota_entities,
  CAST(COALESCE(SUM(IF(`group` = 'telemetry_pushes' AND metric = 'pushes', value_sum, 0)), 0) AS BIGINT) AS pushes,
  CAST(COALESCE(SUM(IF(`group` = 'telemetry_pushes' AND metric = 'payload_bytes', value_sum, 0)), 0) AS BIGINT)
    AS payload_bytes,
  CAST(COALESCE(SUM(IF(`group` = 'telemetry_pushes' AND metric = 'terminating', value_sum, 0)), 0) AS BIGINT)
    AS terminating_pushes,
  CAST(COALESCE(SUM(IF(`group` = 'Requests' AND split(metric, '/')[1] <> '0', value_sum, 0)), 0) AS BIGINT)
    AS error_answers,
  CAST(COALESCE(SUM(IF(`group` = 'decode_quarantine', value_sum, 0)), 0) AS BIGINT) AS quarantined_pushes,
  MAX(IF(metric = 'throttle-time', value_max, NULL)) AS max_throttle_ms
FROM activity
