//! Generators for logical replication's pgoutput messages, protocol versions 1 to 4
//! ([`OwnedPgOutput`]).

use arbitrary::{Arbitrary, Result, Unstructured};
use pgyard_types::{Lsn, PgTimestamp, Xid};

use super::{bytes, cstr, edge, edge_len};
use crate::pgoutput::{
    AbortInfo, Begin, Commit, CommitPrepared, Delete, Insert, LogicalMessage, OldTuple, Origin,
    PgOutputMessage, Prepare, ProtoVersion, Relation, ReplicaIdentity, RollbackPrepared, Seq,
    StreamAbort, StreamCommit, StreamStart, Truncate, TupleData, Type, Update,
};

/// Column values and logical message contents stay below this.
const VALUE_MAX: usize = 16 * 1024;
/// Names and prefixes stay below this.
const NAME_MAX: usize = 256;

/// A generated pgoutput message valid for [`OwnedPgOutput::version`] (a stream transaction ID
/// only from version 2, two-phase messages from 3, a streamed abort's LSN and time from 4);
/// [`OwnedPgOutput::message`] lends it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedPgOutput {
    version: ProtoVersion,
    /// The message with its byte strings and lists empty; the fields below are lent in their
    /// places, in field order.
    shape: PgOutputMessage<'static>,
    texts: [Vec<u8>; 2],
    /// Encoded list items and their count (columns, tuples, relation OIDs).
    lists: [(usize, Vec<u8>); 2],
}

fn lsn(u: &mut Unstructured<'_>) -> Result<Lsn> {
    edge(u).map(Lsn)
}

fn ts(u: &mut Unstructured<'_>) -> Result<PgTimestamp> {
    edge(u).map(PgTimestamp)
}

fn xid(u: &mut Unstructured<'_>) -> Result<Xid> {
    edge(u).map(Xid)
}

/// Encoded tuple columns, up to the i16 count's limit; past a few hundred they are NULL or
/// unchanged TOAST only.
fn tuple(u: &mut Unstructured<'_>) -> Result<(usize, Vec<u8>)> {
    let n = edge_len(u, 6, i16::MAX as usize)?;
    let mut raw = Vec::new();
    for _ in 0..n {
        let kind = if n > 256 {
            u.int_in_range(0u8..=1)?
        } else {
            u.int_in_range(0u8..=5)?
        };
        match kind {
            0 => raw.push(b'n'),
            1 => raw.push(b'u'),
            k => {
                raw.push(if k % 2 == 0 { b't' } else { b'b' });
                let v = bytes(u, VALUE_MAX)?;
                raw.extend_from_slice(&(v.len() as i32).to_be_bytes());
                raw.extend_from_slice(&v);
            }
        }
    }
    Ok((n, raw))
}

/// Encoded relation columns, up to the i16 count's limit; past a few hundred the names are
/// empty.
fn columns(u: &mut Unstructured<'_>) -> Result<(usize, Vec<u8>)> {
    let n = edge_len(u, 6, i16::MAX as usize)?;
    let mut raw = Vec::new();
    for _ in 0..n {
        raw.push(u8::from(u.arbitrary::<bool>()?));
        if n <= 256 {
            raw.extend_from_slice(&cstr(u, NAME_MAX)?);
        }
        raw.push(0);
        raw.extend_from_slice(&edge::<u32>(u)?.to_be_bytes());
        raw.extend_from_slice(&edge::<i32>(u)?.to_be_bytes());
    }
    Ok((n, raw))
}

fn relation_oids(u: &mut Unstructured<'_>) -> Result<(usize, Vec<u8>)> {
    let n = edge_len(u, 4, 1 << 16)?;
    let mut raw = Vec::with_capacity(4 * n);
    for _ in 0..n {
        raw.extend_from_slice(&edge::<u32>(u)?.to_be_bytes());
    }
    Ok((n, raw))
}

