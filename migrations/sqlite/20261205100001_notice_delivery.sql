-- Customer notices delivered; see migrations/postgres/…_notice_delivery.sql.
-- Times are INTEGER milliseconds; the claim is taken under BEGIN IMMEDIATE.
ALTER TABLE notices ADD COLUMN delivery_attempts INTEGER NOT NULL DEFAULT 0 CHECK (delivery_attempts >= 0);
ALTER TABLE notices ADD COLUMN next_delivery_at INTEGER;
ALTER TABLE notices ADD COLUMN claim_token TEXT;
ALTER TABLE notices ADD COLUMN claim_expires_at INTEGER;
ALTER TABLE notices ADD COLUMN last_status INTEGER;
ALTER TABLE notices ADD COLUMN last_error TEXT;
ALTER TABLE notices ADD COLUMN delivered_at INTEGER;
ALTER TABLE notices ADD COLUMN failed_at INTEGER CHECK (failed_at IS NULL OR delivered_at IS NULL);
CREATE INDEX notices_to_deliver ON notices (coalesce(next_delivery_at, created_at))
    WHERE acked_at IS NULL AND failed_at IS NULL;
CREATE INDEX notices_failed ON notices (id)
    WHERE failed_at IS NOT NULL AND acked_at IS NULL;
