//! Reading records back from the segments (or the write buffer), checksums verified.

use super::DelayQueue;
use crate::format::{segment_name, Body, Rec};
use crate::model::Loc;
use crate::storage::Storage;
use crate::Error;

impl<S: Storage> DelayQueue<S> {
    /// The stored pgoutput bytes of one record, checked again.
    pub(super) fn read_raw(&mut self, loc: Loc) -> Result<Vec<u8>, Error> {
        self.with_record(loc, |_, rec| match rec.body {
            Body::Begin { raw, .. }
            | Body::Msg { raw, .. }
            | Body::Note { raw }
            | Body::Seal { raw, .. }
            | Body::Decide { raw, .. }
            | Body::Abort { raw, .. }
            | Body::Schema { raw, .. } => raw.to_vec(),
            Body::Applied => Vec::new(),
        })
    }

    /// The bytes of one whole record, with its checksum verified.
    pub(super) fn read_record(&mut self, loc: Loc) -> Result<Vec<u8>, Error> {
        self.with_record(loc, |bytes, _| bytes.to_vec())
    }

    /// Reads the record at `loc` (from the write buffer when it is not written yet), verifies
    /// and decodes it once, and hands both to `f`. Records on disk are read into a buffer
    /// kept for the next read, so a hand-out of many records allocates only what it returns.
    fn with_record<T>(
        &mut self,
        loc: Loc,
        f: impl FnOnce(&[u8], Rec<'_>) -> T,
    ) -> Result<T, Error> {
        let active = self.segs.last().map(|s| s.seq);
        let Some(seg) = self.segs.iter().find(|s| s.seq == loc.seg) else {
            return Err(Error::Corrupt {
                file: segment_name(loc.seg),
                offset: loc.off,
                reason: "segment of a pending record is gone".into(),
            });
        };
        let bytes: &[u8] = if active == Some(loc.seg) && loc.off >= self.written {
            let from = (loc.off - self.written) as usize;
            self.buf
                .get(from..from + loc.len as usize)
                .unwrap_or_default()
        } else {
            self.rbuf.clear();
            self.rbuf.resize(loc.len as usize, 0);
            let n = self
                .storage
                .read(&seg.name, loc.off, &mut self.rbuf)
                .map_err(Error::Storage)?;
            self.rbuf.truncate(n);
            &self.rbuf
        };
        match crate::format::decode_record(bytes) {
            Ok(rec) => Ok(f(bytes, rec)),
            Err(reason) => Err(Error::Corrupt {
                file: seg.name.clone(),
                offset: loc.off,
                reason: reason.to_owned(),
            }),
        }
    }
}
