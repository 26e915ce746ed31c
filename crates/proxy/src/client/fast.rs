//! The two shortcuts of a transaction-mode transaction: a request read whole while no
//! server is held, and a reply chunk that ends the transaction. Each does exactly what the
//! general path would do with the same bytes, in one pass over the frame headers, and
//! declines (having changed nothing) whenever anything else could happen: a middleware
//! message, Terminate, a frame cut across reads, an error, the proxy's own replies or
//! swallowed messages in the reply queue, settings being aligned. The general path then
//! runs as before.

use bytes::Bytes;
use pgyard_wire::backend::TransactionStatus;

use super::prepared::Prepared;
use super::relay::{owes, CLIENT_FRAME_MAX};
use super::{ClientOut, ClientSession, Phase, PoolMode};

/// The tag and length word of the frame at `at`, when its header is there.
fn header(data: &[u8], at: usize) -> Option<(u8, i32)> {
    let &[tag, a, b, c, d] = data.get(at..)?.first_chunk()?;
    Some((tag, i32::from_be_bytes([a, b, c, d])))
}

impl ClientSession {
    /// Transaction mode, between transactions: a read of whole frames, none of them `M` or
    /// Terminate (the common case: a query, or a pipeline ending in Sync). Feeding the
    /// splitter would hand the read back in one run and leave it as it was; reading the
    /// frames whole would count each and hold the bytes while a server is asked for. This
    /// does that without copying the read into the splitter and reading each header three
    /// times. False, with nothing changed, otherwise.
    pub(super) fn whole_request(&mut self, data: &[u8]) -> bool {
        let idle = matches!(self.phase, Phase::Idle);
        if !idle
            || !self.shortcuts
            || self.config.pool_mode != PoolMode::Transaction
            || data.is_empty()
            || !self.client_buf.is_empty()
            || !self.pending.is_empty()
            || !self.splitter.at_typed_boundary()
        {
            return false;
        }
        // Checked and counted in one pass; applied only once every frame passed.
        let (mut owed, mut unsynced) = (0, None);
        let mut at = 0;
        while let Some((tag, len)) = header(data, at) {
            if tag == b'X' || !self.splitter.forwards_frame(tag, len) {
                return false;
            }
            let len = len as usize;
            if len > CLIENT_FRAME_MAX || data.len() - at <= len {
                return false;
            }
            let (o, u) = owes(tag);
            owed += o;
            unsynced = u.or(unsynced);
            at += 1 + len;
        }
        if at != data.len() {
            return false;
        }
        // What `count` does for each frame, at once.
        self.last_request = Some(self.now);
        self.query_start.get_or_insert(self.now);
        self.xact_start.get_or_insert(self.now);
        self.outstanding += owed;
        if let Some(u) = unsynced {
            self.unsynced = u;
        }
        self.shortcuts_taken.0 += 1;
        self.pending.extend_from_slice(data);
        self.phase = Phase::Waiting;
        self.acquire(self.route);
        true
    }

    /// Transaction mode: a chunk of whole server frames whose last is the ReadyForQuery `I`
    /// that ends the transaction, with no ErrorResponse and only the client's own replies
    /// owed (the common end of a transaction). The general path would scan it, forward it
    /// whole, note its settings, match each reply in the queue (which the release then
    /// resets) and give the server back; this does the same in one pass. `Err` gives the
    /// chunk back, nothing changed, when it is anything else.
    pub(super) fn whole_reply(&mut self, data: Bytes) -> Result<(), Bytes> {
        let Some(noted) = self.ends_transaction(&data) else {
            return Err(data);
        };
        // The reply queue is reset with the release below, so its entries need no matching.
        for &(tag, start, end) in noted.iter().flatten() {
            let body = &data[start..end];
            if tag == b'S' {
                self.note_setting(body, false);
            } else if let Some(s) = self.server.as_mut() {
                Prepared::command_complete(body, &mut s.prepared);
            }
        }
        self.shortcuts_taken.1 += 1;
        self.outstanding -= 1;
        self.status = TransactionStatus::Idle.byte();
        self.time_ready();
        self.out.push_back(ClientOut::ToClient(data));
        self.release_at_transaction_end(true);
        Ok(())
    }

    /// Whether `data` may take [`ClientSession::whole_reply`]: the session relays a
    /// transaction with one reply owed, nothing unsynced and only plain replies queued; the
    /// scanner stands between frames; the chunk is whole frames that pass the scanner's
    /// checks, none an ErrorResponse, and ends with the transaction's ReadyForQuery `I`.
    /// Then the ParameterStatus and CommandComplete frames it holds (type and body range;
    /// a chunk with more than [`NOTED`] of them takes the general path).
    fn ends_transaction(&self, data: &[u8]) -> Option<[Option<(u8, usize, usize)>; NOTED]> {
        let relaying = self.shortcuts
            && matches!(self.phase, Phase::Active)
            && self.config.pool_mode == PoolMode::Transaction
            && self.outstanding == 1
            && !self.unsynced
            && self.server_scan.at_boundary()
            && self.prepared.plain();
        if !relaying {
            return None;
        }
        let mut noted = [None; NOTED];
        let mut n = 0;
        let mut at = 0;
        let mut ready = None;
        while let Some((tag, len)) = header(data, at) {
            let second_ready = tag == b'Z' && ready.is_some();
            if tag == b'E' || second_ready || !self.server_scan.accepts(tag, len) {
                return None;
            }
            let len = len as usize;
            if data.len() - at <= len {
                return None;
            }
            let body = (at + 5, at + 1 + len);
            match tag {
                b'Z' => ready = Some(body),
                b'S' | b'C' => {
                    *noted.get_mut(n)? = Some((tag, body.0, body.1));
                    n += 1;
                }
                _ => {}
            }
            at += 1 + len;
        }
        let idle = [TransactionStatus::Idle.byte()];
        let ends = ready.is_some_and(|(start, end)| end == data.len() && data[start..end] == idle);
        ends.then_some(noted)
    }
}

/// Most ParameterStatus and CommandComplete frames a reply chunk may hold to take the
/// shortcut (a transaction of a few statements that report settings).
const NOTED: usize = 8;
