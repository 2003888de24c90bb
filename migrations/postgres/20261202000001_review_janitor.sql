-- The review janitor: an attempt in EN_REVISION keeps being looked up on a
-- slow schedule (its next_action_at), so the sweeper's backstop for lost
-- wake-ups scans EN_REVISION's due times too, without the history.
CREATE INDEX payment_attempts_review_due ON cobro.payment_attempts (next_action_at)
    WHERE state = 'EN_REVISION';

-- The finance queue is paginated in SQL, oldest first, by (created_at, id):
-- the queue's partial index carries both, so a page is one index range.
DROP INDEX cobro.payment_attempts_escalation;
CREATE INDEX payment_attempts_escalation ON cobro.payment_attempts (created_at, id)
    WHERE state IN ('DESCONOCIDO', 'EN_REVISION');

-- Attempts already in review that were sent at least once get their first
-- automatic check now (the sweeper wakes them); one never sent has nothing
-- to find at the gateway and stays with finance.
UPDATE cobro.payment_attempts SET next_action_at = now()
 WHERE state = 'EN_REVISION' AND next_action_at IS NULL AND send_count > 0;
