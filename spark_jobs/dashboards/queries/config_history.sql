-- Subscription and client-quota changes made through the admin API (the config log), newest first,
-- up to dashboard_to: earlier changes are kept because they still apply in the window.
SELECT written_at,
       kind,
       CASE WHEN kind = 'subscription' THEN subscription
            ELSE concat_ws(',', IF(entity_user IS NULL, NULL, concat('user=', entity_user)),
                                IF(entity_client_id IS NULL, NULL, concat('client-id=', entity_client_id)),
                                IF(entity_ip IS NULL, NULL, concat('ip=', entity_ip))) END AS target,
       CASE WHEN kind = 'subscription' THEN IF(properties = '{}', 'deleted', properties)
            WHEN quota_value IS NULL THEN concat(quota_key, ' removed')
            ELSE concat(quota_key, ' = ', CAST(quota_value AS STRING)) END AS change,
       principal,
       replica_id,
       written_at >= dashboard_from AS in_window
FROM telemetry.config_log
WHERE written_at < dashboard_to
ORDER BY written_at DESC, seq DESC
LIMIT 1000
