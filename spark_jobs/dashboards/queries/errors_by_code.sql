-- Error answers per minute by RPC and Kafka error code (NONE left out), from the answers the sink
-- counts by quota entity (quota_samples group `Requests`, metric `<rpc>/<code>`).
SELECT bucket_start,
       split(metric, '/')[0] AS rpc,
       CAST(split(metric, '/')[1] AS INT) AS error_code,
       CAST(SUM(value_sum) AS BIGINT) AS answers
FROM telemetry.rollup_entity_activity_1m
WHERE bucket_hour BETWEEN date_format(dashboard_from, "yyyy-MM-dd'T'HH")
                      AND date_format(dashboard_to, "yyyy-MM-dd'T'HH")
  AND bucket_start >= dashboard_from AND bucket_start < dashboard_to
  AND `group` = 'Requests' AND split(metric, '/')[1] <> '0'
GROUP BY bucket_start, rpc, error_code
ORDER BY bucket_start, rpc, error_code
