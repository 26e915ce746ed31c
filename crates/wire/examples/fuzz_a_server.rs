//! Fuzzing a PostgreSQL-speaking server (yours, a proxy, or PostgreSQL itself) with
//! pgyard-wire's generators: each input becomes a burst of well-formed but adversarial
//! frontend messages ([`OwnedFrontend`]) sent after a trust login. The server passes when
//! everything it answers is a message a client can read, and it either reaches the
//! ReadyForQuery after a closing Sync and marker query or closes after saying why (an
//! ErrorResponse); and it must still take the next connection.
//!
//! ```sh
//! cargo run -p pgyard-wire --features arbitrary --example fuzz_a_server -- 127.0.0.1:5432 postgres 500
//! ```
//!
//! Here the inputs are seeded random bytes; in a cargo-fuzz target, pass libFuzzer's `data` to
//! [`probe`] instead (docs/fuzzing.md shows the dozen lines).

use std::error::Error;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};
use bytes::BytesMut;
use pgyard_wire::arb::OwnedFrontend;
use pgyard_wire::backend::{Authentication, BackendMessage};
use pgyard_wire::frame::{Decoded, Frame, FrameDecoder, Limits, ProtocolVersion, Unit};
use pgyard_wire::frontend;

/// Every error of the example, as text.
pub type Result<T> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

/// The query that marks the end of a burst.
const MARKER: &[u8] = b"select 'pgyard fuzz end'";

/// Messages per burst at most: enough to reach odd states, few enough to stay fast.
const BURST_MAX: usize = 64;

/// What one probe saw.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Messages sent after the login (the closing Sync and marker not counted).
    pub sent: usize,
    /// Messages the server answered, all readable.
    pub replies: usize,
    /// The server closed the connection (after an ErrorResponse) instead of reaching the marker.
    pub closed: bool,
}

/// A connection after its trust login.
struct Conn {
    stream: TcpStream,
    decoder: FrameDecoder,
}

impl Conn {
    fn login(addr: &str, user: &str) -> Result<Conn> {
        let mut stream = TcpStream::connect(addr)?;
        // A server that stops answering is a finding, not a hang.
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut b = BytesMut::new();
        let params: [(&[u8], &[u8]); 2] =
            [(b"user", user.as_bytes()), (b"database", user.as_bytes())];
        frontend::encode_startup(ProtocolVersion::V3_0, &params, &mut b)?;
        stream.write_all(&b)?;
        let mut conn = Conn {
            stream,
            decoder: FrameDecoder::backend(Limits::libpq_client()),
        };
        loop {
            let Some(f) = conn.next()? else {
                return Err("the server closed the connection during the login".into());
            };
            match BackendMessage::decode(f.tag(), f.body())? {
                BackendMessage::Authentication(Authentication::Ok) => {}
                BackendMessage::Authentication(_) => {
                    return Err("the example logs in with trust only".into())
                }
                BackendMessage::ErrorResponse(e) => {
                    return Err(format!("login refused: {e:?}").into())
                }
                BackendMessage::ReadyForQuery(_) => return Ok(conn),
                _ => {}
            }
        }
    }

    /// The next frame, or `None` at end of stream.
    fn next(&mut self) -> Result<Option<Frame>> {
        loop {
            match self.decoder.decode()? {
                Decoded::Frame(Unit::Typed(f)) => return Ok(Some(f)),
                Decoded::Frame(other) => return Err(format!("not a typed frame: {other:?}").into()),
                Decoded::NeedMore { .. } => {}
            }
            let mut buf = [0u8; 16 * 1024];
            let n = self.stream.read(&mut buf)?;
            if n == 0 {
                return Ok(None);
            }
            self.decoder.feed(&buf[..n]);
        }
    }
}

/// Sends the messages `data` generates to the server at `addr` (trust login as `user`) and
/// judges its answers; an `Err` is a finding (or a server that cannot be reached).
pub fn probe(addr: &str, user: &str, data: &[u8]) -> Result<Outcome> {
    let mut conn = Conn::login(addr, user)?;
    let mut u = Unstructured::new(data);
    let mut wire = BytesMut::new();
    let mut outcome = Outcome::default();
    while !u.is_empty() && outcome.sent < BURST_MAX {
        let m = OwnedFrontend::arbitrary(&mut u)?;
        // Terminate would end the probe before the server is judged.
        if m.message().tag() == b'X' {
            continue;
        }
        m.message().encode(&mut wire)?;
        outcome.sent += 1;
    }
    frontend::encode_sync(&mut wire);
    frontend::encode_query(MARKER, &mut wire)?;
    // A server that closes on an early message resets the connection when it drops the
    // rest unread; what it said before may then be lost, so a reset counts as a close.
    if let Err(e) = conn.stream.write_all(&wire) {
        if !is_reset(&e) {
            return Err(e.into());
        }
    }
    let mut last_error = false;
    let mut marker_done = false;
    loop {
        let next = match conn.next() {
            Err(e) if e.downcast_ref::<std::io::Error>().is_some_and(is_reset) => {
                outcome.closed = true;
                break;
            }
            other => other?,
        };
        let Some(f) = next else {
            if !last_error {
                return Err("the server closed the connection without an ErrorResponse".into());
            }
            outcome.closed = true;
            break;
        };
        let m = BackendMessage::decode(f.tag(), f.body()).map_err(|e| {
            format!(
                "the server sent an unreadable {} message: {e}",
                char::from(f.tag())
            )
        })?;
        outcome.replies += 1;
        last_error = matches!(m, BackendMessage::ErrorResponse(_));
        match m {
            BackendMessage::DataRow(row) => {
                marker_done |= row.fields().any(|v| v == Some(&b"pgyard fuzz end"[..]));
            }
            BackendMessage::ReadyForQuery(_) if marker_done => break,
            _ => {}
        }
    }
    // Whatever the burst did, the server still takes connections.
    drop(conn);
    Conn::login(addr, user)?;
    Ok(outcome)
}

fn is_reset(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
    )
}

/// Seeded bytes: the example's stand-in for a fuzzer's inputs.
pub fn seeded_input(seed: u64, len: usize) -> Vec<u8> {
    pgyard_types::seeded_bytes(seed, len)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, user, count] = &args[..] else {
        return Err("usage: fuzz_a_server HOST:PORT USER COUNT".into());
    };
    let count: u64 = count.parse()?;
    let (mut sent, mut closed) = (0, 0);
    for seed in 0..count {
        let data = seeded_input(seed, 64 + (seed as usize * 37) % 2048);
        let o = probe(addr, user, &data).map_err(|e| format!("seed {seed}: {e}"))?;
        sent += o.sent;
        closed += usize::from(o.closed);
    }
    println!("{count} probes, {sent} messages, {closed} ended by the server, no finding");
    Ok(())
}
