-- The client instances seen in the window (at most dashboard_max_clients, the most recently seen
-- first): who they are (as their latest row says), when they were first and last seen, how many
-- metrics and data points they sent, and how many cumulative points had no known increase
-- (unknown_deltas). (Only numbers are aggregated over the window's rows, which keeps Spark on hash
-- aggregation; the names are looked up for the listed clients alone.)
WITH listed AS (
  SELECT client_instance_id,
         MIN(first_time) AS first_seen,
         MAX(last_time) AS last_seen,
         COUNT(DISTINCT metric_name) AS metrics,
         SUM(points) AS points,
         SUM(unknown_deltas) AS unknown_deltas
  FROM dashboard_client_rows
  GROUP BY client_instance_id
  ORDER BY last_seen DESC, client_instance_id
  LIMIT dashboard_max_clients
),
names AS (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY client_instance_id
                               ORDER BY seen DESC, client_id, principal, quota_entity,
                                        client_software_name, client_software_version) AS latest
  FROM (SELECT client_instance_id, client_id, principal, quota_entity, client_software_name,
               client_software_version, MAX(last_time) AS seen
        FROM dashboard_client_rows
        WHERE client_instance_id IN (SELECT client_instance_id FROM listed)
        GROUP BY client_instance_id, client_id, principal, quota_entity, client_software_name,
                 client_software_version)
)
SELECT client_instance_id, client_id, principal, quota_entity, client_software_name,
       client_software_version, first_seen, last_seen, metrics, points, unknown_deltas
FROM listed JOIN names USING (client_instance_id)
WHERE latest = 1
ORDER BY last_seen DESC, client_instance_id
