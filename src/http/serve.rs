//! The server loop under every cobro listener: hyper's HTTP/1.1 connection
//! with its timer (so the header-read timeout works), tower-http's request
//! and body timeouts, and limits on open connections, in total and per
//! client address ([`super::admit`]).
//!
//! At capacity a connection is never parked: one waiting in the kernel's
//! backlog looks, to its client and to a load balancer's health check,
//! exactly like a dead server, and slow clients holding every slot would
//! make it so. Instead a small overflow pool takes the connections beyond
//! the limits: each shows its request line within a short while; a health
//! or readiness probe (`GET /health`, `GET /ready`) is served on it (one
//! request, a short header deadline), anything else gets `503` with
//! `Retry-After: 1` and is closed. So `/health` answers within a second
//! while every slot is held by slow clients, and a client that is turned
//! away learns it at once rather than after a timeout. Probes are let
//! through rather than answered here because a probe's answer must say
//! what the route says (the database's state), not merely that the process
//! is up. The per-client cap counts the socket's peer address: behind a
//! reverse proxy that is the proxy's (X-Forwarded-For is not trusted).
//!
//! Invariant: a client cannot hold a connection by trickling headers (the
//! header-read timeout also bounds an idle keep-alive connection), nor a
//! request by trickling its body (the body timeout between chunks and the
//! request timeout overall); at most `max_connections` are served at once,
//! at most `max_connections_per_client` from one address, and
//! [`admit::OVERFLOW`](super::admit::OVERFLOW) more are being probed or
//! refused; the accept loop never waits for a slot. Shutdown stops
//! accepting, lets requests in flight finish, and gives up after a grace.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use clap::Args;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tower_http::timeout::{RequestBodyTimeoutLayer, TimeoutLayer};
use tracing::{debug, info, warn};

use super::admit::{self, Admission, Admit};
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
    /// Connections served at once at most; past it a new one gets 503
    /// with Retry-After at once (a /health or /ready probe is still served).
    #[arg(long, env = "COBRO_MAX_CONNECTIONS", default_value_t = 512)]
    pub max_connections: usize,
    /// Connections served at once from one client address at most; past it
    /// that address gets 503. Behind a reverse proxy every connection comes
    /// from the proxy: raise it to COBRO_MAX_CONNECTIONS there.
    #[arg(long, env = "COBRO_MAX_CONNECTIONS_PER_CLIENT", default_value_t = 64)]
    pub max_connections_per_client: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(10),
            max_connections: 512,
            max_connections_per_client: 64,
        }
    }
}

impl HttpLimits {
    pub fn check(&self) -> Result<(), String> {
        if self.max_connections == 0 {
            return Err("COBRO_MAX_CONNECTIONS must be at least 1".into());
        }
        if self.max_connections_per_client == 0 {
            return Err("COBRO_MAX_CONNECTIONS_PER_CLIENT must be at least 1".into());
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
        ))
        .layer(axum::middleware::map_response(super::headers::safe));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_header_size(MAX_HEAD_BYTES);
    // A probe on an overflow connection: one request, its head promptly.
    let sniff_for = limits.header_read_timeout.min(admit::SNIFF);
    let mut probe = http.clone();
    probe
        .keep_alive(false)
        .header_read_timeout(limits.header_read_timeout.min(Duration::from_secs(1)));
    let admission = Admission::new(limits.max_connections, limits.max_connections_per_client);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
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
        match admission.admit(peer.ip()) {
            Admit::Serve(ticket) => {
                let service = TowerToHyperService::new(router.clone());
                let conn = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        debug!(%peer, error = %e, "connection closed with an error");
                    }
                    drop(ticket);
                });
            }
            Admit::Overflow(permit, full) => {
                debug!(%peer, ?full, "over the connection limit");
                let (router, probe) = (router.clone(), probe.clone());
                tokio::spawn(async move {
                    admit::overflow(stream, full, router, probe, sniff_for).await;
                    drop(permit);
                });
            }
            Admit::Close => debug!(%peer, "over every connection limit: closed"),
        }
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
