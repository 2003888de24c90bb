-- Reconciliation cases: what the daily comparison with the gateway found,
-- for finance. A case is opened once (dedupe_key is UNIQUE: re-running a
-- window opens nothing new) and appears in the escalation queue until a
-- person resolves it with a note.
--
-- kind:
--   double_charge       two or more approved charges at the gateway for one order
--   unmatched_charge    approved at the gateway, with no attempt of ours or
--                       ours not APROBADO (also for refunds: unmatched_refund)
--   missing_at_gateway  APROBADO here, no matching approved charge (or refund) there
--   amount_mismatch     both approved, different amount or currency

CREATE TABLE cobro.recon_cases (
    id              bigserial PRIMARY KEY,
    kind            text NOT NULL CHECK (kind IN ('double_charge', 'unmatched_charge',
                        'unmatched_refund', 'missing_at_gateway', 'amount_mismatch')),
    dedupe_key      text NOT NULL UNIQUE,
    order_id        text,
    attempt_id      uuid REFERENCES cobro.payment_attempts (id),
    -- the gateway's charge or refund id(s) involved
    gateway_ref     text,
    -- what each side says (amounts in minor units, states, ids)
    details         jsonb NOT NULL,
    window_from     timestamptz NOT NULL,
    window_to       timestamptz NOT NULL,
    opened_at       timestamptz NOT NULL DEFAULT now(),
    resolved_at     timestamptz,
    resolved_by     text,
    resolution_note text,
    CHECK ((resolved_at IS NULL) = (resolved_by IS NULL))
);
CREATE INDEX recon_cases_open ON cobro.recon_cases (opened_at) WHERE resolved_at IS NULL;
