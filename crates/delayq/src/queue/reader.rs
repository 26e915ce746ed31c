//! Reading records back from the segments (or the write buffer), checksums verified.

use super::DelayQueue;
use crate::format::{segment_name, Body};
use crate::model::Loc;
use crate::storage::Storage;
use crate::Error;

impl<S: Storage> DelayQueue<S> {
    /// The stored pgoutput bytes of one record, checked again.
    pub(super) fn read_raw(&mut self, loc: Loc) -> Result<Vec<u8>, Error> {
        let bytes = self.read_record(loc)?;
        let rec = crate::format::decode_record(&bytes).map_err(|r| Error::Corrupt {
            file: segment_name(loc.seg),
            offset: loc.off,
            reason: r.to_owned(),
        })?;
        Ok(match rec.body {
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
        let active = self.segs.last().map(|s| (s.seq, s.name.clone()));
        let name = self
            .segs
            .iter()
            .find(|s| s.seq == loc.seg)
            .map(|s| s.name.clone())
            .ok_or_else(|| Error::Corrupt {
                file: segment_name(loc.seg),
                offset: loc.off,
                reason: "segment of a pending record is gone".into(),
            })?;
        let bytes = match active {
            Some((seq, _)) if seq == loc.seg && loc.off >= self.written => {
                let from = (loc.off - self.written) as usize;
                self.buf
                    .get(from..from + loc.len as usize)
                    .map(<[u8]>::to_vec)
                    .unwrap_or_default()
            }
            _ => {
                let mut b = vec![0u8; loc.len as usize];
                let n = self
                    .storage
                    .read(&name, loc.off, &mut b)
                    .map_err(Error::Storage)?;
                b.truncate(n);
                b
            }
        };
        if let Err(reason) = crate::format::decode_record(&bytes) {
            return Err(Error::Corrupt {
                file: name,
                offset: loc.off,
                reason: reason.to_owned(),
            });
        }
        Ok(bytes)
    }
}
