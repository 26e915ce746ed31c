//! Frames off the wire, and what a simple query's reply means: the adapters read and write,
//! this decides.

use bytes::BytesMut;
use pgyard_connect::{BackendKey, OpenTarget, Parameters};
use pgyard_wire::backend::BackendMessage;
use pgyard_wire::error_fields::{SqlState, Verbosity};
use pgyard_wire::frame::{decode_frame, Decoded, BACKEND_MESSAGE_MAX};

use crate::Error;

/// The largest backend frame a session accepts: the longest a server can send (about 1 GiB;
/// see [`BACKEND_MESSAGE_MAX`]), so that a walsender's CopyData carrying the largest change
/// pgoutput can encode reaches the follower.
const FRAME_BYTES_MAX: usize = BACKEND_MESSAGE_MAX as usize;

/// Frames at least this long are moved out of the read buffer rather than copied: a large
/// message (a 100 MB change) is then in memory once, and the buffer does not keep its size.
const MOVE_FRAME_BYTES: usize = 1 << 20;

/// libpq's text when the server closes the connection while a reply is awaited.
pub const SERVER_CLOSED: &str = "server closed the connection unexpectedly\n\tThis probably means the server terminated abnormally\n\tbefore or while processing the request.";

/// One frame as it came off the wire: type byte and body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawFrame {
    /// The type byte.
    pub tag: u8,
    /// The body, without the type byte and the length word.
    pub body: Vec<u8>,
}

/// Takes the next complete backend frame off the front of `inbuf`, if there is one.
///
/// While a large frame arrives, the buffer is grown to hold all of it at once (its length
/// word says how much), not by doubling past it; once complete, it is moved into the frame.
pub fn take_frame(inbuf: &mut Vec<u8>) -> Result<Option<RawFrame>, Error> {
    let mut taken = 0;
    let frame = take_frame_at(inbuf, &mut taken);
    inbuf.drain(..taken);
    frame
}

/// [`take_frame`] for a buffer whose first `taken` bytes were taken already: a small frame
/// only moves `taken` on (the caller drops the taken bytes before it appends more); a large
/// one takes the buffer's allocation as its body.
pub fn take_frame_at(inbuf: &mut Vec<u8>, taken: &mut usize) -> Result<Option<RawFrame>, Error> {
    let rest = inbuf.get(*taken..).unwrap_or_default();
    let (tag, used) = match decode_frame(rest, FRAME_BYTES_MAX) {
        Ok(Decoded::Frame(f)) => (f.tag, f.wire_len()),
        Ok(Decoded::NeedMore { at_least }) => {
            if at_least >= MOVE_FRAME_BYTES {
                inbuf.drain(..std::mem::take(taken));
                // With room for the read that completes it to bring the next frame's first
                // bytes too (the adapters read 16 KiB at a time).
                inbuf.reserve_exact(at_least + READ_SLACK_BYTES);
            }
            return Ok(None);
        }
        Err(e) => {
            return Err(Error::Protocol(format!(
                "lost synchronization with server: {e}"
            )))
        }
    };
    let body = if used >= MOVE_FRAME_BYTES {
        inbuf.drain(..std::mem::take(taken));
        // What follows the frame (little: reads are small) stays the buffer; the frame's
        // allocation becomes its body, the 5 header bytes shifted out in place.
        let rest = inbuf.split_off(used);
        let mut body = std::mem::replace(inbuf, rest);
        body.drain(..FRAME_HEADER_BYTES);
        body
    } else {
        let body = rest[FRAME_HEADER_BYTES..used].to_vec();
        *taken += used;
        if *taken == inbuf.len() {
            inbuf.clear();
            *taken = 0;
        }
        body
    };
    Ok(Some(RawFrame { tag, body }))
}

/// Type byte and length word.
const FRAME_HEADER_BYTES: usize = 5;

/// Room left past a large frame for the bytes after it that the same read brings.
const READ_SLACK_BYTES: usize = 64 << 10;

/// Rows of text values (`None` for NULL), as a simple query returns them.
pub type Rows = Vec<Vec<Option<String>>>;

/// What the adapter does after feeding one frame to a [`SimpleQuery`].
#[derive(Debug)]
pub enum Reply {
    /// Read the next frame.
    Continue,
    /// Send these bytes, then read on.
    Send(BytesMut),
    /// The server is ready again: the query's outcome.
    Done(Result<Rows, Error>),
}

/// One simple-protocol query's reply, frame by frame: rows of every result, the first
/// ErrorResponse, ParameterStatus changes, and COPY FROM STDIN refused as psql's `-c` would.
#[derive(Debug, Default)]
pub struct SimpleQuery {
    rows: Rows,
    /// Each CommandComplete's tag (`UPDATE 1`), in order, until the first error.
    tags: Vec<String>,
    error: Option<Error>,
    /// The client sent the COPY data already (a pipeline): CopyInResponse needs no answer.
    copy_sent: bool,
}

