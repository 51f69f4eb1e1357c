-- Subscription and client-quota changes made through the admin API (the config log), newest first,
-- up to dashboard_to (the latest 1000): earlier changes are kept because they may still apply in the
-- window. A quota entity is written as quota_entity is everywhere else (client-id=...,user=...).
SELECT written_at,
       kind,
       CASE WHEN kind = 'subscription' THEN subscription
            ELSE concat_ws(',', IF(entity_client_id IS NULL, NULL, concat('client-id=', entity_client_id)),
                                IF(entity_ip IS NULL, NULL, concat('ip=', entity_ip)),
                                IF(entity_user IS NULL, NULL, concat('user=', entity_user))) END AS target,
       CASE WHEN kind = 'subscription' THEN IF(properties = '{}', 'deleted', properties)
            WHEN quota_value IS NULL THEN concat(quota_key, ' removed')
            WHEN quota_value = floor(quota_value) AND abs(quota_value) < 1e15
              THEN concat(quota_key, ' = ', CAST(CAST(quota_value AS BIGINT) AS STRING))
            ELSE concat(quota_key, ' = ', CAST(quota_value AS STRING)) END AS change,
       principal,
       replica_id,
       written_at >= dashboard_from AS in_window
FROM telemetry.config_log
WHERE written_at < dashboard_to
ORDER BY written_at DESC, seq DESC
LIMIT 1000
