//! The `wire` benchmark measures like with like: on its backend stream pgyard and
//! postgres-protocol see the same messages and the same DataRow field bytes, and the timed
//! routines agree; on its frontend batch both encoders write the same bytes, which decode to
//! the intended messages.

use bytes::BytesMut;
use fallible_iterator::FallibleIterator;
use pgyard_benches::wire::{self, FrontendBatch, Tally, COLUMNS, ROWS};
use pgyard_wire::backend::{BackendMessage, DataRow};
use pgyard_wire::frame;
use pgyard_wire::frontend::{FrontendMessage, Target};
use postgres_protocol::message::backend::Message;

/// One decoded backend message, owned, in a form both decoders can produce.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Row(Vec<Option<Vec<u8>>>),
    Columns(Vec<(Vec<u8>, u32)>),
    Complete(Vec<u8>),
    Ready(u8),
}

fn pgyard_messages(stream: &[u8]) -> Vec<Seen> {
    let mut out = Vec::new();
    let mut it = frame::frames(stream, wire::LEN_MAX);
    for f in &mut it {
        let f = f.expect("pgyard frames the stream");
        let seen = if f.tag == b'D' {
            let row = DataRow::decode(f.body).expect("pgyard decodes the DataRow");
            Seen::Row(row.fields().map(|v| v.map(<[u8]>::to_vec)).collect())
        } else {
            match BackendMessage::decode(f.tag, f.body).expect("pgyard decodes the message") {
                BackendMessage::RowDescription(d) => {
                    Seen::Columns(d.fields().map(|c| (c.name.to_vec(), c.type_oid)).collect())
                }
                BackendMessage::CommandComplete(tag) => Seen::Complete(tag.to_vec()),
                BackendMessage::ReadyForQuery(s) => Seen::Ready(s.byte()),
                m => panic!("unexpected message in the stream: {m:?}"),
            }
        };
        out.push(seen);
    }
    assert!(it.remainder().is_empty());
    out
}

fn postgres_protocol_messages(stream: &[u8]) -> Vec<Seen> {
    let mut buf = BytesMut::from(stream);
    let mut out = Vec::new();
    while !buf.is_empty() {
        let m = Message::parse(&mut buf)
            .expect("postgres-protocol parses the stream")
            .expect("the stream ends on a message");
        out.push(match m {
            Message::DataRow(row) => {
                let data = row.buffer();
                Seen::Row(
                    row.ranges()
                        .map(|r| Ok(r.map(|r| data[r].to_vec())))
                        .collect()
                        .expect("postgres-protocol reads the DataRow"),
                )
            }
            Message::RowDescription(d) => Seen::Columns(
                d.fields()
                    .map(|c| Ok((c.name().as_bytes().to_vec(), c.type_oid())))
                    .collect()
                    .expect("postgres-protocol reads the RowDescription"),
            ),
            Message::CommandComplete(c) => Seen::Complete(c.tag().unwrap().as_bytes().to_vec()),
            Message::ReadyForQuery(z) => Seen::Ready(z.status()),
            _ => panic!("unexpected message in the stream"),
        });
    }
    out
}

#[test]
fn stream_is_deterministic_and_realistic() {
    let stream = wire::backend_stream();
    assert_eq!(stream, wire::backend_stream(), "the stream is seeded");
    assert!(
        (768 << 10..1_280 << 10).contains(&stream.len()),
        "about 1 MiB, got {} bytes",
        stream.len()
    );
    let seen = pgyard_messages(&stream);
    assert_eq!(seen.len(), ROWS + 3);
    let expected_columns: Vec<(Vec<u8>, u32)> = COLUMNS
        .iter()
        .map(|&(n, oid)| (n.as_bytes().to_vec(), oid))
        .collect();
    assert_eq!(seen[0], Seen::Columns(expected_columns));
    assert_eq!(
        seen[ROWS + 1],
        Seen::Complete(format!("SELECT {ROWS}").into_bytes())
    );
    assert_eq!(seen[ROWS + 2], Seen::Ready(b'I'));
    let (mut nulls, mut wide, mut narrow) = (0, 0, 0);
    for s in &seen[1..=ROWS] {
        let Seen::Row(fields) = s else {
            panic!("rows sit between RowDescription and CommandComplete");
        };
        assert_eq!(fields.len(), COLUMNS.len());
        for f in fields {
            match f {
                None => nulls += 1,
                Some(v) if v.len() >= 200 => {
                    assert!(v.len() <= 1_000);
                    wide += 1;
                }
                Some(_) => narrow += 1,
            }
        }
    }
    // Mixed widths: every kind is well represented.
    assert!(nulls > ROWS / 4, "{nulls} NULLs");
    assert!(wide > ROWS / 10, "{wide} wide fields");
    assert!(narrow > ROWS * 5, "{narrow} narrow fields");
}

