-- Customer notices delivered: each outbox row is POSTed to the app's URL
-- (COBRO_NOTICE_URL) in the Standard Webhooks format, retried on a schedule
-- of days. The row stays the truth: delivery never touches a payment.
--
-- delivery_attempts: tries whose answer was recorded; next_delivery_at: when
-- the next try is due (NULL: since created_at); claim_token/claim_expires_at:
-- a worker's short claim (taken with FOR UPDATE SKIP LOCKED) so two workers
-- never deliver one row at once; a claim past its expiry is free again.
-- delivered_at: the app answered 2xx (the notice is then acknowledged by
-- 'delivery' too); failed_at: the last try of the schedule failed too.
ALTER TABLE cobro.notices
    ADD COLUMN delivery_attempts integer NOT NULL DEFAULT 0 CHECK (delivery_attempts >= 0),
    ADD COLUMN next_delivery_at  timestamptz,
    ADD COLUMN claim_token       uuid,
    ADD COLUMN claim_expires_at  timestamptz,
    ADD COLUMN last_status       integer,
    ADD COLUMN last_error        text,
    ADD COLUMN delivered_at      timestamptz,
    ADD COLUMN failed_at         timestamptz,
    ADD CONSTRAINT notices_delivered_or_failed CHECK (delivered_at IS NULL OR failed_at IS NULL);
-- What the delivery loop scans: notices nobody has acknowledged and that
-- have not failed for good.
CREATE INDEX notices_to_deliver ON cobro.notices (coalesce(next_delivery_at, created_at))
    WHERE acked_at IS NULL AND failed_at IS NULL;
CREATE INDEX notices_failed ON cobro.notices (id)
    WHERE failed_at IS NOT NULL AND acked_at IS NULL;
