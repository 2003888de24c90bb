//! Per-connection control for the simulator's HTTP server: a `Listener` for `axum::serve`
//! whose streams carry a `ConnKill` switch, handed to handlers through `ConnectInfo`, so a
//! handler can make its TCP connection vanish without a response; and the listening socket
//! itself, closed during a refusal window (see `refuse`) and bound again on the same address
//! after it.
//!
//! Invariant: once a connection is killed, not one more byte is read from or written to it
//! (every read/write on the stream fails, and on unix the socket is shut down at once, so
//! the peer sees the connection close before any response). Every live connection is in the
//! `Registry`; after `Registry::close` all of them, and any accepted later, are killed. While
//! the `Gate` refuses, no listening socket exists, and a connection accepted just before the
//! window began is cut as soon as it is registered.

use std::{
    collections::HashMap,
    io,
    net::SocketAddr,
    pin::Pin,
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use axum::{
    extract::connect_info::Connected,
    serve::{IncomingStream, Listener},
};
use futures::task::AtomicWaker;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::watch,
    time::Instant,
};
use tracing::{debug, info, warn};

use super::refuse::Gate;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A switch that drops one connection with no response. Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct ConnKill(Arc<KillInner>);

#[derive(Debug)]
struct KillInner {
    killed: AtomicBool,
    /// Killed by a refusal window (not by a fault of its own request, nor by shutdown).
    cut: AtomicBool,
    read_waker: AtomicWaker,
    write_waker: AtomicWaker,
    /// A duplicate of the socket's descriptor, used only to shut the socket down at once.
    #[cfg(unix)]
    os: Mutex<Option<std::net::TcpStream>>,
}

impl ConnKill {
    fn new(_stream: &TcpStream) -> Self {
        Self(Arc::new(KillInner {
            killed: AtomicBool::new(false),
            cut: AtomicBool::new(false),
            read_waker: AtomicWaker::new(),
            write_waker: AtomicWaker::new(),
            #[cfg(unix)]
            os: Mutex::new(os_handle(_stream)),
        }))
    }

    /// Drops the connection: no response will be written, the peer sees it close.
    pub(crate) fn kill(&self) {
        if self.0.killed.swap(true, Ordering::SeqCst) {
            return;
        }
        #[cfg(unix)]
        if let Some(os) = lock(&self.0.os).take()
            && let Err(e) = os.shutdown(std::net::Shutdown::Both)
        {
            debug!(error = %e, "sim: socket shutdown on kill failed");
        }
        self.0.read_waker.wake();
        self.0.write_waker.wake();
    }

    pub(crate) fn is_killed(&self) -> bool {
        self.0.killed.load(Ordering::SeqCst)
    }

    /// Kills the connection because a refusal window began.
    fn cut(&self) {
        self.0.cut.store(true, Ordering::SeqCst);
        self.kill();
    }

    /// Whether a refusal window cut this connection.
    pub(crate) fn was_cut(&self) -> bool {
        self.0.cut.load(Ordering::SeqCst)
    }

    fn same(&self, other: &ConnKill) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    #[cfg(unix)]
    fn release(&self) {
        lock(&self.0.os).take();
    }

    #[cfg(not(unix))]
    fn release(&self) {}
}

#[cfg(unix)]
fn os_handle(stream: &TcpStream) -> Option<std::net::TcpStream> {
    use std::os::fd::AsFd;
    match stream.as_fd().try_clone_to_owned() {
        Ok(fd) => Some(std::net::TcpStream::from(fd)),
        Err(e) => {
            debug!(error = %e, "sim: could not duplicate socket; kill relies on stream errors");
            None
        }
    }
}

impl Connected<IncomingStream<'_, SimListener>> for ConnKill {
    fn connect_info(stream: IncomingStream<'_, SimListener>) -> Self {
        stream.io().kill.clone()
    }
}

/// Every live connection, so shutdown can kill them all.
#[derive(Clone, Debug, Default)]
pub(crate) struct Registry(Arc<Mutex<RegistryInner>>);

#[derive(Debug, Default)]
struct RegistryInner {
    next_id: u64,
    live: HashMap<u64, ConnKill>,
    closed: bool,
}

impl Registry {
    fn register(&self, kill: &ConnKill) -> u64 {
        let mut inner = lock(&self.0);
        inner.next_id += 1;
        let id = inner.next_id;
        if inner.closed {
            kill.kill();
        } else {
            inner.live.insert(id, kill.clone());
        }
        id
    }

    fn deregister(&self, id: u64) {
        lock(&self.0).live.remove(&id);
    }

    /// Cuts every live connection but `except` (a refusal window began); returns how many.
    pub(crate) fn cut(&self, except: Option<&ConnKill>) -> usize {
        let live: Vec<ConnKill> = lock(&self.0)
            .live
            .values()
            .filter(|k| except.is_none_or(|e| !e.same(k)))
            .cloned()
            .collect();
        for kill in &live {
            kill.cut();
        }
        live.len()
    }