fn prepare(u: &mut Unstructured<'_>) -> Result<Prepare<'static>> {
    Ok(Prepare {
        prepare_lsn: lsn(u)?,
        end_lsn: lsn(u)?,
        prepare_time: ts(u)?,
        xid: xid(u)?,
        gid: &[],
    })
}

/// The shape and owned parts of one message that `version` allows.
struct Parts {
    shape: PgOutputMessage<'static>,
    texts: [Vec<u8>; 2],
    lists: [(usize, Vec<u8>); 2],
}

fn generate(u: &mut Unstructured<'_>, version: ProtoVersion) -> Result<Parts> {
    let mut texts = [Vec::new(), Vec::new()];
    let mut lists = [(0, Vec::new()), (0, Vec::new())];
    // Only versions 2+ stream, and a streamed change carries the transaction ID.
    let sxid = if version >= ProtoVersion::V2 && u.ratio(1, 3)? {
        Some(xid(u)?)
    } else {
        None
    };
    let last = match version {
        ProtoVersion::V1 => 9,
        ProtoVersion::V2 => 13,
        ProtoVersion::V3 | ProtoVersion::V4 => 18,
    };
    let shape = match u.int_in_range(0u8..=last)? {
        0 => PgOutputMessage::Begin(Begin {
            final_lsn: lsn(u)?,
            commit_time: ts(u)?,
            xid: xid(u)?,
        }),
        1 => PgOutputMessage::Commit(Commit {
            commit_lsn: lsn(u)?,
            end_lsn: lsn(u)?,
            commit_time: ts(u)?,
        }),
        2 => {
            texts[0] = cstr(u, NAME_MAX)?;
            PgOutputMessage::Origin(Origin {
                commit_lsn: lsn(u)?,
                name: &[],
            })
        }
        n @ 3..=9 => change(u, n, sxid, &mut texts, &mut lists)?,
        10 => PgOutputMessage::StreamStart(StreamStart {
            xid: xid(u)?,
            first_segment: u.arbitrary()?,
        }),
        11 => PgOutputMessage::StreamStop,
        12 => PgOutputMessage::StreamCommit(StreamCommit {
            xid: xid(u)?,
            commit_lsn: lsn(u)?,
            end_lsn: lsn(u)?,
            commit_time: ts(u)?,
        }),
        13 => PgOutputMessage::StreamAbort(StreamAbort {
            xid: xid(u)?,
            subxid: xid(u)?,
            abort: if version >= ProtoVersion::V4 && u.arbitrary()? {
                Some(AbortInfo {
                    lsn: lsn(u)?,
                    time: ts(u)?,
                })
            } else {
                None
            },
        }),
        n => {
            texts[0] = cstr(u, NAME_MAX)?;
            match n {
                14 => PgOutputMessage::BeginPrepare(prepare(u)?),
                15 => PgOutputMessage::Prepare(prepare(u)?),
                16 => PgOutputMessage::StreamPrepare(prepare(u)?),
                17 => PgOutputMessage::CommitPrepared(CommitPrepared {
                    commit_lsn: lsn(u)?,
                    end_lsn: lsn(u)?,
                    commit_time: ts(u)?,
                    xid: xid(u)?,
                    gid: &[],
                }),
                _ => PgOutputMessage::RollbackPrepared(RollbackPrepared {
                    prepare_end_lsn: lsn(u)?,
                    rollback_end_lsn: lsn(u)?,
                    prepare_time: ts(u)?,
                    rollback_time: ts(u)?,
                    xid: xid(u)?,
                    gid: &[],
                }),
            }
        }
    };
    Ok(Parts {
        shape,
        texts,
        lists,
    })
}

/// The row and schema messages (3 to 9 in [`generate`]'s numbering), streamed when `sxid` is
/// set; their byte strings go to `texts`, their lists to `lists`.
fn change(
    u: &mut Unstructured<'_>,
    which: u8,
    sxid: Option<Xid>,
    texts: &mut [Vec<u8>; 2],
    lists: &mut [(usize, Vec<u8>); 2],
) -> Result<PgOutputMessage<'static>> {
    Ok(match which {
        3 => {
            *texts = [cstr(u, NAME_MAX)?, cstr(u, NAME_MAX)?];
            lists[0] = columns(u)?;
            let ri = [
                ReplicaIdentity::Default,
                ReplicaIdentity::Nothing,
                ReplicaIdentity::Full,
                ReplicaIdentity::Index,
            ][u.choose_index(4)?];
            PgOutputMessage::Relation(Relation {
                xid: sxid,
                oid: edge(u)?,
                namespace: &[],
                name: &[],
                replica_identity: ri,
                columns: Seq::from_wire(0, &[]),
            })
        }
        4 => {
            *texts = [cstr(u, NAME_MAX)?, cstr(u, NAME_MAX)?];
            PgOutputMessage::Type(Type {
                xid: sxid,
                oid: edge(u)?,
                namespace: &[],
                name: &[],
            })
        }
        5 => {
            lists[0] = tuple(u)?;
            PgOutputMessage::Insert(Insert {
                xid: sxid,
                relation: edge(u)?,
                new: Seq::from_wire(0, &[]),
            })
        }
        6 => {
            // The old tuple (none, key or full) is lists[1]; the new one lists[0].
            let old = match u.int_in_range(0u8..=2)? {
                0 => None,
                1 => Some(OldTuple::Key(Seq::from_wire(0, &[]))),
                _ => Some(OldTuple::Full(Seq::from_wire(0, &[]))),
            };
            *lists = [tuple(u)?, tuple(u)?];
            PgOutputMessage::Update(Update {
                xid: sxid,
                relation: edge(u)?,
                old,
                new: Seq::from_wire(0, &[]),
            })
        }
        7 => {
            lists[0] = tuple(u)?;
            let old = if u.arbitrary()? {
                OldTuple::Key(Seq::from_wire(0, &[]))
            } else {
                OldTuple::Full(Seq::from_wire(0, &[]))
            };
            PgOutputMessage::Delete(Delete {
                xid: sxid,
                relation: edge(u)?,
                old,
            })
        }
        8 => {
            lists[0] = relation_oids(u)?;
            PgOutputMessage::Truncate(Truncate {
                xid: sxid,
                cascade: u.arbitrary()?,
                restart_identity: u.arbitrary()?,
                relations: Seq::from_wire(0, &[]),
            })
        }
        _ => {
            *texts = [cstr(u, NAME_MAX)?, bytes(u, VALUE_MAX)?];
            PgOutputMessage::Message(LogicalMessage {
                xid: sxid,
                transactional: u.arbitrary()?,
                lsn: lsn(u)?,
                prefix: &[],
                content: &[],
            })
        }
    })
}

