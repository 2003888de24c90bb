//! PostgreSQL SQL for the scrape-time gauges (the reads: `store::metrics`).

use crate::store::metrics::{GaugesSql, OnCallSql};

pub(crate) const GAUGES: GaugesSql = GaugesSql {
    attempts: "SELECT kind, state, count(*) FROM cobro.payment_attempts
          GROUP BY kind, state ORDER BY kind, state",
    summary: "SELECT
            (SELECT count(*) FROM (
                SELECT order_id FROM cobro.payment_attempts
                 WHERE state = 'APROBADO' AND kind <> 'refund'
                 GROUP BY order_id HAVING count(*) >= 2) doubled),
            (SELECT count(*) FROM cobro.recon_cases WHERE resolved_at IS NULL),
            (SELECT EXTRACT(EPOCH FROM now() - min(entered))::float8 FROM (
                SELECT COALESCE(
                         (SELECT max(t.at) FROM cobro.attempt_transitions t
                           WHERE t.attempt_id = a.id AND t.to_state = 'DESCONOCIDO'),
                         a.updated_at) AS entered
                  FROM cobro.payment_attempts a
                 WHERE a.state = 'DESCONOCIDO') unknown)",
    // Each business retry joined to the attempt before it (the decline
    // that caused it): the retries through the partial index
    // payment_attempts_card_retries (kind = 'business_retry'), one probe of
    // payment_attempts_order per retry; refunds share the order id, not the
    // attempt numbering.
    business_retries: "SELECT p.decline_code, r.state, count(*)
           FROM cobro.payment_attempts r
           JOIN cobro.payment_attempts p
             ON p.order_id = r.order_id
            AND p.attempt_number = r.attempt_number - 1
            AND p.kind <> 'refund'
          WHERE r.kind = 'business_retry'
          GROUP BY p.decline_code, r.state
          ORDER BY p.decline_code, r.state",
};

pub(crate) const ON_CALL: OnCallSql = OnCallSql {
    summary: "SELECT
                (SELECT EXTRACT(EPOCH FROM now() - min(next_action_at))::float8
                   FROM cobro.payment_attempts
                  WHERE state IN ('PENDIENTE', 'DESCONOCIDO', 'RECHAZADO')
                    AND lease_owner IS NULL AND next_action_at < now()),
                (SELECT EXTRACT(EPOCH FROM max(finished_at))::float8
                   FROM cobro.recon_runs WHERE outcome = 'ok'),
                (SELECT count(*) FROM cobro.notices WHERE acked_at IS NULL),
                (SELECT count(*) FROM cobro.notices WHERE failed_at IS NOT NULL AND acked_at IS NULL)",
    open_cases_by_kind: "SELECT kind, count(*) FROM cobro.recon_cases WHERE resolved_at IS NULL
          GROUP BY kind ORDER BY kind",
    // The latest daily close and the latest intraday run, the higher: the
    // intraday run sees only today, the close only yesterday.
    gateway_double_charges: "SELECT max((report->>'gateway_double_charges')::bigint) FROM (
            (SELECT report FROM cobro.recon_runs
              WHERE outcome = 'ok' AND window_to - window_from = interval '1 day'
              ORDER BY finished_at DESC LIMIT 1)
            UNION ALL
            (SELECT report FROM cobro.recon_runs
              WHERE outcome = 'ok' AND window_to - window_from <> interval '1 day'
              ORDER BY finished_at DESC LIMIT 1)) latest",
};
