-- The window's rows of each rollup the dashboard reads, as temporary views over the telemetry.<table>
-- views; every dashboard query reads these. Run variables.sql first. The views read the session
-- variables when a query runs, so a later SET VAR moves them.
-- Each filters the partition column too, so Spark reads only the window's partitions. A gauge row
-- whose sum or largest value is NaN (a client's statistic with no samples yet) counts as no value.

-- the quota entities' activity (pushes, bytes, answers by code, quota sensors) per minute
CREATE OR REPLACE TEMPORARY VIEW dashboard_activity AS
SELECT *
FROM telemetry.rollup_entity_activity_1m
WHERE bucket_hour BETWEEN date_format(dashboard_from, "yyyy-MM-dd'T'HH")
                      AND date_format(dashboard_to, "yyyy-MM-dd'T'HH")
  AND bucket_start >= dashboard_from AND bucket_start < dashboard_to;

-- the quota entities' Kafka client metrics per minute
CREATE OR REPLACE TEMPORARY VIEW dashboard_entity_minutes AS
SELECT * EXCEPT (value_sum, value_count, value_max),
       nanvl(value_sum, CAST(NULL AS DOUBLE)) AS value_sum,
       IF(isnan(value_sum), 0, value_count) AS value_count,
       nanvl(value_max, CAST(NULL AS DOUBLE)) AS value_max
FROM telemetry.rollup_entity_1m
WHERE bucket_hour BETWEEN date_format(dashboard_from, "yyyy-MM-dd'T'HH")
                      AND date_format(dashboard_to, "yyyy-MM-dd'T'HH")
  AND bucket_start >= dashboard_from AND bucket_start < dashboard_to;

-- the client instances' Kafka client metrics per minute (for what needs minutes)
CREATE OR REPLACE TEMPORARY VIEW dashboard_client_minutes AS
SELECT *
FROM telemetry.rollup_client_1m
WHERE bucket_hour BETWEEN date_format(dashboard_from, "yyyy-MM-dd'T'HH")
                      AND date_format(dashboard_to, "yyyy-MM-dd'T'HH")
  AND bucket_start >= dashboard_from AND bucket_start < dashboard_to;

-- the client instances' Kafka client metrics over the window, in as few rows as the rollups allow:
-- the window's whole hours from the hourly rollup (its rows are the minutes merged), the minutes
-- before the first whole hour and after the last one from the 1-minute rollup. Only the columns
-- that add up across buckets (and the names) are kept.
CREATE OR REPLACE TEMPORARY VIEW dashboard_client_rows AS
SELECT client_instance_id, client_id, principal, quota_entity, client_software_name,
       client_software_version, metric_name, metric_kind, metric_unit, attributes_key, first_time,
       last_time, points, nanvl(value_sum, CAST(NULL AS DOUBLE)) AS value_sum,
       IF(isnan(value_sum), 0, value_count) AS value_count, nanvl(value_max, CAST(NULL AS DOUBLE)) AS value_max,
       sum, count, max, unknown_deltas
FROM telemetry.rollup_client_1h
WHERE bucket_date BETWEEN date_format(dashboard_from, 'yyyy-MM-dd') AND date_format(dashboard_to, 'yyyy-MM-dd')
  AND bucket_start >= date_trunc('HOUR', dashboard_from - INTERVAL 1 MICROSECOND) + INTERVAL 1 HOUR
  AND bucket_start < date_trunc('HOUR', dashboard_to)
UNION ALL
SELECT client_instance_id, client_id, principal, quota_entity, client_software_name,
       client_software_version, metric_name, metric_kind, metric_unit, attributes_key, first_time,
       last_time, points, nanvl(value_sum, CAST(NULL AS DOUBLE)) AS value_sum,
       IF(isnan(value_sum), 0, value_count) AS value_count, nanvl(value_max, CAST(NULL AS DOUBLE)) AS value_max,
       sum, count, max, unknown_deltas
FROM telemetry.rollup_client_1m
WHERE bucket_hour BETWEEN date_format(dashboard_from, "yyyy-MM-dd'T'HH")
                      AND date_format(dashboard_to, "yyyy-MM-dd'T'HH")
  AND (bucket_hour < date_format(dashboard_from - INTERVAL 1 MICROSECOND + INTERVAL 1 HOUR, "yyyy-MM-dd'T'HH")
       OR bucket_hour >= date_format(dashboard_to, "yyyy-MM-dd'T'HH"))
  AND bucket_start >= dashboard_from AND bucket_start < dashboard_to
  AND (bucket_start < date_trunc('HOUR', dashboard_from - INTERVAL 1 MICROSECOND) + INTERVAL 1 HOUR
       OR bucket_start >= date_trunc('HOUR', dashboard_to));