impl SimpleQuery {
    /// The query and the `Query` frame that starts it.
    pub fn start(sql: &str) -> Result<(SimpleQuery, BytesMut), Error> {
        let mut buf = BytesMut::new();
        pgyard_wire::frontend::encode_query(sql.as_bytes(), &mut buf)
            .map_err(|e| Error::Config(e.to_string()))?;
        Ok((SimpleQuery::default(), buf))
    }

    /// The reply to a part of a pipeline whose frames were sent together, a COPY's data and
    /// CopyDone included (so CopyInResponse is not answered).
    pub fn pipelined() -> SimpleQuery {
        SimpleQuery {
            copy_sent: true,
            ..SimpleQuery::default()
        }
    }

    /// The CommandComplete tags seen so far (taken: a second call returns none).
    pub fn take_tags(&mut self) -> Vec<String> {
        std::mem::take(&mut self.tags)
    }

    /// Feeds the next frame; `parameters` takes the ParameterStatus values it carries.
    pub fn frame(&mut self, frame: &RawFrame, parameters: &mut Parameters) -> Result<Reply, Error> {
        match decode(frame)? {
            BackendMessage::DataRow(row) => self.rows.push(
                row.fields()
                    .map(|v| v.map(|b| String::from_utf8_lossy(b).into_owned()))
                    .collect(),
            ),
            BackendMessage::CommandComplete(tag) if self.error.is_none() => {
                self.tags.push(String::from_utf8_lossy(tag).into_owned());
            }
            BackendMessage::ErrorResponse(f) => {
                let first = self.error.take().unwrap_or_else(|| Error::Server {
                    sqlstate: f.sqlstate().unwrap_or(SqlState::from_array(*b"XX000")),
                    text: f.render(Verbosity::Default, true),
                });
                // FATAL and PANIC end the session: no ReadyForQuery follows, and the error
                // is the outcome (as libpq reports it), not the EOF behind it.
                if matches!(f.severity(), Some(b"FATAL" | b"PANIC")) {
                    return Ok(Reply::Done(Err(first)));
                }
                self.error = Some(first);
            }
            BackendMessage::ParameterStatus(p) => parameters.set_lossy(p.name, p.value),
            BackendMessage::CopyInResponse(_) if self.copy_sent => {}
            BackendMessage::CopyInResponse(_) => {
                let mut b = BytesMut::new();
                pgyard_wire::frontend::encode_copy_fail(
                    b"COPY FROM STDIN is not supported",
                    &mut b,
                )
                .map_err(|e| Error::Internal(e.to_string()))?;
                return Ok(Reply::Send(b));
            }
            BackendMessage::ReadyForQuery(_) => {
                let outcome = match self.error.take() {
                    Some(e) => Err(e),
                    None => Ok(std::mem::take(&mut self.rows)),
                };
                return Ok(Reply::Done(outcome));
            }
            _ => {}
        }
        Ok(Reply::Continue)
    }
}

/// Decodes a backend frame, with the sessions' error text.
pub fn decode(frame: &RawFrame) -> Result<BackendMessage<'_>, Error> {
    BackendMessage::decode(frame.tag, &frame.body)
        .map_err(|e| Error::Protocol(format!("could not decode a server message: {e}")))
}

/// The CancelRequest for a session's backend key, and where to send it (as `PQcancel`: a new
/// plaintext connection to the same address).
pub fn cancel_request(
    target: &OpenTarget,
    key: Option<&BackendKey>,
) -> Result<(OpenTarget, BytesMut), Error> {
    let key = key.ok_or_else(|| Error::Protocol("no backend key to cancel with".to_owned()))?;
    let mut buf = BytesMut::new();
    pgyard_wire::frontend::encode_cancel_request(key.pid, &key.key, &mut buf)
        .map_err(|e| Error::Protocol(e.to_string()))?;
    Ok((target.clone(), buf))
}

