-- A customer's dispute (Stripe's charge.dispute.created) opens a case for
-- finance, like reconciliation's findings.
ALTER TABLE cobro.recon_cases DROP CONSTRAINT recon_cases_kind_check;
ALTER TABLE cobro.recon_cases ADD CONSTRAINT recon_cases_kind_check
    CHECK (kind IN ('double_charge', 'unmatched_charge', 'unmatched_refund',
                    'missing_at_gateway', 'amount_mismatch', 'dispute'));
