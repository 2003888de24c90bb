-- Rejected webhook deliveries are kept as a sample, not one row each: at
-- most one row per reason per minute (Unix minutes), whichever web process
-- sees it first. Every rejection is still counted in
-- cobro_webhooks_rejected_total. Rows from before have no minute (NULL is
-- never equal to NULL, so they do not collide).
ALTER TABLE cobro.rejected_webhooks ADD COLUMN minute bigint;
CREATE UNIQUE INDEX rejected_webhooks_sample ON cobro.rejected_webhooks (reason, minute);
