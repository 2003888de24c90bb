//! Per-connection control for the simulator's HTTP server: a `Listener` for `axum::serve`
//! whose streams carry a `ConnKill` switch, handed to handlers through `ConnectInfo`, so a
//! handler can make its TCP connection vanish without a response.
//!
//! Invariant: once a connection is killed, not one more byte is read from or written to it
//! (every read/write on the stream fails, and on unix the socket is shut down at once, so
//! the peer sees the connection close before any response). Every live connection is in the
//! `Registry`; after `Registry::close` all of them, and any accepted later, are killed.

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
};
use tracing::{debug, warn};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A switch that drops one connection with no response. Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct ConnKill(Arc<KillInner>);

#[derive(Debug)]
struct KillInner {
    killed: AtomicBool,
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

/// A `TcpListener` whose connections can be killed by their handlers.
#[derive(Debug)]
pub(crate) struct SimListener {
    inner: TcpListener,
    registry: Registry,
}

impl SimListener {
    pub(crate) fn new(inner: TcpListener, registry: Registry) -> Self {
        Self { inner, registry }
    }
}

impl Listener for SimListener {
    type Io = KillableStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.inner.accept().await {
                Ok((stream, addr)) => {
                    if let Err(e) = stream.set_nodelay(true) {
                        debug!(error = %e, "sim: set_nodelay failed");
                    }
                    let kill = ConnKill::new(&stream);
                    let id = self.registry.register(&kill);
                    debug!(%addr, conn = id, "sim: connection accepted");
                    let io = KillableStream {
                        inner: stream,
                        kill,
                        id,
                        registry: self.registry.clone(),
                    };
                    return (io, addr);
                }
                Err(e) => {
                    // Typically EMFILE/ENFILE: back off instead of spinning.
                    warn!(error = %e, "sim: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
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
