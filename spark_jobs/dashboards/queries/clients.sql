-- The client instances seen in the window (at most dashboard_max_clients, the most recently seen
-- first): who they are, when they were first and last seen, how many metrics and data points they
-- sent, and how many cumulative points had no known increase (unknown_deltas).
SELECT client_instance_id,
       MAX_BY(client_id, last_time) AS client_id,
       MAX_BY(principal, last_time) AS principal,
       MAX_BY(quota_entity, last_time) AS quota_entity,
       MAX_BY(client_software_name, last_time) AS client_software_name,
       MAX_BY(client_software_version, last_time) AS client_software_version,
       MIN(first_time) AS first_seen,
       MAX(last_time) AS last_seen,
       COUNT(DISTINCT metric_name) AS metrics,
       SUM(points) AS points,
       SUM(unknown_deltas) AS unknown_deltas
FROM telemetry.rollup_client_1m
WHERE bucket_hour BETWEEN date_format(dashboard_from, "yyyy-MM-dd'T'HH")
                      AND date_format(dashboard_to, "yyyy-MM-dd'T'HH")
  AND bucket_start >= dashboard_from AND bucket_start < dashboard_to
GROUP BY client_instance_id
ORDER BY last_seen DESC, client_instance_id
LIMIT dashboard_max_clients
