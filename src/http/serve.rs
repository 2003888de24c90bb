//! The server loop under every cobro listener: hyper's HTTP/1.1 connection
//! with its timer (so the header-read timeout works), tower-http's request
//! and body timeouts, and a limit on open connections.
//!
//! Invariant: a client cannot hold a connection by trickling headers (the
//! header-read timeout also bounds an idle keep-alive connection), nor a
//! request by trickling its body (the body timeout between chunks and the
//! request timeout overall); at most `max_connections` are open at once,
//! the next ones waiting in the kernel's backlog. Shutdown stops
//! accepting, lets requests in flight finish, and gives up after a grace.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use clap::Args;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower_http::timeout::{RequestBodyTimeoutLayer, TimeoutLayer};
use tracing::{debug, info, warn};

use crate::backoff::parse_duration_arg as duration;

/// The largest request head (request line and headers) accepted; larger
/// gets 431.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

/// Timeouts and limits of a listener, as flags or environment variables.
#[derive(Debug, Clone, Args)]
pub struct HttpLimits {
    /// A client must send a request's whole head within this (also how
    /// long an idle keep-alive connection stays open).
    #[arg(long, env = "COBRO_HEADER_READ_TIMEOUT", default_value = "10s", value_parser = duration)]
    pub header_read_timeout: Duration,
    /// A request must be answered within this, body included; else 408.
    #[arg(long, env = "COBRO_REQUEST_TIMEOUT", default_value = "30s", value_parser = duration)]
    pub request_timeout: Duration,
    /// The longest pause allowed between two chunks of a request body.
    #[arg(long, env = "COBRO_BODY_TIMEOUT", default_value = "10s", value_parser = duration)]
    pub body_timeout: Duration,
    /// Open connections at most; more wait to be accepted.
    #[arg(long, env = "COBRO_MAX_CONNECTIONS", default_value_t = 512)]
    pub max_connections: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(10),
            max_connections: 512,
        }
    }
}

impl HttpLimits {
    pub fn check(&self) -> Result<(), String> {
        if self.max_connections == 0 {
            return Err("COBRO_MAX_CONNECTIONS must be at least 1".into());
        }
        for (name, d) in [
            ("COBRO_HEADER_READ_TIMEOUT", self.header_read_timeout),
            ("COBRO_REQUEST_TIMEOUT", self.request_timeout),
            ("COBRO_BODY_TIMEOUT", self.body_timeout),
        ] {
            if d.is_zero() {
                return Err(format!("{name} must be more than 0"));
            }
        }
        Ok(())
    }
}

/// Serves `router` on `listener` with `limits` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: &HttpLimits,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let router = router
        .layer(RequestBodyTimeoutLayer::new(limits.body_timeout))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            limits.request_timeout,
        ));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_header_size(MAX_HEAD_BYTES);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => p.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let (stream, peer): (_, SocketAddr) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: wait, do not spin.
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let conn = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                debug!(%peer, error = %e, "connection closed with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    let grace = limits.request_timeout + Duration::from_secs(1);
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(grace) => {
            info!(?grace, "connections still open after the grace period: closing them");
        }
    }
    Ok(())
}
