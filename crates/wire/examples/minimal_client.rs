//! A minimal blocking PostgreSQL client on pgyard-wire alone: one `std::net::TcpStream`, the
//! startup packet, authentication (trust, cleartext, MD5 or SCRAM-SHA-256 through the
//! crate's `AuthClient`), one simple query whose rows are printed, and Terminate.
//!
//! ```sh
//! PGPASSWORD=secret cargo run -p pgyard-wire --example minimal_client -- \
//!     127.0.0.1:5432 app shop 'select 1, null'
//! ```
//!
//! What it leaves out, which a real driver adds: TLS (the connection is plaintext, so SCRAM
//! runs without channel binding), more than one host, timeouts, cancelling, the extended
//! query protocol and any type conversion (values stay text). pgyard-connect and the adapters
//! do those.

use std::error::Error;
use std::io::{Read, Write};
use std::net::TcpStream;

use bytes::BytesMut;
use pgyard_wire::auth::{AuthClient, AuthConfig, AuthRequest, AuthResponse, AuthStep};
use pgyard_wire::backend::{self, BackendMessage};
use pgyard_wire::error_fields::{ErrorFields, Verbosity};
use pgyard_wire::frame::{Decoded, Frame, FrameDecoder, Limits, ProtocolVersion, Unit};
use pgyard_wire::frontend;

/// Every error of the example, as text: a driver would keep the kinds apart.
pub type Result<T> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

/// One result row: a text value per column, `None` for NULL.
pub type Row = Vec<Option<String>>;

/// An authenticated connection, ready for queries.
pub struct Client {
    stream: TcpStream,
    /// Reassembles frames from whatever pieces the socket returns.
    decoder: FrameDecoder,
}

impl Client {
    /// Connects to `addr` (`host:port`), sends the startup packet and authenticates as `user`;
    /// returns once the server is ready for a query.
    pub fn connect(addr: &str, user: &str, database: &str, password: Option<&str>) -> Result<Self> {
        let stream = TcpStream::connect(addr)?;
        let decoder = FrameDecoder::backend(Limits::libpq_client());
        let mut client = Client { stream, decoder };

        let mut out = BytesMut::new();
        let params: [(&[u8], &[u8]); 2] = [
            (b"user", user.as_bytes()),
            (b"database", database.as_bytes()),
        ];
        frontend::encode_startup(ProtocolVersion::V3_0, &params, &mut out)?;
        client.stream.write_all(&out)?;

        let config = AuthConfig {
            user: user.to_owned(),
            password: password.map(|p| p.as_bytes().to_vec()),
            ..AuthConfig::default()
        };
        let mut auth = AuthClient::new(config, scram_nonce()?);
        // Authentication requests until AuthenticationOk, then ParameterStatus and
        // BackendKeyData (which a driver would keep) until ReadyForQuery.
        loop {
            let frame = client.next_frame()?;
            if frame.tag() == backend::tag::AUTHENTICATION {
                // The auth module decodes `R` bodies itself, so that a method it does not
                // support is refused with libpq's words rather than as a decoding error.
                match auth.handle_request(AuthRequest::decode(frame.body())?)? {
                    AuthStep::Send(response) => client.send_auth_response(&response)?,
                    AuthStep::Wait | AuthStep::Authenticated => {}
                }
                continue;
            }
            match BackendMessage::decode(frame.tag(), frame.body())? {
                BackendMessage::ErrorResponse(fields) => return Err(server_error(&fields).into()),
                // Never trust a server that skips authentication it was asked for.
                BackendMessage::ReadyForQuery(_) if !auth.is_authenticated() => {
                    return Err("ReadyForQuery before AuthenticationOk".into())
                }
                BackendMessage::ReadyForQuery(_) => return Ok(client),
                _ => {}
            }
        }
    }

