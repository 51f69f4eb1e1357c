-- The dashboard_top most throttled quota entities over the window, by quota type: the longest and the
-- average throttle time (the quota engine's `throttle-time` sensor, sampled into quota_samples).
SELECT quota_entity,
       `group` AS quota_type,
       MAX(value_max) AS throttle_ms_max,
       SUM(value_sum) / SUM(samples) AS throttle_ms_avg,
       SUM(samples) AS samples
FROM dashboard_activity
WHERE metric = 'throttle-time'
GROUP BY quota_entity, `group`
HAVING MAX(value_max) > 0
ORDER BY throttle_ms_max DESC, throttle_ms_avg DESC, quota_entity, quota_type
LIMIT dashboard_top