#[test]
fn both_decoders_see_the_same_messages_and_fields() {
    let stream = wire::backend_stream();
    let a = pgyard_messages(&stream);
    let b = postgres_protocol_messages(&stream);
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert_eq!(x, y, "message {i} differs");
    }
}

#[test]
fn timed_routines_agree() {
    routines_agree::<true>();
    routines_agree::<false>();
    // Touching the fields is what sets `field_mix`; counting them leaves it alone.
    let stream = wire::backend_stream();
    assert_ne!(wire::pgyard_visit::<true>(&stream).field_mix, 0);
    assert_eq!(wire::pgyard_visit::<false>(&stream).field_mix, 0);
}

/// The four timed routines, with or without touching each field's bytes, see the same.
fn routines_agree<const TOUCH: bool>() {
    let stream = wire::backend_stream();
    let t = wire::pgyard_visit::<TOUCH>(&stream);
    let mut buf = BytesMut::from(&stream[..]);
    assert_eq!(wire::postgres_protocol_visit::<TOUCH>(&mut buf), t);
    assert!(
        buf.is_empty(),
        "postgres-protocol consumed the whole stream"
    );
    let mut decoder = wire::pgyard_decoder(&stream);
    assert_eq!(wire::pgyard_decoder_visit::<TOUCH>(&mut decoder), t);
    assert_eq!(decoder.buffered(), 0);

    // The tally covers every field of every row.
    let Tally {
        messages,
        fields,
        nulls,
        columns,
        other,
        ..
    } = t;
    assert_eq!(messages, ROWS as u64 + 3);
    assert_eq!(fields + nulls, (ROWS * COLUMNS.len()) as u64);
    assert_eq!(columns, COLUMNS.len() as u64);
    assert_eq!(other, 0);

    // The walk sees the same frames and row fields, and nothing of the other messages.
    let walked = wire::walk_visit::<TOUCH>(&stream);
    assert_eq!(
        walked,
        Tally {
            messages: t.messages,
            fields: t.fields,
            nulls: t.nulls,
            field_bytes: t.field_bytes,
            field_mix: t.field_mix,
            ..Tally::default()
        }
    );

    // So does the walk over two rows at a time.
    assert_eq!(wire::walk_pairs_visit::<TOUCH>(&stream), walked);

    let mut dst = vec![0; stream.len()];
    wire::memcpy(&mut dst, &stream);
    assert_eq!(dst, stream);
}

#[test]
fn both_encoders_write_the_same_batch() {
    let batch = FrontendBatch::new();
    let mut a = BytesMut::new();
    let mut b = BytesMut::new();
    wire::pgyard_encode(&batch, &mut a);
    wire::postgres_protocol_encode(&batch, &mut b);
    assert_eq!(a, b, "byte-identical batches");

    // And the bytes say what the batch means.
    let mut it = frame::frames(&a, wire::LEN_MAX);
    let messages: Vec<FrontendMessage<'_>> = (&mut it)
        .map(|f| {
            let f = f.expect("the batch frames");
            FrontendMessage::decode(f.tag, f.body).expect("pgyard decodes the message")
        })
        .collect();
    assert!(it.remainder().is_empty());
    assert_eq!(messages.len(), 5 * batch.params.len());
    for (chunk, params) in messages.chunks(5).zip(&batch.params) {
        let [FrontendMessage::Parse(p), FrontendMessage::Bind(bind), FrontendMessage::Describe(d), FrontendMessage::Execute(e), FrontendMessage::Sync] =
            chunk
        else {
            panic!("expected Parse, Bind, Describe, Execute, Sync: {chunk:?}");
        };
        assert_eq!((p.name, p.query), (&b""[..], wire::BATCH_QUERY.as_bytes()));
        assert_eq!(
            p.param_types.iter().collect::<Vec<_>>(),
            wire::BATCH_PARAM_TYPES
        );
        assert_eq!((bind.portal, bind.statement), (&b""[..], &b""[..]));
        assert!(bind.param_formats.is_empty());
        let values: Vec<Option<&[u8]>> = bind.params.iter().collect();
        let expected: Vec<Option<&[u8]>> = params.iter().map(|v| Some(&v[..])).collect();
        assert_eq!(values, expected);
        assert_eq!(bind.result_formats.iter().collect::<Vec<_>>(), [0]);
        assert_eq!((d.target, d.name), (Target::Portal, &b""[..]));
        assert_eq!((e.portal, e.max_rows), (&b""[..], 0));
    }
}
