-- Rejected webhook deliveries are kept as a sample, not one row each: at
-- most one row per reason per minute (Unix minutes), whichever web process
-- sees it first. Every rejection is still counted in
-- cobro_webhooks_rejected_total. Rows from before have no minute (NULLs
-- never collide in a unique index).
ALTER TABLE rejected_webhooks ADD COLUMN minute INTEGER;
CREATE UNIQUE INDEX rejected_webhooks_sample ON rejected_webhooks (reason, minute);
