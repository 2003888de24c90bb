-- The incident switch: while `sending_paused` is on, workers send no new
-- charge (lookups continue); attempts due to be sent wait, parked. Every
-- change is appended to pause_events (who, when, why).
CREATE TABLE cobro.pause_switch (
    id          boolean PRIMARY KEY DEFAULT true CHECK (id),
    paused      boolean NOT NULL,
    changed_at  timestamptz NOT NULL DEFAULT now(),
    changed_by  text NOT NULL CHECK (length(changed_by) BETWEEN 1 AND 200),
    reason      text CHECK (reason IS NULL OR length(reason) <= 500)
);
CREATE TABLE cobro.pause_events (
    id      bigserial PRIMARY KEY,
    paused  boolean NOT NULL,
    actor   text NOT NULL,
    reason  text,
    at      timestamptz NOT NULL DEFAULT now()
);
CREATE TRIGGER pause_events_append_only
    BEFORE UPDATE OR DELETE ON cobro.pause_events
    FOR EACH ROW EXECUTE FUNCTION cobro.refuse_change();
CREATE TRIGGER pause_events_no_truncate
    BEFORE TRUNCATE ON cobro.pause_events
    FOR EACH STATEMENT EXECUTE FUNCTION cobro.refuse_change();
