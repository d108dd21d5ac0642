//! A TCP proxy a test can cut: one process's way to the apiserver, so that one agent
//! can be partitioned from the control plane while everything else keeps talking to
//! it. Cutting closes every open connection and black-holes new ones (accepted, never
//! answered, as a dropped route looks to a client); restoring closes the black-holed
//! connections so that their clients retry at once, and forwards again. Retargeting
//! sends new connections elsewhere while open ones stay where they are, as a load
//! balancer in front of several apiservers does when one leaves it.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

use crate::error::Error;

struct Shared {
    /// Where new connections go.
    target: Mutex<SocketAddr>,
    cut: AtomicBool,
    stopped: AtomicBool,
    /// Both ends of every open forwarded connection by its number, to close on a cut
    /// (a connection's entry goes when it closes: a proxy holding thousands of watches
    /// keeps no descriptor of those gone).
    open: Mutex<HashMap<u64, [Arc<TcpStream>; 2]>>,
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
        let shared = Arc::new(Shared {
            target: Mutex::new(target),
            cut: AtomicBool::default(),
            stopped: AtomicBool::default(),
            open: Mutex::default(),
            held: Mutex::default(),
            accepted: AtomicU64::default(),
        });
        let s = shared.clone();
        thread::spawn(move || {
            for client in listener.incoming() {
                if s.stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let number = s.accepted.fetch_add(1, Ordering::SeqCst);
                if s.cut.load(Ordering::SeqCst) {
                    s.held.lock().unwrap().push(client);
                    continue;
                }
                let target = *s.target.lock().unwrap();
                let Ok(upstream) = TcpStream::connect(target) else {
                    continue;
                };
                forward(&s, number, client, upstream);
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
        for (_, ends) in self.shared.open.lock().unwrap().drain() {
            for s in ends {
                let _ = s.shutdown(Shutdown::Both);
            }
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

    /// Sends new connections to `target`; open ones stay with the old target until
    /// either end closes them.
    pub fn retarget(&self, target: SocketAddr) {
        *self.shared.target.lock().unwrap() = target;
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
/// The threads and the registry share each socket (two descriptors a connection: a
/// benchmark's proxy carries thousands of watches under a limit of open files).
fn forward(shared: &Arc<Shared>, number: u64, client: TcpStream, upstream: TcpStream) {
    let (client, upstream) = (Arc::new(client), Arc::new(upstream));
    shared
        .open
        .lock()
        .unwrap()
        .insert(number, [client.clone(), upstream.clone()]);
    let ends =
        |from: &Arc<TcpStream>, to: &Arc<TcpStream>| (from.clone(), to.clone(), shared.clone());
    for (from, to, s) in [ends(&client, &upstream), ends(&upstream, &client)] {
        copier(move || {
            copy(&from, &to);
            s.open.lock().unwrap().remove(&number);
        });
    }
}

/// A copying thread on a small stack (its buffer is 16 KiB): a benchmark's proxy
/// carries thousands of watches, two threads each.
fn copier(f: impl FnOnce() + Send + 'static) {
    let _ = thread::Builder::new().stack_size(128 * 1024).spawn(f);
}

fn copy(mut from: &TcpStream, mut to: &TcpStream) {
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

    /// A server that answers every connection with `tag` and closes it.
    fn tagged(tag: &'static [u8]) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        thread::spawn(move || {
            for mut s in l.incoming().flatten() {
                let _ = s.write_all(tag);
            }
        });
        addr
    }

    fn read_tag(addr: SocketAddr) -> Vec<u8> {
        let mut s = TcpStream::connect(addr).unwrap();
        let mut buf = [0u8; 1];
        s.read_exact(&mut buf).unwrap();
        buf.to_vec()
    }

    #[test]
    fn retargets_new_connections_and_leaves_open_ones() {
        let echoed = echo();
        let proxy = TcpProxy::start(echoed).unwrap();
        let mut open = TcpStream::connect(proxy.addr()).unwrap();
        assert_eq!(round_trip(&mut open).unwrap(), b"ping");
        proxy.retarget(tagged(b"b"));
        assert_eq!(read_tag(proxy.addr()), b"b");
        // The connection opened before still reaches the echo server.
        assert_eq!(round_trip(&mut open).unwrap(), b"ping");
        proxy.retarget(tagged(b"c"));
        assert_eq!(read_tag(proxy.addr()), b"c");
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
