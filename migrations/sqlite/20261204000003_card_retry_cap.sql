-- Business retries capped per payment method (see
-- migrations/postgres/…_card_retry_cap.sql); the count runs from Rust under
-- BEGIN IMMEDIATE.
CREATE INDEX payment_attempts_card_retries ON payment_attempts (payment_method, created_at)
    WHERE kind = 'business_retry';
