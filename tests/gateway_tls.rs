//! The gateway over HTTPS, and `GATEWAY_URL` refused at start-up.
//!
//! A private CA made here (rcgen) signs a certificate for 127.0.0.1; a TLS
//! terminator in this file (tokio-rustls) forwards to the real gateway
//! simulator. A real `cobro-worker` process that trusts the CA through
//! `COBRO_GATEWAY_CA_FILE` charges through `https://` to `APROBADO`; the same
//! client without the CA refuses the certificate, so the charge never leaves.
//! A `GATEWAY_URL` the client cannot use (`ftp://…`, no scheme) or a CA file
//! without certificates stops `cobro-worker` and `cobro reconcile` at
//! start-up, naming the setting, before the database is even opened.

#[macro_use]
mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cobro::domain::{Amount, ChargeRequest, Currency, IdempotencyKey, OrderId};
use cobro::gateway::{ChargeCall, ChargeOutcome, Gateway, HttpGateway, HttpGatewayConfig};
use cobro::sim::{Faults, SimHandle};
use cobro::state::State;
use common::*;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use uuid::Uuid;

on_both_dbs!(a_worker_charges_through_https_trusting_a_private_ca,);

/// A private CA and a server certificate it signed for `127.0.0.1` and
/// `localhost`, in a temp dir: `ca.pem` is what the worker is told to trust.
struct PrivateCa {
    dir: PathBuf,
    ca_pem: PathBuf,
    server: Arc<rustls::ServerConfig>,
}

impl PrivateCa {
    fn new() -> PrivateCa {
        use rcgen::{
            BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair,
            KeyUsagePurpose,
        };
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "cobro test private CA");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();

        let mut leaf_params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
        leaf_params
            .distinguished_name
            .push(DnType::CommonName, "gateway (test)");
        let leaf_key = KeyPair::generate().unwrap();
        let leaf = leaf_params.signed_by(&leaf_key, &ca).unwrap();

        let dir = std::env::temp_dir().join(format!("cobro-tls-{}", Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca_pem = dir.join("ca.pem");
        std::fs::write(&ca_pem, ca.pem()).unwrap();

        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into());
        let server = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der().clone()], key)
        .expect("server certificate");
        PrivateCa {
            dir,
            ca_pem,
            server: Arc::new(server),
        }
    }
}

impl Drop for PrivateCa {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Terminates TLS on 127.0.0.1 and forwards the plain bytes to the
/// simulator, one TCP connection per TLS connection.
struct Terminator {
    url: String,
    task: JoinHandle<()>,
}

impl Terminator {
    async fn start(server: Arc<rustls::ServerConfig>, sim: &SimHandle) -> Terminator {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind TLS");
        let url = format!("https://{}", listener.local_addr().unwrap());
        let acceptor = TlsAcceptor::from(server);
        let upstream = sim.addr;
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    // A client that refuses our certificate ends here.
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let Ok(mut plain) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                });
            }
        });
        Terminator { url, task }
    }
}

impl Drop for Terminator {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `cobro-worker` with the test settings and `env` on top; its log goes to
/// a file (printed when a test fails).
fn spawn_worker(db_url: &str, env: &[(&str, &str)]) -> (Child, PathBuf) {
    let log = std::env::temp_dir().join(format!("cobro-tls-{}.log", Uuid::new_v4().simple()));
    let mut cmd = bare_worker(db_url);
    cmd.env("RUST_LOG", "info")
        .env("COBRO_GATEWAY", "sim")
        .env(
            "COBRO_WORKER_NAME",
            format!("tls-{}", Uuid::new_v4().simple()),
        )
        .env("COBRO_LEASE_TTL", "3s")
        .env("COBRO_GATEWAY_CONNECT_TIMEOUT", "500ms")
        .env("COBRO_GATEWAY_TIMEOUT", "1500ms")
        .env("COBRO_CHECK_SCHEDULE", "200ms,400ms,800ms,1600ms,3200ms")
        .env("COBRO_RECONCILE_AT", "off");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("worker log file"))
        .spawn()
        .expect("spawn cobro-worker");
    (child, log)
}

