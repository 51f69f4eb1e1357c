-- Throttle time per minute of the most throttled quota entities (as in throttled_entities.sql).
WITH throttle AS (
  SELECT bucket_start, quota_entity, `group` AS quota_type, samples, value_sum, value_max
  FROM dashboard_activity
  WHERE metric = 'throttle-time'
),
worst AS (
  SELECT quota_entity, quota_type, MAX(value_max) AS longest, SUM(value_sum) / SUM(samples) AS average
  FROM throttle
  GROUP BY quota_entity, quota_type
  HAVING longest > 0
  ORDER BY longest DESC, average DESC, quota_entity, quota_type
  LIMIT dashboard_top
)
SELECT bucket_start, quota_entity, quota_type,
       value_sum / samples AS throttle_ms_avg,
       value_max AS throttle_ms_max
FROM throttle JOIN worst USING (quota_entity, quota_type)
ORDER BY quota_entity, quota_type, bucket_start
