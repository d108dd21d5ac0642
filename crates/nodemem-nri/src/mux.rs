//! NRI's multiplexer (containerd/nri pkg/net/multiplex): one stream carries logical
//! connections as frames of a 4-byte big-endian connection ID, a 4-byte big-endian
//! payload length and the payload. Connection 1 is the plugin service (the runtime is
//! the ttrpc client, the plugin serves), connection 2 the runtime service (the plugin
//! calls). Opening a connection sends nothing: both ends assume the same IDs.
//!
//! [`split`] turns the trunk into one in-memory duplex stream per connection, so an
//! unmodified ttrpc server and client run on them.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream, WriteHalf};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

pub const PLUGIN_SERVICE_CONN: u32 = 1;
pub const RUNTIME_SERVICE_CONN: u32 = 2;

/// The most payload bytes sent in one frame. The Go side hands a frame whole to one
/// `Read`, and its ttrpc reads through a 4 KiB `bufio.Reader`: a larger frame fails
/// that read with ENOMEM (`conn.Read`: `cap(buf) < len(msg)`).
pub const MAX_FRAME_PAYLOAD: usize = 4096;
/// The largest frame accepted: a ttrpc header and its largest message (NRI's
/// `maxPayloadSize`).
pub const MAX_INCOMING_PAYLOAD: usize = 10 + (4 << 20);
/// Bytes buffered per connection between the trunk and ttrpc.
const PIPE_CAPACITY: usize = 256 * 1024;

/// Why the trunk's reader stopped.
#[derive(Debug, thiserror::Error)]
pub enum TrunkEnd {
    #[error("the runtime closed the connection")]
    Closed,
    #[error("reading the NRI connection failed: {0}")]
    Read(#[source] io::Error),
    #[error("the runtime sent a frame of {0} bytes, over NRI's limit of {MAX_INCOMING_PAYLOAD}")]
    Oversized(usize),
}

/// The two connections of one trunk, and the task that reads it.
pub struct Mux {
    pub plugin_service: DuplexStream,
    pub runtime_service: DuplexStream,
    /// Ends when the trunk is closed or broken; its writers stop with it.
    pub reader: JoinHandle<TrunkEnd>,
}

/// Splits `trunk` into the plugin and runtime service connections.
pub fn split<S>(trunk: S) -> Mux
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (trunk_in, trunk_out) = tokio::io::split(trunk);
    let trunk_out = Arc::new(Mutex::new(trunk_out));
    let mut inbound = HashMap::new();
    let mut writers = Vec::new();
    let mut services = Vec::new();
    for id in [PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN] {
        let (ours, theirs) = tokio::io::duplex(PIPE_CAPACITY);
        let (from_ttrpc, to_ttrpc) = tokio::io::split(ours);
        inbound.insert(id, to_ttrpc);
        writers.push(tokio::spawn(send_frames(id, from_ttrpc, trunk_out.clone())));
        services.push(theirs);
    }
    let reader = tokio::spawn(async move {
        let end = receive_frames(trunk_in, inbound).await;
        for w in writers {
            w.abort();
        }
        end
    });
    let runtime_service = services.pop().expect("two connections");
    let plugin_service = services.pop().expect("two connections");
    Mux {
        plugin_service,
        runtime_service,
        reader,
    }
}

/// Encodes one frame's header.
pub fn frame_header(id: u32, len: usize) -> [u8; 8] {
    let mut header = [0u8; 8];
    header[..4].copy_from_slice(&id.to_be_bytes());
    header[4..].copy_from_slice(&(len as u32).to_be_bytes());
    header
}

/// What ttrpc writes on connection `id`, framed onto the trunk in frames of at most
/// [`MAX_FRAME_PAYLOAD`] bytes.
async fn send_frames<R, W>(id: u32, mut from_ttrpc: R, trunk: Arc<Mutex<W>>) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut frame = vec![0u8; 8 + MAX_FRAME_PAYLOAD];
    loop {
        let n = from_ttrpc.read(&mut frame[8..]).await?;
        if n == 0 {
            return Ok(());
        }
        frame[..8].copy_from_slice(&frame_header(id, n));
        let mut out = trunk.lock().await;
        out.write_all(&frame[..8 + n]).await?;
        out.flush().await?;
    }
}

