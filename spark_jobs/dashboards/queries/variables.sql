-- The dashboard's parameters, as Spark SQL session variables that every dashboard query reads.
-- `telemetry-sink dashboard` declares them and sets them from --from, --to, --top and --max-clients.
-- In spark-sql, run this file first, then change what you need, e.g.
--   SET VAR dashboard_from = TIMESTAMP '2026-11-21 00:00:00';
-- Times are UTC (the session's spark.sql.session.timeZone must be UTC, as the rollup job writes it).
DECLARE OR REPLACE VARIABLE dashboard_to TIMESTAMP DEFAULT date_trunc('MINUTE', current_timestamp()) + INTERVAL 1 MINUTE;
DECLARE OR REPLACE VARIABLE dashboard_from TIMESTAMP DEFAULT date_trunc('MINUTE', current_timestamp()) - INTERVAL 1 DAY + INTERVAL 1 MINUTE;
DECLARE OR REPLACE VARIABLE dashboard_top INT DEFAULT 10;
DECLARE OR REPLACE VARIABLE dashboard_max_clients INT DEFAULT 1000;