async fn wait_exit(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("the process did not exit within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn read(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

async fn a_worker_charges_through_https_trusting_a_private_ca(db: &TestDb) {
    let sim = start_sim(true, Faults::default()).await;
    let ca = PrivateCa::new();
    let tls = Terminator::start(ca.server.clone(), &sim).await;
    assert!(tls.url.starts_with("https://127.0.0.1:"), "{}", tls.url);

    let ca_file = ca.ca_pem.to_str().unwrap();
    let (mut worker, log) = spawn_worker(
        &db.url,
        &[
            ("GATEWAY_URL", &tls.url),
            ("COBRO_GATEWAY_CA_FILE", ca_file),
        ],
    );
    let req = ChargeRequest::parse("order-tls", 4_200, "EUR", None, None).unwrap();
    let id = db.store.enqueue(&req).await.unwrap().attempt_id;
    let done = eventually(
        Duration::from_secs(20),
        "the charge through https",
        || async {
            let (a, _) = db.store.load(id).await.unwrap();
            if a.state == State::Desconocido {
                panic!("the https call failed:\n{}", read(&log));
            }
            (a.state == State::Aprobado).then_some(a)
        },
    )
    .await;
    assert_eq!(done.send_count, 1);
    let history = db.store.transitions(id).await.unwrap();
    let approved = history.last().unwrap();
    assert_eq!(approved.to_state, "APROBADO");
    assert_eq!(approved.http_status, Some(200), "{approved:?}");
    let ledger = ledger(&sim.url()).await;
    assert_eq!(ledger.entries.len(), 1, "one charge reached the gateway");
    assert_eq!(ledger.entries[0].order_id, "order-tls");
    assert_eq!(
        done.gateway_charge_id.as_deref(),
        Some(ledger.entries[0].charge_id.as_str())
    );

    let kill = Command::new("kill")
        .args(["-TERM", &worker.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = wait_exit(&mut worker, Duration::from_secs(15)).await;
    assert!(status.success(), "exit {status}:\n{}", read(&log));
    let _ = std::fs::remove_file(&log);
    sim.shutdown().await;
}

fn call(order: &str) -> ChargeCall {
    ChargeCall {
        key: IdempotencyKey::generate(),
        attempt_id: None,
        order_id: OrderId::parse(order).unwrap(),
        amount: Amount::parse(1_000).unwrap(),
        currency: Currency::parse("USD").unwrap(),
        payment_method: None,
        customer: None,
        gateway_ref: None,
        merchant_initiated: false,
    }
}

fn client(url: &str, ca_file: Option<&Path>) -> HttpGateway {
    HttpGateway::new(HttpGatewayConfig {
        base_url: url.into(),
        connect_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_millis(1500),
        ca_file: ca_file.map(Path::to_owned),
    })
    .expect("gateway client")
}

#[tokio::test]
async fn without_the_private_ca_the_certificate_is_refused_and_nothing_is_charged() {
    let sim = start_sim(true, Faults::default()).await;
    let ca = PrivateCa::new();
    let tls = Terminator::start(ca.server.clone(), &sim).await;

    // Only the public roots: the private CA's certificate is not trusted,
    // the handshake fails before the request is written: not sent (never a
    // decline, and nothing to look up).
    let untrusted = client(&tls.url, None).charge(&call("o-untrusted")).await;
    let ChargeOutcome::Deferred {
        why: cobro::gateway::Deferral::NotSent,
        evidence,
        ..
    } = &untrusted
    else {
        panic!("an untrusted certificate must not pass: {untrusted:?}");
    };
    assert_eq!(evidence.http_status, None, "{evidence:?}");
    assert!(ledger(&sim.url()).await.entries.is_empty());

    // The same gateway with the CA file: approved.
    let trusted = client(&tls.url, Some(&ca.ca_pem))
        .charge(&call("o-trusted"))
        .await;
    assert!(
        matches!(trusted, ChargeOutcome::Approved { .. }),
        "{trusted:?}"
    );
    assert_eq!(ledger(&sim.url()).await.entries.len(), 1);
    sim.shutdown().await;
}

/// A SQLite URL in a fresh temp dir, and the database file it would create.
fn unopened_sqlite() -> (String, PathBuf) {
    let dir = std::env::temp_dir().join(format!("cobro-badurl-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("cobro.db");
    (format!("sqlite://{}", file.display()), file)
}

#[tokio::test]
async fn a_gateway_url_that_cannot_be_used_stops_cobro_worker_at_start_up() {
    for (url, says) in [
        (
            "ftp://cobro:s3cret-pw@127.0.0.1:8089",
            "http:// or https://",
        ),
        ("127.0.0.1:8089", "not a URL"),
        ("localhost:8089", "http:// or https://"),
        ("http://", "not a URL"),
    ] {
        let (db_url, db_file) = unopened_sqlite();
        let (mut worker, log) = spawn_worker(&db_url, &[("GATEWAY_URL", url)]);
        let status = wait_exit(&mut worker, Duration::from_secs(15)).await;
        let stderr = read(&log);
        assert!(!status.success(), "{url}: it started\n{stderr}");
        assert!(stderr.contains("GATEWAY_URL"), "{url}: {stderr}");
        assert!(stderr.contains(says), "{url}: {stderr}");
        assert!(
            !stderr.contains("s3cret"),
            "{url}: a password leaked: {stderr}"
        );
        assert!(
            !db_file.exists(),
            "{url}: refused before the database was opened"
        );
        let _ = std::fs::remove_file(&log);
        let _ = std::fs::remove_dir_all(db_file.parent().unwrap());
    }
}

#[tokio::test]
async fn a_ca_file_without_certificates_stops_cobro_worker_at_start_up() {
    let (db_url, db_file) = unopened_sqlite();
    let bad = db_file.with_file_name("not-a-ca.pem");
    std::fs::write(&bad, "this is not a certificate\n").unwrap();
    let (mut worker, log) = spawn_worker(
        &db_url,
        &[
            ("GATEWAY_URL", "https://127.0.0.1:8089"),
            ("COBRO_GATEWAY_CA_FILE", bad.to_str().unwrap()),
        ],
    );
    let status = wait_exit(&mut worker, Duration::from_secs(15)).await;
    let stderr = read(&log);
    assert!(!status.success(), "it started\n{stderr}");
    assert!(
        stderr.contains("COBRO_GATEWAY_CA_FILE") && stderr.contains("no PEM certificate"),
        "{stderr}"
    );
    assert!(!db_file.exists());
    let _ = std::fs::remove_file(&log);
    let _ = std::fs::remove_dir_all(db_file.parent().unwrap());
}

#[test]
fn cobro_reconcile_refuses_a_gateway_url_that_cannot_be_used() {
    let (db_url, db_file) = unopened_sqlite();
    let out = Command::new(env!("CARGO_BIN_EXE_cobro"))
        .args(["reconcile", "--from", "2026-11-30", "--to", "2026-12-01"])
        .env("DATABASE_URL", &db_url)
        .env("GATEWAY_URL", "ftp://127.0.0.1:8089")
        .output()
        .expect("run cobro reconcile");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("GATEWAY_URL") && stderr.contains("http:// or https://"),
        "{stderr}"
    );
    assert!(!db_file.exists(), "refused before the database was opened");
    let _ = std::fs::remove_dir_all(db_file.parent().unwrap());
}
