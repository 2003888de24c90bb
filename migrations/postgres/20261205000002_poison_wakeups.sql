-- Poison wake-ups: an attempt whose handling keeps failing with an error
-- that is not the gateway's (a bug, a row the code cannot handle, a trigger
-- that refuses the write) is quarantined to finance instead of being
-- re-woken for ever. One row per attempt that has failed: how often, the
-- last error, and once quarantined the case that shows it to finance. The
-- sweepers skip an attempt whose quarantine case is open; closing the case
-- (after fixing the cause) lifts the quarantine, and the next sweep wakes
-- it. Nothing here changes an attempt's state: quarantine only stops the
-- wake-ups.
ALTER TABLE cobro.recon_cases DROP CONSTRAINT recon_cases_kind_check;
ALTER TABLE cobro.recon_cases ADD CONSTRAINT recon_cases_kind_check
    CHECK (kind IN ('double_charge', 'unmatched_charge', 'unmatched_refund',
                    'missing_at_gateway', 'amount_mismatch', 'dispute', 'poison_wakeup'));

CREATE TABLE cobro.wake_failures (
    attempt_id      uuid PRIMARY KEY REFERENCES cobro.payment_attempts (id),
    failures        integer NOT NULL CHECK (failures >= 1),
    first_failed_at timestamptz NOT NULL,
    last_failed_at  timestamptz NOT NULL,
    last_error      text NOT NULL,
    -- the open case while quarantined (NULL: still counting)
    case_id         bigint REFERENCES cobro.recon_cases (id)
);
