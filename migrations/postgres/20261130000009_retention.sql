-- Retention: webhook event ids and rejected deliveries are purged once older
-- than the retention period (cobro-worker, COBRO_WEBHOOK_RETENTION, default
-- 30 days, never under the gateway's 3-day retry window). The purge deletes
-- the oldest rows first in small batches; these indexes keep each batch
-- from scanning the tables. Attempts, transitions, checks, notices, refunds
-- and reconciliation cases are never purged.

CREATE INDEX webhook_events_received ON cobro.webhook_events (received_at);
CREATE INDEX rejected_webhooks_received ON cobro.rejected_webhooks (received_at);
