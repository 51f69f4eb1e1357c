-- Error answers per minute by RPC and Kafka error code (NONE left out), from the answers the sink
-- counts by quota entity (quota_samples group `Requests`, metric `<rpc>/<code>`).
SELECT bucket_start,
       split(metric, '/')[0] AS rpc,
       CAST(split(metric, '/')[1] AS INT) AS error_code,
       CAST(SUM(value_sum) AS BIGINT) AS answers
FROM dashboard_activity
WHERE `group` = 'Requests' AND split(metric, '/')[1] <> '0'
GROUP BY bucket_start, rpc, error_code
ORDER BY bucket_start, rpc, error_code
