-- Reconciliation runs: which window a worker claimed, so that with any
-- number of workers one runs each window. A claim is taken by inserting the
-- window (UNIQUE), or by taking over a run that failed (after a retry delay)
-- or whose holder vanished (claimed long ago, never finished); `tries`
-- fences the holder, so a vanished holder that comes back cannot record its
-- end over a newer run's. The run's report (or its error) is kept.
--
-- The cases themselves are idempotent (recon_cases.dedupe_key), so the
-- claim only spares the gateway N identical listings; `cobro reconcile`
-- by hand runs without it.

CREATE TABLE cobro.recon_runs (
    id          bigserial PRIMARY KEY,
    window_from timestamptz NOT NULL,
    window_to   timestamptz NOT NULL,
    claimed_by  text NOT NULL,
    claimed_at  timestamptz NOT NULL DEFAULT now(),
    tries       integer NOT NULL DEFAULT 1 CHECK (tries >= 1),
    finished_at timestamptz,
    outcome     text CHECK (outcome IN ('ok', 'failed')),
    report      jsonb,
    UNIQUE (window_from, window_to),
    CHECK (window_to > window_from),
    CHECK ((finished_at IS NULL) = (outcome IS NULL))
);

-- What reconciliation reads: attempts created in a window, and attempts by
-- the gateway's id (the key and the order are indexed already).
CREATE INDEX payment_attempts_created ON cobro.payment_attempts (created_at);
CREATE INDEX payment_attempts_gateway_id ON cobro.payment_attempts (gateway_charge_id)
    WHERE gateway_charge_id IS NOT NULL;
