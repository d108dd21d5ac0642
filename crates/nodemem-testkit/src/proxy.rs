//! A TCP proxy a test can cut: one process's way to the apiserver, so that one agent
//! can be partitioned from the control plane while everything else keeps talking to
//! it. Cutting closes every open connection and black-holes new ones (accepted, never
//! answered, as a dropped route looks to a client); restoring closes the black-holed
//! connections so that their clients retry at once, and forwards again.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

use crate::error::Error;

#[derive(Default)]
struct Shared {
    cut: AtomicBool,
    stopped: AtomicBool,
    /// Both ends of every forwarded connection, to close on a cut.
    open: Mutex<Vec<TcpStream>>,
    /// Connections accepted while cut, held unanswered.
    held: Mutex<Vec<TcpStream>>,
    /// Connections accepted in all.
    accepted: AtomicU64,
}

/// A proxy on 127.0.0.1 to one target, stopped when dropped.
pub struct TcpProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl TcpProxy {
    /// Listens on a free port of 127.0.0.1 and forwards to `target`.
    pub fn start(target: SocketAddr) -> Result<TcpProxy, Error> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .map_err(|e| Error::Setup(format!("proxy listen: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::Setup(format!("proxy address: {e}")))?;
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        thread::spawn(move || {
            for client in listener.incoming() {
                if s.stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                s.accepted.fetch_add(1, Ordering::SeqCst);
                if s.cut.load(Ordering::SeqCst) {
                    s.held.lock().unwrap().push(client);
                    continue;
                }
                let Ok(upstream) = TcpStream::connect(target) else {
                    continue;
                };
                forward(&s, client, upstream);
            }
        });
        Ok(TcpProxy { addr, shared })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `https://` URL of the proxy, for a kubeconfig's `server`.
    pub fn https_url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// Cuts the way: open connections are closed, new ones are held unanswered.
    pub fn cut(&self) {
        self.shared.cut.store(true, Ordering::SeqCst);
        for s in self.shared.open.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Restores the way: held connections are closed (their clients retry), new ones
    /// are forwarded.
    pub fn restore(&self) {
        self.shared.cut.store(false, Ordering::SeqCst);
        for s in self.shared.held.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Connections accepted so far (a client that retried shows here).
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        self.cut();
        self.restore();
        // Wakes the accept loop so that it sees `stopped`.
        let _ = TcpStream::connect(self.addr);
    }
}

/// Copies both ways on two threads; both ends are registered to be closed by a cut.
fn forward(shared: &Arc<Shared>, client: TcpStream, upstream: TcpStream) {
    let pairs = (
        client.try_clone(),
        upstream.try_clone(),
        client.try_clone(),
        upstream.try_clone(),
    );
    let (Ok(c2), Ok(u2), Ok(c3), Ok(u3)) = pairs else {
        return;
    };
    shared.open.lock().unwrap().extend([c3, u3]);
    thread::spawn(move || copy(client, u2));
    thread::spawn(move || copy(upstream, c2));
}

fn copy(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// An echo server on a free port.
    fn echo() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        thread::spawn(move || {
            for s in l.incoming().flatten() {
                thread::spawn(move || {
                    let mut r = s.try_clone().unwrap();
                    let mut w = s;
                    let _ = std::io::copy(&mut r, &mut w);
                });
            }
        });
        addr
    }

    fn round_trip(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
        s.write_all(b"ping")?;
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf)?;
        Ok(buf.to_vec())
    }

    #[test]
    fn forwards_cuts_and_restores() {
        let proxy = TcpProxy::start(echo()).unwrap();
        let mut a = TcpStream::connect(proxy.addr()).unwrap();
        assert_eq!(round_trip(&mut a).unwrap(), b"ping");

        proxy.cut();
        // The open connection is closed.
        assert!(round_trip(&mut a).is_err());
        // A new one is accepted and never answered.
        let mut b = TcpStream::connect(proxy.addr()).unwrap();
        b.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let err = round_trip(&mut b).unwrap_err();
        assert!(
            matches!(
                err.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "{err}"
        );

        proxy.restore();
        // The held connection is closed, so its client retries; a new one works.
        b.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert!(round_trip(&mut b).is_err());
        let mut c = TcpStream::connect(proxy.addr()).unwrap();
        assert_eq!(round_trip(&mut c).unwrap(), b"ping");
        assert_eq!(proxy.accepted(), 3);
    }
}