    /// Kills every live connection and every connection accepted from now on.
    pub(crate) fn close(&self) {
        let live: Vec<ConnKill> = {
            let mut inner = lock(&self.0);
            inner.closed = true;
            inner.live.drain().map(|(_, k)| k).collect()
        };
        debug!(connections = live.len(), "sim: killing live connections");
        for kill in live {
            kill.kill();
        }
    }
}

/// A `TcpListener` whose connections can be killed by their handlers, closed while the
/// gate refuses connections.
#[derive(Debug)]
pub(crate) struct SimListener {
    /// `None` during a refusal window (and until bound again after it).
    inner: Option<TcpListener>,
    addr: SocketAddr,
    registry: Registry,
    gate: Gate,
    refusals: watch::Receiver<Option<Instant>>,
}

impl SimListener {
    pub(crate) fn new(inner: TcpListener, registry: Registry, gate: Gate) -> io::Result<Self> {
        Ok(Self {
            addr: inner.local_addr()?,
            inner: Some(inner),
            registry,
            refusals: gate.subscribe(),
            gate,
        })
    }

    /// Closes the listening socket until the current refusal window ends (or is changed).
    /// Returns `false` at once when no window is open.
    async fn refuse(&mut self) -> bool {
        let until = *self.refusals.borrow_and_update();
        let Some(until) = until.filter(|u| *u > Instant::now()) else {
            return false;
        };
        if self.inner.take().is_some() {
            info!(addr = %self.addr, "sim: refusing connections (not listening)");
            self.gate.socket_closed();
        }
        tokio::select! {
            () = tokio::time::sleep_until(until) => {}
            _ = self.refusals.changed() => {}
        }
        true
    }

    /// The listening socket, bound again on the same address after a refusal window
    /// (`TcpListener::bind` sets `SO_REUSEADDR` on unix, so the old connections' sockets do
    /// not stand in the way). A failed bind is retried: the window lasts longer.
    async fn listen(&mut self) {
        while self.inner.is_none() {
            match TcpListener::bind(self.addr).await {
                Ok(listener) => {
                    info!(addr = %self.addr, "sim: listening again");
                    self.inner = Some(listener);
                }
                Err(e) => {
                    warn!(addr = %self.addr, error = %e, "sim: binding again failed; retrying");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    /// Wraps an accepted stream; cuts it when a refusal window began meanwhile.
    fn admit(&self, stream: TcpStream, addr: SocketAddr) -> KillableStream {
        if let Err(e) = stream.set_nodelay(true) {
            debug!(error = %e, "sim: set_nodelay failed");
        }
        let kill = ConnKill::new(&stream);
        let id = self.registry.register(&kill);
        // After registering: a window that began before this check is seen here, one that
        // begins after it cuts the registered connection.
        if self.gate.refusing(Instant::now()) {
            kill.cut();
        }
        debug!(%addr, conn = id, "sim: connection accepted");
        KillableStream {
            inner: stream,
            kill,
            id,
            registry: self.registry.clone(),
        }
    }
}

impl Listener for SimListener {
    type Io = KillableStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            if self.refuse().await {
                continue;
            }
            self.listen().await;
            let Some(listener) = &self.inner else {
                continue;
            };
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                // A refusal window began: close the socket.
                _ = self.refusals.changed() => continue,
            };
            match accepted {
                Ok((stream, addr)) => return (self.admit(stream, addr), addr),
                Err(e) => {
                    // Typically EMFILE/ENFILE: back off instead of spinning.
                    warn!(error = %e, "sim: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.addr)
    }
}

/// A `TcpStream` that fails every operation once its `ConnKill` fired.
#[derive(Debug)]
pub(crate) struct KillableStream {
    inner: TcpStream,
    kill: ConnKill,
    id: u64,
    registry: Registry,
}

fn killed_error() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "connection dropped by gateway simulator",
    )
}

impl Drop for KillableStream {
    fn drop(&mut self) {
        self.registry.deregister(self.id);
        self.kill.release();
    }
}

impl AsyncRead for KillableStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.kill.0.read_waker.register(cx.waker());
        if this.kill.is_killed() {
            return Poll::Ready(Err(killed_error()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for KillableStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.kill.0.write_waker.register(cx.waker());
        if this.kill.is_killed() {
            return Poll::Ready(Err(killed_error()));
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.kill.0.write_waker.register(cx.waker());
        if this.kill.is_killed() {
            return Poll::Ready(Err(killed_error()));
        }
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.kill.is_killed() {
            return Poll::Ready(Err(killed_error()));
        }
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.kill.is_killed() {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}
