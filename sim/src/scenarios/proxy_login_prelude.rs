//! `proxy-login`'s encryption preludes (`proxy_login.rs`): SSLRequest and GSSENCRequest,
//! with plaintext stuffed behind them or not, repeated, and direct TLS, each answered as
//! PostgreSQL answers it; and each handshake's outcome (ALPN, and under a client CA the
//! certificate the client showed).

use bytes::BytesMut;
use pgyard_proxy::{ClientCert, TlsMode};
use pgyard_types::{uniform_inclusive, Rng};
use pgyard_wire::frame::ProtocolVersion;
use pgyard_wire::frontend::{encode_gssenc_request, encode_ssl_request, encode_startup};

use super::proxy_login::{
    answered, ends_with_fatal, fail, field, Conn, Prelude, Proxy, SECOND_GSS, SECOND_SSL,
};
use crate::{trace, Trace, Violation};

/// The encryption prelude: `Some(tls)` when a StartupMessage may follow (over TLS or not),
/// `None` when the connection ended as it must.
pub(super) fn prelude(
    rng: &mut Rng,
    t: &mut Trace,
    p: &Proxy,
    c: &mut Conn,
    prelude: Prelude,
) -> Result<Option<bool>, Violation> {
    let mut ssl = BytesMut::new();
    encode_ssl_request(&mut ssl);
    let mut gss = BytesMut::new();
    encode_gssenc_request(&mut gss);
    match prelude {
        Prelude::Plain => Ok(Some(false)),
        Prelude::Ssl => ssl_request(rng, t, p, c, &ssl),
        Prelude::SslStuffed | Prelude::GssStuffed => {
            // A StartupMessage sent with the request, before its answer: whole, or only its
            // first bytes (the rest of it still to come).
            let mut b = if prelude == Prelude::SslStuffed {
                ssl
            } else {
                gss
            };
            let request = b.len();
            let _ = encode_startup(ProtocolVersion::V3_0, &[(b"user", b"x")], &mut b);
            if uniform_inclusive(rng, 1) == 0 {
                let keep = request + 1 + uniform_inclusive(rng, 6) as usize;
                b.truncate(keep);
            }
            c.send(&b)?;
            let text = if prelude == Prelude::SslStuffed {
                "received unencrypted data after SSL request"
            } else {
                "received unencrypted data after GSSAPI encryption request"
            };
            ends_with_fatal(c, "08P01", text).map(|()| None)
        }
        Prelude::Gss => {
            c.send(&gss)?;
            answered(c, b'N', "GSSENCRequest")?;
            Ok(Some(false))
        }
        Prelude::GssThenSsl => {
            c.send(&gss)?;
            answered(c, b'N', "GSSENCRequest")?;
            ssl_request(rng, t, p, c, &ssl)
        }
        Prelude::SslTwice => {
            let Some(_) = ssl_request(rng, t, p, c, &ssl)? else {
                return Ok(None);
            };
            c.send(&ssl)?;
            ends_with_fatal(c, "0A000", SECOND_SSL).map(|()| None)
        }
        Prelude::GssAfterTls => {
            let Some(tls) = ssl_request(rng, t, p, c, &ssl)? else {
                return Ok(None);
            };
            c.send(&gss)?;
            if tls {
                return ends_with_fatal(c, "0A000", SECOND_GSS).map(|()| None);
            }
            answered(c, b'N', "GSSENCRequest after N")?;
            Ok(Some(false))
        }
        Prelude::Direct => direct(rng, t, p, c),
        Prelude::GssThenRecord => {
            // Direct TLS is known by the very first byte only: a TLS record after an answered
            // request is read as a startup packet, whose length word is far out of range.
            c.send(&gss)?;
            answered(c, b'N', "GSSENCRequest")?;
            c.send(&[0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 0x00, 0x00, 0x01, 0x03])?;
            let fatal = c.message().is_some_and(|(tag, body)| {
                tag == b'E' && field(&body, b'C').as_deref() == Some("08P01")
            });
            if fatal && c.closed && c.started_tls.is_none() {
                return Ok(None);
            }
            let detail = format!(
                "a TLS record after GSSENCRequest: handshake {:?}, closed={}",
                c.started_tls, c.closed
            );
            Err(fail("login-answered-as-postgresql", detail))
        }
    }
}

