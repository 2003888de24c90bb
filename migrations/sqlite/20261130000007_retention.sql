-- Retention (see migrations/postgres/…_retention.sql): indexes for the
-- oldest-first batched purge of webhook event ids and rejected deliveries.

CREATE INDEX webhook_events_received ON webhook_events (received_at);
CREATE INDEX rejected_webhooks_received ON rejected_webhooks (received_at);
