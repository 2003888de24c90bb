//! `/metrics` on the web process and on a worker: a real worker charges
//! against the simulator (approved, declined, a lost response looked up, a
//! lost request re-sent, a gateway that stops answering lookups), and the
//! scrapes, parsed as the Prometheus text format, must agree with the
//! database. Orders charged twice must read 0, and would read 1 if the
//! database ever allowed it.

#[macro_use]
mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use cobro::domain::ChargeRequest;
use cobro::sim::Faults;
use cobro::state::{Event, State};
use cobro::store::Store;
use common::*;
use uuid::Uuid;

on_both_dbs!(
    double_approved_orders_and_open_cases_are_counted_from_the_rows,
    the_on_call_gauges_read_the_rows,
    ; by_backend:
    scrapes_agree_with_the_database_and_count_every_gateway_call,
);

/// One sample line: `name{label="value",...} value`.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A scrape: its samples and its `# TYPE` lines.
#[derive(Debug, Default)]
struct Scrape {
    samples: Vec<Sample>,
    types: BTreeMap<String, String>,
}

fn parse_value(v: &str) -> f64 {
    match v {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        _ => v.parse().unwrap_or_else(|e| panic!("bad value {v:?}: {e}")),
    }
}

/// `k="v",k2="v\"2"` (inside the braces) into a map, honouring escapes.
fn parse_labels(s: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek() == Some(&',') || chars.peek() == Some(&' ') {
            chars.next();
        }
        let name: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if name.is_empty() {
            return labels;
        }
        assert_eq!(
            chars.next(),
            Some('"'),
            "label {name} is not quoted in {s:?}"
        );
        let mut value = String::new();
        loop {
            match chars.next() {
                Some('\\') => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(c) => value.push(c),
                    None => panic!("dangling escape in {s:?}"),
                },
                Some('"') => break,
                Some(c) => value.push(c),
                None => panic!("unterminated label value in {s:?}"),
            }
        }
        labels.insert(name.trim().to_owned(), value);
    }
}

fn parse(text: &str) -> Scrape {
    let mut scrape = Scrape::default();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("# TYPE name kind");
            scrape.types.insert(name.to_owned(), kind.to_owned());
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let (name, labels, rest) = match line.find('{') {
            Some(open) => {
                let close = line.rfind('}').expect("closing brace");
                (
                    &line[..open],
                    parse_labels(&line[open + 1..close]),
                    &line[close + 1..],
                )
            }
            None => {
                let (name, rest) = line.split_once(' ').expect("name value");
                (name, BTreeMap::new(), rest)
            }
        };
        let value = rest.split_whitespace().next().expect("a value");
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad metric name {name:?}"
        );
        scrape.samples.push(Sample {
            name: name.to_owned(),
            labels,
            value: parse_value(value),
        });
    }
    scrape
}

impl Scrape {
    /// The samples of `name` whose labels include every pair of `with`.
    fn matching<'a>(
        &'a self,
        name: &'a str,
        with: &'a [(&str, &str)],
    ) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| {
            s.name == name
                && with
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
    }

    fn sum(&self, name: &str, with: &[(&str, &str)]) -> f64 {
        self.matching(name, with).map(|s| s.value).sum()
    }

    /// The one sample of `name` with exactly these labels.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let found: Vec<&Sample> = self
            .matching(name, labels)
            .filter(|s| s.labels.len() == labels.len())
            .collect();
        assert_eq!(found.len(), 1, "{name}{labels:?}: {found:?}");
        found[0].value
    }

    /// The database's gauges, to compare two scrapes.
    fn database_part(&self) -> Vec<Sample> {
        let db = [
            "cobro_attempts",
            "cobro_orders_double_approved",
            "cobro_recon_cases_open",
            "cobro_escalations_open",
            "cobro_database_up",
        ];
        self.samples
            .iter()
            .filter(|s| db.contains(&s.name.as_str()))
            .cloned()
            .collect()
    }
}

