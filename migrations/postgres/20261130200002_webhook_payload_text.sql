-- A webhook's raw body, kept as text. jsonb refuses the escape \u0000
-- (valid JSON, but jsonb cannot hold a NUL character), so a signed event
-- carrying it could never be stored: the insert failed, the gateway got a
-- 503 and retried for days. The body has been parsed as JSON before it is
-- stored; nothing reads this column as jsonb. The text fields cobro takes
-- out of an event (id, type, charge id, decline code) have any NUL
-- character escaped as the six characters \u0000 before they reach a text
-- column (src/webhook/event.rs).
--
-- The type change rewrites the table (ACCESS EXCLUSIVE for its duration);
-- the retention purge keeps it to COBRO_WEBHOOK_RETENTION of events.

ALTER TABLE cobro.webhook_events ALTER COLUMN payload TYPE text USING payload::text;