/// Frames from the trunk, their payloads handed to their connection's ttrpc; frames
/// for a connection nobody opened are dropped (as NRI's mux does).
async fn receive_frames<R, W>(mut trunk: R, mut inbound: HashMap<u32, WriteHalf<W>>) -> TrunkEnd
where
    R: AsyncRead + Unpin,
    W: AsyncRead + AsyncWrite,
{
    let mut header = [0u8; 8];
    let mut payload = Vec::new();
    loop {
        if let Err(e) = trunk.read_exact(&mut header).await {
            return match e.kind() {
                io::ErrorKind::UnexpectedEof => TrunkEnd::Closed,
                _ => TrunkEnd::Read(e),
            };
        }
        let id = u32::from_be_bytes(header[..4].try_into().expect("4 bytes"));
        let len = u32::from_be_bytes(header[4..].try_into().expect("4 bytes")) as usize;
        if len > MAX_INCOMING_PAYLOAD {
            return TrunkEnd::Oversized(len);
        }
        payload.resize(len, 0);
        if let Err(e) = trunk.read_exact(&mut payload).await {
            return TrunkEnd::Read(e);
        }
        if let Some(conn) = inbound.get_mut(&id) {
            // ttrpc went away on this connection: the session is over.
            if conn.write_all(&payload).await.is_err() {
                return TrunkEnd::Closed;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads one frame off the far end of a trunk.
    async fn frame(peer: &mut DuplexStream) -> (u32, Vec<u8>) {
        let mut header = [0u8; 8];
        peer.read_exact(&mut header).await.unwrap();
        let id = u32::from_be_bytes(header[..4].try_into().unwrap());
        let len = u32::from_be_bytes(header[4..].try_into().unwrap()) as usize;
        let mut payload = vec![0; len];
        peer.read_exact(&mut payload).await.unwrap();
        (id, payload)
    }

    #[tokio::test]
    async fn writes_are_framed_per_connection_in_4k_pieces() {
        let (trunk, mut peer) = tokio::io::duplex(1 << 20);
        let mut mux = split(trunk);
        let big: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        mux.runtime_service.write_all(&big).await.unwrap();
        let mut got = Vec::new();
        while got.len() < big.len() {
            let (id, payload) = frame(&mut peer).await;
            assert_eq!(id, RUNTIME_SERVICE_CONN);
            assert!(
                payload.len() <= MAX_FRAME_PAYLOAD,
                "{} bytes",
                payload.len()
            );
            got.extend(payload);
        }
        assert_eq!(got, big);
        mux.plugin_service.write_all(b"hello").await.unwrap();
        assert_eq!(
            frame(&mut peer).await,
            (PLUGIN_SERVICE_CONN, b"hello".to_vec())
        );
    }

    #[tokio::test]
    async fn frames_reach_their_connection_and_unknown_ones_are_dropped() {
        let (trunk, mut peer) = tokio::io::duplex(1 << 20);
        let mut mux = split(trunk);
        for (id, payload) in [
            (7u32, &b"nobody"[..]),
            (2, b"runtime"),
            (1, b"plug"),
            (1, b"in"),
        ] {
            peer.write_all(&frame_header(id, payload.len()))
                .await
                .unwrap();
            peer.write_all(payload).await.unwrap();
        }
        let mut buf = [0u8; 6];
        mux.plugin_service.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"plugin");
        let mut buf = [0u8; 7];
        mux.runtime_service.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"runtime");
        drop(peer);
        assert!(matches!(mux.reader.await.unwrap(), TrunkEnd::Closed));
        // The connections see the end too.
        assert_eq!(mux.plugin_service.read(&mut buf).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn an_oversized_frame_ends_the_trunk() {
        let (trunk, mut peer) = tokio::io::duplex(1 << 20);
        let mux = split(trunk);
        peer.write_all(&frame_header(1, MAX_INCOMING_PAYLOAD + 1))
            .await
            .unwrap();
        assert!(matches!(
            mux.reader.await.unwrap(),
            TrunkEnd::Oversized(n) if n == MAX_INCOMING_PAYLOAD + 1
        ));
    }
}