/// A middleware message (`class`, `payload`) ready to send, or why not: a negative class, or
/// (when `checked`) a connection on which nothing said it consumes them, where a server would
/// end the session on the unknown message type.
pub fn middleware_frame(
    consumed: bool,
    checked: bool,
    class: i64,
    payload: &[u8],
) -> Result<BytesMut, Error> {
    if checked && !consumed {
        return Err(Error::Config(
            "middleware messages are not consumed on this connection: no middleware answered \
             middleware_messages=on (connect with the middleware option), and a server would end \
             the session on them"
                .to_owned(),
        ));
    }
    let mut buf = BytesMut::new();
    pgyard_wire::middleware::encode_middleware(class, payload, &mut buf)
        .map_err(|e| Error::Config(e.to_string()))?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pgyard_wire::backend;

    fn frames(build: impl FnOnce(&mut BytesMut)) -> Vec<RawFrame> {
        let mut b = BytesMut::new();
        build(&mut b);
        let mut bytes = b.to_vec();
        std::iter::from_fn(|| take_frame(&mut bytes).expect("frames decode")).collect()
    }

    #[test]
    fn a_fatal_error_ends_the_reply_without_ready_for_query() {
        let reply = frames(|b| {
            pgyard_wire::error_fields::encode_error_response(
                &[
                    (b'S', b"FATAL"),
                    (b'V', b"FATAL"),
                    (b'C', b"57P01"),
                    (b'M', b"terminating connection due to administrator command"),
                ],
                b,
            )
            .expect("encode");
        });
        let (mut q, _) = SimpleQuery::start("select 1").expect("query");
        let Reply::Done(Err(e)) = q.frame(&reply[0], &mut Parameters::new()).expect("decodes")
        else {
            panic!("a FATAL error is the outcome")
        };
        assert_eq!(
            e.to_string(),
            "FATAL:  terminating connection due to administrator command\n"
        );
    }

    #[test]
    fn rows_errors_and_parameters_of_a_reply() {
        let reply = frames(|b| {
            backend::ParameterStatus {
                name: b"TimeZone",
                value: b"UTC",
            }
            .encode(b)
            .expect("encode");
            backend::encode_data_row(&[Some(b"1".as_slice()), None], b).expect("encode");
            backend::encode_ready_for_query(backend::TransactionStatus::Idle, b);
        });
        let (mut q, request) = SimpleQuery::start("select 1, null").expect("query");
        assert_eq!(request[0], b'Q');
        let mut params: Parameters = [("TimeZone", "CET")].into_iter().collect();
        let mut outcome = None;
        for f in &reply {
            if let Reply::Done(r) = q.frame(f, &mut params).expect("decodes") {
                outcome = Some(r);
            }
        }
        assert_eq!(
            outcome.expect("done").expect("rows"),
            vec![vec![Some("1".to_owned()), None]]
        );
        assert_eq!(params.to_vec(), [("TimeZone".to_owned(), "UTC".to_owned())]);
    }

    #[test]
    fn a_truncated_stream_waits_and_garbage_is_a_protocol_error() {
        let mut partial = vec![b'Z', 0, 0, 0, 5];
        assert_eq!(take_frame(&mut partial).expect("needs more"), None);
        let mut garbage = vec![b'Z', 0, 0, 0, 1, 0];
        let e = take_frame(&mut garbage).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Protocol);
    }

    /// A 100 MB CopyData arriving in reads of 16 KiB: the buffer grows once to the frame's
    /// size, the frame's body is that allocation (not a copy), and the next frame's first
    /// bytes stay behind.
    #[test]
    fn a_100_mb_frame_is_taken_whole_without_a_copy() {
        let body: Vec<u8> = (0..100u32 << 20).map(|i| (i % 251) as u8).collect();
        let mut wire = vec![b'd'];
        wire.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        wire.extend_from_slice(&body);
        wire.extend_from_slice(&[b'k', 0, 0]);
        let mut inbuf = Vec::new();
        let mut grew = 0;
        let mut frame = None;
        for chunk in wire.chunks(16 << 10) {
            let cap = inbuf.capacity();
            inbuf.extend_from_slice(chunk);
            grew += usize::from(inbuf.capacity() != cap);
            if let Some(f) = take_frame(&mut inbuf).expect("decodes") {
                assert!(frame.is_none());
                frame = Some(f);
            }
        }
        let frame = frame.expect("the frame completes");
        assert_eq!(frame.tag, b'd');
        assert!(frame.body == body, "the body differs");
        assert!(frame.body.capacity() <= body.len() + (80 << 10));
        assert_eq!(inbuf, [b'k', 0, 0]);
        assert!(inbuf.capacity() < 1 << 20);
        assert!(grew <= 12, "grown {grew} times");
    }

    /// Frames taken by moving an offset, with the taken bytes dropped only before each
    /// append (as `SessionCore` does), come out as `take_frame` gives them: small ones, one
    /// over the move threshold, reads cut anywhere.
    #[test]
    fn frames_taken_at_an_offset_match_frames_taken_off_the_front() {
        let mut wire = Vec::new();
        let mut bodies = Vec::new();
        for (i, len) in [0usize, 3, 200, 16 << 10, 1, (1 << 20) + 5, 7, 40]
            .into_iter()
            .enumerate()
        {
            let body: Vec<u8> = (0..len).map(|j| (i * 31 + j) as u8).collect();
            wire.push(b'd');
            wire.extend_from_slice(&(len as u32 + 4).to_be_bytes());
            wire.extend_from_slice(&body);
            bodies.push(body);
        }
        for cut in [1usize, 5, 977, 16 << 10] {
            let (mut inbuf, mut taken, mut got) = (Vec::new(), 0, Vec::new());
            for chunk in wire.chunks(cut) {
                inbuf.drain(..std::mem::take(&mut taken));
                inbuf.extend_from_slice(chunk);
                while let Some(f) = take_frame_at(&mut inbuf, &mut taken).expect("decodes") {
                    assert_eq!(f.tag, b'd');
                    got.push(f.body);
                }
            }
            assert!(got == bodies, "cut {cut}: the frames differ");
            assert_eq!(inbuf.len(), taken, "cut {cut}: bytes left over");
        }
    }
}