/// The `cobro_*` metric names deploy/alerts.yml's expressions read.
fn alert_metrics() -> std::collections::BTreeSet<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/alerts.yml");
    let rules = std::fs::read_to_string(path).expect("deploy/alerts.yml");
    let mut names = std::collections::BTreeSet::new();
    for word in rules.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if word.starts_with("cobro_") {
            names.insert(word.to_owned());
        }
    }
    names
}

async fn scrape(base: &str) -> Scrape {
    let resp = get_as(&format!("{base}/metrics"), As::Bearer("prom")).await;
    assert_eq!(resp.status(), 200);
    let ct = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    parse(&resp.text().await.expect("body"))
}

async fn enqueue(store: &Store, order: &str) -> Uuid {
    let req = ChargeRequest::parse(order, 1_500, "USD", None, Some("pm_test_visa")).unwrap();
    store.enqueue(&req).await.unwrap().attempt_id
}

async fn scrapes_agree_with_the_database_and_count_every_gateway_call(b: Backend) {
    let (db, sim) = db_and_sim(b, Faults::default()).await;
    let mut args = worker_args(&db.url, &sim.url());
    let metrics_addr = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
    args.metrics_addr = Some(metrics_addr);
    args.api_keys.api_keys = test_keys_config();
    let worker = spawn_worker(args);
    let web = web_on(&db.store).await;
    let long = Duration::from_secs(30);

    // Approved at once.
    let a = enqueue(&db.store, "m-approved").await;
    settled(&db.store, a, State::Aprobado, long).await;
    // Declined for good.
    set_faults(&sim.url(), &declining("card_declined")).await;
    let d = enqueue(&db.store, "m-declined").await;
    settled(&db.store, d, State::Rechazado, long).await;
    // Charged, answer lost: DESCONOCIDO, then found by lookup.
    set_faults(&sim.url(), &answers_lost()).await;
    let c = enqueue(&db.store, "m-lost-answer").await;
    settled(&db.store, c, State::Aprobado, long).await;
    assert_eq!(
        path(&db.store, c).await,
        ["PENDIENTE", "EN_PROCESO", "DESCONOCIDO", "APROBADO"]
    );
    // Request lost: DESCONOCIDO, not found, re-sent with the same key.
    set_faults(&sim.url(), &requests_lost()).await;
    let r = enqueue(&db.store, "m-resent").await;
    settled(&db.store, r, State::Desconocido, long).await;
    set_faults(&sim.url(), &Faults::default()).await;
    assert!(
        settled(&db.store, r, State::Aprobado, long)
            .await
            .send_count
            >= 2
    );
    // The gateway stops answering: DESCONOCIDO for a while, then EN_REVISION.
    set_faults(&sim.url(), &answers_lost_lookups_fail()).await;
    let u = enqueue(&db.store, "m-unknown").await;
    settled(&db.store, u, State::Desconocido, long).await;
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let during = scrape(&web.url).await;
    let (still, _) = db.store.load(u).await.unwrap();
    assert_eq!(
        still.state,
        State::Desconocido,
        "the checks outlast the scrape"
    );
    assert_eq!(
        during.get(
            "cobro_attempts",
            &[("kind", "initial"), ("state", "DESCONOCIDO")]
        ),
        1.0
    );
    let age = during.get("cobro_desconocido_oldest_age_seconds", &[]);
    assert!((0.9..30.0).contains(&age), "oldest DESCONOCIDO age {age}");
    settled(&db.store, u, State::EnRevision, long).await;

    // Everything has settled: the web process and the worker agree.
    let web_scrape = scrape(&web.url).await;
    let worker_scrape = scrape(&format!("http://{metrics_addr}")).await;
    assert_eq!(web_scrape.database_part(), worker_scrape.database_part());

    // Every metric deploy/alerts.yml reads is served by one of the two
    // processes: an alert on a name nobody exposes would never fire.
    let served: std::collections::BTreeSet<&str> = web_scrape
        .types
        .keys()
        .chain(worker_scrape.types.keys())
        .map(String::as_str)
        .collect();
    let read = alert_metrics();
    assert!(read.len() >= 10, "the rules read {read:?}");
    let missing: Vec<&String> = read
        .iter()
        .filter(|m| !served.contains(m.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "alerts read unserved metrics {missing:?}"
    );

    for s in [&web_scrape, &worker_scrape] {
        assert_eq!(s.get("cobro_database_up", &[]), 1.0);
        // Attempts by state match the database, kind by kind.
        let in_db = db.store.count_by_state().await.unwrap();
        for state in State::ALL {
            let want = in_db
                .iter()
                .find(|(st, _)| *st == state)
                .map_or(0, |(_, n)| *n);
            assert_eq!(
                s.sum("cobro_attempts", &[("state", state.as_str())]),
                want as f64,
                "{state}"
            );
        }
        let initial =
            |state: &str| s.get("cobro_attempts", &[("kind", "initial"), ("state", state)]);
        assert_eq!(
            [
                initial("APROBADO"),
                initial("RECHAZADO"),
                initial("EN_REVISION"),
                initial("DESCONOCIDO")
            ],
            [3.0, 1.0, 1.0, 0.0]
        );
        assert_eq!(
            s.get(
                "cobro_attempts",
                &[("kind", "refund"), ("state", "APROBADO")]
            ),
            0.0
        );
        // The seed's goal: no order charged twice.
        assert_eq!(s.get("cobro_orders_double_approved", &[]), 0.0);
        assert_eq!(s.get("cobro_recon_cases_open", &[]), 0.0);
        assert_eq!(s.get("cobro_desconocido_oldest_age_seconds", &[]), 0.0);
        assert_eq!(s.get("cobro_escalations_open", &[]), 1.0);
        for (name, kind) in [
            ("cobro_attempts", "gauge"),
            ("cobro_orders_double_approved", "gauge"),
            ("cobro_gateway_calls_total", "counter"),
            ("cobro_transitions_total", "counter"),
            ("cobro_gateway_call_duration_seconds", "histogram"),
        ] {
            assert_eq!(s.types.get(name).map(String::as_str), Some(kind), "{name}");
        }

        // Process counters (one registry for this whole test binary, so
        // other tests add to them: at least what this test caused).
        let calls = |call: &str, outcome: &str| {
            s.get(
                "cobro_gateway_calls_total",
                &[("call", call), ("outcome", outcome)],
            )
        };
        assert!(calls("charge", "approved") >= 2.0);
        assert!(calls("charge", "declined") >= 1.0);
        assert!(calls("charge", "unknown") >= 3.0);
        assert!(calls("lookup", "approved") >= 1.0);
        assert!(calls("lookup", "not_found") >= 1.0);
        assert!(calls("lookup", "failed") >= 5.0);
        for s_ in s.matching("cobro_gateway_calls_total", &[]) {
            let call = s_.labels["call"].as_str();
            let outcome = s_.labels["outcome"].as_str();
            assert!(
                ["charge", "lookup", "refund", "refund_lookup"].contains(&call),
                "{call}"
            );
            assert!(
                ["approved", "declined", "unknown", "not_found", "failed"].contains(&outcome),
                "{outcome}"
            );
        }
        assert!(s.get("cobro_lookups_total", &[("result", "failed")]) >= 5.0);
        assert!(s.get("cobro_lookups_total", &[("result", "not_found")]) >= 1.0);
        assert!(s.get("cobro_resends_total", &[]) >= 1.0);
        let moved =
            |from: &str, to: &str| s.get("cobro_transitions_total", &[("from", from), ("to", to)]);
        assert!(moved("PENDIENTE", "EN_PROCESO") >= 5.0);
        assert!(moved("EN_PROCESO", "DESCONOCIDO") >= 3.0);
        assert!(moved("DESCONOCIDO", "EN_PROCESO") >= 1.0);
        assert!(moved("DESCONOCIDO", "EN_REVISION") >= 1.0);
        assert!(s.get("cobro_escalations_total", &[("cause", "checks_exhausted")]) >= 1.0);

        // The latency histogram: cumulative buckets ending in +Inf = count.
        let hist = "cobro_gateway_call_duration_seconds";
        let mut buckets: Vec<(f64, f64)> = s
            .matching(
                "cobro_gateway_call_duration_seconds_bucket",
                &[("call", "charge")],
            )
            .map(|b| (parse_value(&b.labels["le"]), b.value))
            .collect();
        buckets.sort_by(|x, y| x.0.total_cmp(&y.0));
        assert!(buckets.len() >= 2, "{buckets:?}");
        assert!(
            buckets.windows(2).all(|w| w[0].1 <= w[1].1),
            "cumulative: {buckets:?}"
        );
        let count = s.get(&format!("{hist}_count"), &[("call", "charge")]);
        assert_eq!(
            buckets.last().map(|b| (b.0, b.1)),
            Some((f64::INFINITY, count))
        );
        assert!(count >= 6.0, "6 charges sent at least: {count}");
        assert!(s.get(&format!("{hist}_sum"), &[("call", "charge")]) >= 0.0);
        // The lost request was held 1.5 s before timing out.
        let under_a_second = buckets.iter().find(|b| b.0 == 1.0).expect("a 1 s bucket").1;
        assert!(
            under_a_second < count,
            "one charge took over a second: {buckets:?}"
        );
    }

    web.stop().await;
    finish(worker, sim).await;
    db.drop_db().await;
}

async fn double_approved_orders_and_open_cases_are_counted_from_the_rows(db: &TestDb) {
    let web = web_on(&db.store).await;
    let s = scrape(&web.url).await;
    assert_eq!(s.get("cobro_orders_double_approved", &[]), 0.0);
    assert_eq!(
        s.get(
            "cobro_attempts",
            &[("kind", "initial"), ("state", "PENDIENTE")]
        ),
        0.0
    );

    // An order with two attempts: the first declined, then a business retry.
    let id = enqueue(&db.store, "m-twice").await;
    let (first, _) = db.store.load(id).await.unwrap();
    let first = step(&db.store, &first, Event::Claim, None).await;
    step(&db.store, &first, Event::Declined, Some("card_declined")).await;
    db.store.business_retry(id, 4, "test", None).await.unwrap();
    let s = scrape(&web.url).await;
    assert_eq!(
        s.get(
            "cobro_attempts",
            &[("kind", "initial"), ("state", "RECHAZADO")]
        ),
        1.0
    );
    assert_eq!(
        s.get(
            "cobro_attempts",
            &[("kind", "business_retry"), ("state", "PENDIENTE")]
        ),
        1.0
    );

    // The database refuses a second approval for the order...
    let approve_both = || raw_move(db, "order_id = 'm-twice'", "APROBADO");
    let refused = approve_both().await;
    assert!(
        refused.is_err(),
        "one_approved_per_order and the settled states refuse it"
    );
    // ...and were those guards (the unique index, settled states held) ever
    // lost, the gauge would say so.
    db.exec(
        "DROP INDEX cobro.one_approved_per_order",
        "DROP INDEX one_approved_per_order",
        &[],
    )
    .await
    .unwrap();
    db.exec(
        "DROP TRIGGER hold_settled_states ON cobro.payment_attempts",
        "DROP TRIGGER hold_settled_states",
        &[],
    )
    .await
    .unwrap();
    assert_eq!(approve_both().await.unwrap(), 2);
    assert_eq!(db.store.gauges().await.unwrap().double_approved_orders, 1);
    let s = scrape(&web.url).await;
    assert_eq!(s.get("cobro_orders_double_approved", &[]), 1.0);
    assert_eq!(s.sum("cobro_attempts", &[("state", "APROBADO")]), 2.0);

    // Open reconciliation cases: resolved ones do not count.
    for (key, resolved) in [("case-open", false), ("case-done", true)] {
        let (pg, lite) = if resolved {
            (
                "INSERT INTO cobro.recon_cases (kind, dedupe_key, details, window_from, window_to, resolved_at, resolved_by, resolution_note)
                 VALUES ('double_charge', $1, '{}', now(), now(), now(), 'ana', 'refunded')",
                "INSERT INTO recon_cases (kind, dedupe_key, details, window_from, window_to, opened_at, resolved_at, resolved_by, resolution_note)
                 VALUES ('double_charge', ?1, '{}', 0, 0, 0, 0, 'ana', 'refunded')",
            )
        } else {
            (
                "INSERT INTO cobro.recon_cases (kind, dedupe_key, details, window_from, window_to)
                 VALUES ('double_charge', $1, '{}', now(), now())",
                "INSERT INTO recon_cases (kind, dedupe_key, details, window_from, window_to, opened_at)
                 VALUES ('double_charge', ?1, '{}', 0, 0, 0)",
            )
        };
        db.exec(pg, lite, &[key]).await.unwrap();
    }
    let s = scrape(&web.url).await;
    assert_eq!(s.get("cobro_recon_cases_open", &[]), 1.0);
    assert_eq!(
        s.get("cobro_escalations_open", &[]),
        1.0,
        "no attempt in EN_REVISION, one case"
    );

    // The database gone: the scrape still answers, and says so.
    db.store.close().await;
    let s = scrape(&web.url).await;
    assert_eq!(s.get("cobro_database_up", &[]), 0.0);
    assert_eq!(s.matching("cobro_attempts", &[]).count(), 0);

    web.stop().await;
}

#[test]
fn the_parser_reads_labels_escapes_and_special_values() {
    let s = parse(
        "# HELP x_total help text\n# TYPE x_total counter\nx_total{a=\"1\",b=\"q\\\"u,o=te\"} 3\nup 1\nh_bucket{le=\"+Inf\"} 2 1700000000\n",
    );
    assert_eq!(s.types["x_total"], "counter");
    assert_eq!(s.get("x_total", &[("a", "1"), ("b", "q\"u,o=te")]), 3.0);
    assert_eq!(s.get("up", &[]), 1.0);
    assert_eq!(s.get("h_bucket", &[("le", "+Inf")]), 2.0);
}

/// What an on-call watches, from the rows: how late the queue is, open
/// cases per kind, notices the app has not taken, when reconciliation last
/// succeeded.
async fn the_on_call_gauges_read_the_rows(db: &TestDb) {
    let web = web_on(&db.store).await;
    let s = scrape(&web.url).await;
    assert_eq!(s.get("cobro_due_lag_seconds", &[]), 0.0);
    assert_eq!(s.get("cobro_cases_open", &[("kind", "dispute")]), 0.0);
    assert_eq!(s.get("cobro_notices_pending", &[]), 0.0);
    assert_eq!(
        s.get("cobro_reconciliation_last_success_timestamp_seconds", &[]),
        0.0
    );

    // Nobody works the queue: a charge due now grows late.
    enqueue(&db.store, "oncall-late").await;
    // A decline with no retry left writes a notice the app has not taken.
    let id = enqueue(&db.store, "oncall-notice").await;
    let (a, _) = db.store.load(id).await.unwrap();
    let a = step(&db.store, &a, Event::Claim, None).await;
    step(&db.store, &a, Event::Declined, Some("stolen_card")).await;
    // A dispute case for finance.
    let window = cobro::recon::Window::day(chrono::Utc::now().date_naive());
    let dispute = cobro::recon::Finding {
        kind: cobro::recon::CaseKind::Dispute,
        dedupe_key: "dispute:dp_oncall".into(),
        order_id: Some("oncall-notice".into()),
        attempt_id: Some(id),
        gateway_ref: Some("dp_oncall".into()),
        details: serde_json::json!({}),
    };
    db.store.record_cases(&window, &[dispute]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let s = scrape(&web.url).await;
    assert!(
        s.get("cobro_due_lag_seconds", &[]) >= 1.0,
        "the late charge"
    );
    assert_eq!(s.get("cobro_cases_open", &[("kind", "dispute")]), 1.0);
    assert_eq!(s.get("cobro_cases_open", &[("kind", "double_charge")]), 0.0);
    assert_eq!(s.get("cobro_notices_pending", &[]), 1.0);
    web.stop().await;
}