    /// Runs `sql` with the simple query protocol and returns the rows of every statement in
    /// it. An error is returned after ReadyForQuery, so the connection stays usable.
    pub fn simple_query(&mut self, sql: &str) -> Result<Vec<Row>> {
        let mut out = BytesMut::new();
        frontend::encode_query(sql.as_bytes(), &mut out)?;
        self.stream.write_all(&out)?;
        let mut rows = Vec::new();
        let mut error = None;
        loop {
            let frame = self.next_frame()?;
            match BackendMessage::decode(frame.tag(), frame.body())? {
                BackendMessage::DataRow(row) => rows.push(
                    row.fields()
                        .map(|v| v.map(|v| String::from_utf8_lossy(v).into_owned()))
                        .collect(),
                ),
                BackendMessage::ErrorResponse(fields) => error = Some(server_error(&fields)),
                BackendMessage::ReadyForQuery(_) => break,
                // RowDescription, CommandComplete, notices: nothing this client shows.
                _ => {}
            }
        }
        match error {
            Some(text) => Err(text.into()),
            None => Ok(rows),
        }
    }

    /// Says goodbye, so the server logs a clean disconnection rather than an EOF.
    pub fn terminate(mut self) -> Result<()> {
        let mut out = BytesMut::new();
        frontend::encode_terminate(&mut out);
        self.stream.write_all(&out)?;
        Ok(())
    }

    /// The next whole frame, reading from the socket as often as it takes.
    fn next_frame(&mut self) -> Result<Frame> {
        loop {
            match self.decoder.decode()? {
                Decoded::Frame(Unit::Typed(frame)) => return Ok(frame),
                // A backend decoder yields typed frames only; anything else is a bug here.
                Decoded::Frame(other) => return Err(format!("unexpected {other:?}").into()),
                Decoded::NeedMore { .. } => {
                    let mut chunk = [0u8; 8192];
                    let n = self.stream.read(&mut chunk)?;
                    if n == 0 {
                        return Err("server closed the connection unexpectedly".into());
                    }
                    self.decoder.feed(&chunk[..n]);
                }
            }
        }
    }

    fn send_auth_response(&mut self, response: &AuthResponse) -> Result<()> {
        let mut out = BytesMut::new();
        match response {
            // The machine's payload ends in the NUL the encoder adds again.
            AuthResponse::Password(p) => {
                frontend::encode_password(p.strip_suffix(&[0]).unwrap_or(p), &mut out)?
            }
            AuthResponse::SaslInitial { mechanism, data } => {
                let name = mechanism.name().as_bytes();
                frontend::encode_sasl_initial_response(name, Some(data), &mut out)?
            }
            AuthResponse::Sasl(data) => frontend::encode_sasl_response(data, &mut out)?,
        }
        self.stream.write_all(&out)?;
        Ok(())
    }
}

/// The server's error as psql prints it (`ERROR:  …`, then DETAIL and HINT lines).
fn server_error(fields: &ErrorFields<'_>) -> String {
    fields
        .render(Verbosity::Default, true)
        .trim_end()
        .to_owned()
}

/// SCRAM's client nonce must be unpredictable, so it comes from the kernel's random source
/// (the crate itself takes randomness only as an input).
fn scram_nonce() -> Result<[u8; pgyard_wire::auth::NONCE_RAW_LEN]> {
    let mut nonce = [0u8; pgyard_wire::auth::NONCE_RAW_LEN];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut nonce)?;
    Ok(nonce)
}

/// Connects, runs `sql`, says goodbye and returns the rows.
pub fn run(
    addr: &str,
    user: &str,
    database: &str,
    password: Option<&str>,
    sql: &str,
) -> Result<Vec<Row>> {
    let mut client = Client::connect(addr, user, database, password)?;
    let rows = client.simple_query(sql)?;
    client.terminate()?;
    Ok(rows)
}

/// The command line: the arguments in, the result printed.
fn cli() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, user, database, sql] = args.as_slice() else {
        return Err(
            "usage: minimal_client HOST:PORT USER DATABASE SQL (password in PGPASSWORD)".into(),
        );
    };
    let password = std::env::var("PGPASSWORD").ok();
    for row in run(addr, user, database, password.as_deref(), sql)? {
        // Like `psql -At`: columns joined by `|`, NULL as nothing.
        let text: Vec<&str> = row.iter().map(|v| v.as_deref().unwrap_or("")).collect();
        println!("{}", text.join("|"));
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    // The errors are libpq's or the server's texts: print them as they are, not as Debug.
    match cli() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}", e.to_string().trim_end());
            std::process::ExitCode::FAILURE
        }
    }
}