/// An SSLRequest and, when answered `S`, the handshake.
fn ssl_request(
    rng: &mut Rng,
    t: &mut Trace,
    p: &Proxy,
    c: &mut Conn,
    ssl: &[u8],
) -> Result<Option<bool>, Violation> {
    c.send(ssl)?;
    if p.mode == TlsMode::Disable {
        answered(c, b'N', "SSLRequest without TLS")?;
        return Ok(Some(false));
    }
    answered(c, b'S', "SSLRequest with TLS")?;
    if c.started_tls.take() != Some(Vec::new()) {
        let detail = "an S was not followed by a handshake with nothing read ahead".to_owned();
        return Err(fail("login-answered-as-postgresql", detail));
    }
    handshake(rng, t, p, c, false)
}

/// A connection whose first byte is a TLS record.
fn direct(
    rng: &mut Rng,
    t: &mut Trace,
    p: &Proxy,
    c: &mut Conn,
) -> Result<Option<bool>, Violation> {
    let hello = [0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 0x00, 0x00, 0x01, 0x03];
    c.send(&hello)?;
    if p.mode == TlsMode::Disable {
        let text = "direct SSL connection request received, but this pgyard proxy has no TLS \
                    configured";
        return ends_with_fatal(c, "08P01", text).map(|()| None);
    }
    if c.started_tls.take().as_deref() != Some(&hello[..]) || !c.rx.is_empty() {
        let detail = "direct TLS did not start a handshake with the record read".to_owned();
        return Err(fail("login-answered-as-postgresql", detail));
    }
    handshake(rng, t, p, c, true)
}

/// The handshake's outcome: the ALPN protocol the client and the proxy agreed on, and under a
/// client CA the certificate the client showed.
fn handshake(
    rng: &mut Rng,
    t: &mut Trace,
    p: &Proxy,
    c: &mut Conn,
    direct: bool,
) -> Result<Option<bool>, Violation> {
    let alpn: Option<&[u8]> = match uniform_inclusive(rng, 5) {
        0 => None,
        1 => Some(b"http/1.1"),
        _ => Some(b"postgresql"),
    };
    trace!(
        t,
        "handshake direct={direct} alpn={:?}",
        alpn.map(String::from_utf8_lossy)
    );
    if let Some(side) = c.certs.as_mut() {
        // The client's next draw is its user (the caller's, right after this handshake): a
        // peek at it lets the certificate name the very user asked for, without moving it.
        let next = super::proxy_login_auth::draw_client(&mut rng.clone(), &p.login).user;
        let cert = super::proxy_login_auth::draw_cert(side, &next, &p.login);
        match &cert {
            None => trace!(t, "no client certificate"),
            Some(ClientCert { common_name: None }) => trace!(t, "client certificate without a CN"),
            Some(ClientCert {
                common_name: Some(cn),
            }) => trace!(t, "client certificate CN={cn:?}"),
        }
        c.cert.clone_from(&cert);
        c.s.handle_tls_established_with_cert(alpn, cert);
    } else {
        c.s.handle_tls_established(alpn);
    }
    c.pump()?;
    match alpn {
        Some(b"postgresql") => Ok(Some(true)),
        Some(_) => {
            ends_with_fatal(c, "08P01", "unexpected ALPN protocol in TLS handshake").map(|()| None)
        }
        None if direct => ends_with_fatal(
            c,
            "08P01",
            "received direct SSL connection request without ALPN protocol negotiation extension",
        )
        .map(|()| None),
        None => Ok(Some(true)),
    }
}