impl<'a> Arbitrary<'a> for OwnedPgOutput {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let version = ProtoVersion::ALL[u.choose_index(ProtoVersion::ALL.len())?];
        let Parts {
            shape,
            texts,
            lists,
        } = generate(u, version)?;
        Ok(OwnedPgOutput {
            version,
            shape,
            texts,
            lists,
        })
    }
}

impl OwnedPgOutput {
    /// The protocol version the message was generated for.
    pub fn version(&self) -> ProtoVersion {
        self.version
    }

    /// The generated message, borrowing from `self`.
    pub fn message(&self) -> PgOutputMessage<'_> {
        let [t0, t1] = &self.texts;
        let list = |i: usize| -> TupleData<'_> {
            let (n, raw) = &self.lists[i];
            Seq::from_wire(*n, raw)
        };
        let old = |o: &OldTuple<'_>| match o {
            OldTuple::Key(_) => OldTuple::Key(list(1)),
            OldTuple::Full(_) => OldTuple::Full(list(1)),
        };
        let gid = |p: &Prepare<'_>| Prepare { gid: t0, ..*p };
        match &self.shape {
            PgOutputMessage::Origin(m) => PgOutputMessage::Origin(Origin { name: t0, ..*m }),
            PgOutputMessage::Relation(m) => PgOutputMessage::Relation(Relation {
                namespace: t0,
                name: t1,
                columns: Seq::from_wire(self.lists[0].0, &self.lists[0].1),
                ..*m
            }),
            PgOutputMessage::Type(m) => PgOutputMessage::Type(Type {
                namespace: t0,
                name: t1,
                ..*m
            }),
            PgOutputMessage::Insert(m) => PgOutputMessage::Insert(Insert { new: list(0), ..*m }),
            PgOutputMessage::Update(m) => PgOutputMessage::Update(Update {
                old: m.old.as_ref().map(old),
                new: list(0),
                ..*m
            }),
            PgOutputMessage::Delete(m) => PgOutputMessage::Delete(Delete {
                old: match m.old {
                    OldTuple::Key(_) => OldTuple::Key(list(0)),
                    OldTuple::Full(_) => OldTuple::Full(list(0)),
                },
                ..*m
            }),
            PgOutputMessage::Truncate(m) => PgOutputMessage::Truncate(Truncate {
                relations: Seq::from_wire(self.lists[0].0, &self.lists[0].1),
                ..*m
            }),
            PgOutputMessage::Message(m) => PgOutputMessage::Message(LogicalMessage {
                prefix: t0,
                content: t1,
                ..*m
            }),
            PgOutputMessage::BeginPrepare(p) => PgOutputMessage::BeginPrepare(gid(p)),
            PgOutputMessage::Prepare(p) => PgOutputMessage::Prepare(gid(p)),
            PgOutputMessage::StreamPrepare(p) => PgOutputMessage::StreamPrepare(gid(p)),
            PgOutputMessage::CommitPrepared(m) => {
                PgOutputMessage::CommitPrepared(CommitPrepared { gid: t0, ..*m })
            }
            PgOutputMessage::RollbackPrepared(m) => {
                PgOutputMessage::RollbackPrepared(RollbackPrepared { gid: t0, ..*m })
            }
            other => *other,
        }
    }
}
