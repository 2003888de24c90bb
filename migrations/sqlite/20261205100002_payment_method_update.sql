-- A new payment-method token for the next business retry of a declined
-- order; see migrations/postgres/…_payment_method_update.sql. The rule and
-- the retry's choice of token run from Rust under BEGIN IMMEDIATE.
CREATE TABLE payment_method_updates (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    order_id         TEXT NOT NULL,
    after_attempt_id TEXT NOT NULL REFERENCES payment_attempts (id),
    payment_method   TEXT NOT NULL CHECK (length(payment_method) BETWEEN 1 AND 255),
    actor            TEXT NOT NULL,
    created_at       INTEGER NOT NULL
) STRICT;
CREATE INDEX payment_method_updates_order ON payment_method_updates (order_id, id);
CREATE TRIGGER payment_method_updates_no_update BEFORE UPDATE ON payment_method_updates
BEGIN SELECT RAISE(ABORT, 'payment_method_updates is append-only: UPDATE is not allowed'); END;
CREATE TRIGGER payment_method_updates_no_delete BEFORE DELETE ON payment_method_updates
BEGIN SELECT RAISE(ABORT, 'payment_method_updates is append-only: DELETE is not allowed'); END;
