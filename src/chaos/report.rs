//! The soak's outcome as text.

use super::Outcome;

/// The outcome as text.
pub fn render(o: &Outcome) -> String {
    let r = &o.report;
    let verdict = if r.passed() { "PASSED" } else { "FAILED" };
    let mut s = format!(
        "chaos soak {verdict} (seed {seed}; replay: cobro chaos --seed {seed} with the same sizes)\n\
         disruptions: {kills} SIGKILLs, {restarts} PostgreSQL restarts, {exits} unexpected exits (restarted), {enq} enqueue retries\n\
         drained in {secs:.1} s: {orders} orders, {attempts} attempts, {approved} APROBADO, {review} EN_REVISION\n\
         orders charged twice at the gateway: {twice}\n\
         orders lost: {lost}\n\
         attempts stuck (not terminal, not EN_REVISION): {stuck}\n\
         amounts: {here} APROBADO here + {inrev} in review = {sum}; gateway approved {gw}; mismatches {mm}\n\
         attempts with an inconsistent log: {log}\n\
         re-sends after a lookup said approved: {resent}\n\
         checks: {checks}, start lateness p50 {p50} ms, p99 {p99} ms\n\
         gateway: {outage:.0} s outage (503s), {refused:.0} s refusing connections ({windows} window(s)), \
         429 above {rate}/s ({throttled} throttled), record-on-complete {roc} ms ({recorded} charges), {keys}; \
         breaker opened {openings} time(s); {parked} attempt(s) parked at the outage's end, all resumed {unparked:.1} s later\n",
        seed = o.seed,
        kills = o.kills,
        restarts = o.pg_restarts,
        exits = o.unexpected_exits,
        enq = o.enqueue_errors_retried,
        secs = o.drained_in_secs,
        orders = r.orders_enqueued,
        attempts = r.attempts,
        approved = r.approved_here,
        review = r.in_review,
        twice = r.orders_charged_twice,
        lost = r.orders_lost,
        stuck = r.attempts_stuck,
        here = r.approved_total_here,
        inrev = r.approved_total_in_review,
        sum = r.approved_total_here + r.approved_total_in_review,
        gw = r.approved_total_gateway,
        mm = r.amount_mismatches,
        log = r.log_inconsistent,
        resent = r.resent_after_approved,
        checks = r.checks,
        p50 = r.check_lateness_p50_ms,
        p99 = r.check_lateness_p99_ms,
        outage = o.gateway.outage_secs,
        refused = o.gateway.refused_secs,
        windows = o.gateway.refusal_windows,
        rate = o.gateway.rate_limit_per_s,
        throttled = o.gateway.throttled,
        roc = o.gateway.record_on_complete_ms,
        keys = if o.gateway.memoryless {
            "no idempotency (memoryless)"
        } else {
            "idempotency keys honoured"
        },
        recorded = o.gateway.recorded_on_complete,
        openings = o.gateway.breaker_openings,
        parked = o.gateway.parked_at_outage_end,
        unparked = o.gateway.unparked_in_secs,
    );
    for v in &r.violations {
        s.push_str(&format!("VIOLATION: {v}\n"));
    }
    if !r.passed() {
        s.push_str(&format!(
            "the database {} is kept for inspection\n",
            o.database
        ));
    }
    s
}
