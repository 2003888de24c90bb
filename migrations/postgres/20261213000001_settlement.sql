-- Settlement reconciliation (src/recon/settle.rs): what the gateway's
-- balance says each approved charge put into the merchant's balance
-- (gross, fee, net), for finance's summary and CSV, and three new case
-- kinds:
--   unsettled        APROBADO here, no settled balance transaction at the
--                    gateway after COBRO_SETTLEMENT_DELAY
--   fee_mismatch     settled with a fee other than COBRO_SETTLEMENT_FEE's
--   payout_mismatch  a payout whose amount is not the net of its lines
-- None of them says the gateway may have charged something we do not hold
-- (the charge is APROBADO here, or no order is involved), so none holds
-- the order against a new charge attempt.

ALTER TABLE cobro.recon_cases DROP CONSTRAINT recon_cases_kind_check;
ALTER TABLE cobro.recon_cases ADD CONSTRAINT recon_cases_kind_check
    CHECK (kind IN ('double_charge', 'unmatched_charge', 'unmatched_refund',
                    'missing_at_gateway', 'amount_mismatch', 'dispute', 'poison_wakeup',
                    'unsettled', 'fee_mismatch', 'payout_mismatch'));

CREATE OR REPLACE FUNCTION cobro.case_kind_holds_order(p_kind text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT p_kind NOT IN ('missing_at_gateway', 'unsettled', 'fee_mismatch', 'payout_mismatch');
$$;

-- One row per settled charge: written once, by the first run that sees
-- its balance transaction; later runs may only fill in the payout.
CREATE TABLE cobro.settlements (
    attempt_id   uuid PRIMARY KEY REFERENCES cobro.payment_attempts (id),
    balance_txn  text NOT NULL UNIQUE CHECK (length(balance_txn) BETWEEN 1 AND 255),
    gross_minor  bigint NOT NULL CHECK (gross_minor > 0),
    fee_minor    bigint NOT NULL,
    net_minor    bigint NOT NULL,
    currency     text NOT NULL REFERENCES cobro.currencies (code),
    payout       text CHECK (payout IS NULL OR length(payout) BETWEEN 1 AND 255),
    settled_at   timestamptz NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    CHECK (net_minor = gross_minor - fee_minor)
);
CREATE INDEX settlements_settled_at ON cobro.settlements (settled_at);

-- A settlement belongs to an APROBADO charge, in its amount and currency;
-- its figures never change once written (the payout may be filled in once).
CREATE FUNCTION cobro.settlement_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND (
           NEW.attempt_id IS DISTINCT FROM OLD.attempt_id
        OR NEW.balance_txn IS DISTINCT FROM OLD.balance_txn
        OR NEW.gross_minor IS DISTINCT FROM OLD.gross_minor
        OR NEW.fee_minor IS DISTINCT FROM OLD.fee_minor
        OR NEW.currency IS DISTINCT FROM OLD.currency
        OR NEW.settled_at IS DISTINCT FROM OLD.settled_at
        OR (OLD.payout IS NOT NULL AND NEW.payout IS DISTINCT FROM OLD.payout)) THEN
        RAISE EXCEPTION 'a settlement is written once: only a missing payout may be filled in'
            USING ERRCODE = 'CB030';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM cobro.payment_attempts a
                    WHERE a.id = NEW.attempt_id AND a.kind <> 'refund'
                      AND a.state = 'APROBADO'
                      AND a.amount_minor = NEW.gross_minor AND a.currency = NEW.currency) THEN
        RAISE EXCEPTION 'settlement of attempt %: it must be an APROBADO charge of % minor units in %',
            NEW.attempt_id, NEW.gross_minor, NEW.currency USING ERRCODE = 'CB030';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER settlement_guard BEFORE INSERT OR UPDATE ON cobro.settlements
    FOR EACH ROW EXECUTE FUNCTION cobro.settlement_guard();
