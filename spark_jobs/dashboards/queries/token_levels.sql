-- The controller-mutation token bucket (KIP-599) per minute for the dashboard_top quota entities whose
-- bucket ran lowest: its lowest and its last level in the minute. A negative level is a throttle.
WITH tokens AS (
  SELECT bucket_start, quota_entity, value_min, value_last
  FROM dashboard_activity
  WHERE metric = 'tokens'
),
lowest AS (
  SELECT quota_entity, MIN(value_min) AS lowest FROM tokens GROUP BY quota_entity
  ORDER BY lowest, quota_entity
  LIMIT dashboard_top
)
SELECT bucket_start, quota_entity, value_min AS tokens_min, value_last AS tokens_last
FROM tokens JOIN lowest USING (quota_entity)
ORDER BY quota_entity, bucket_start
