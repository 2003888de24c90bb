-- Cancelled by the app or finance before it was sent (or its scheduled
-- business retry dropped): why. Only a RECHAZADO attempt carries one.
ALTER TABLE payment_attempts ADD COLUMN cancel_reason text
    CHECK (cancel_reason IS NULL OR (cancel_reason IN
        ('paid_by_other_means', 'customer_request', 'fraud_suspected', 'duplicate_order', 'other')
        AND state = 'RECHAZADO'));
