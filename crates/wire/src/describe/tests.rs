//! Unit tests of the describer on hand-built captures.

use super::*;

fn frame(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![tag];
    v.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
    v.extend_from_slice(body);
    v
}

const BACKEND: WalkOptions = WalkOptions {
    side: Side::Backend,
    replication: true,
};

#[test]
fn backend_answer_then_frames() {
    let mut s = b"N".to_vec();
    s.extend(frame(b'R', &0i32.to_be_bytes()));
    s.extend(frame(b'N', b"SNOTICE\0\0"));
    s.extend(frame(b'Z', b"I"));
    let d = describe_all(&s, BACKEND).expect("walks");
    let names: Vec<_> = d.iter().map(|d| d.type_name).collect();
    assert_eq!(
        names,
        [
            "EncryptionResponse",
            "AuthenticationOk",
            "NoticeResponse",
            "ReadyForQuery"
        ]
    );
    assert_eq!((d[0].tag, d[0].len), (Some(b'N'), None));
    assert_eq!((d[1].offset, d[1].len), (1, Some(8)));
}

#[test]
fn replication_layers_follow_their_copy_data() {
    let mut s = frame(b'W', &[0, 0, 0]);
    let mut x = vec![b'w'];
    x.extend_from_slice(&[0; 24]);
    x.extend_from_slice(&[b'S', 0, 0, 0, 7, 1]);
    s.extend(frame(b'd', &x));
    let mut x = vec![b'w'];
    x.extend_from_slice(&[0; 24]);
    x.extend_from_slice(&[b'I', 0, 0, 0, 7, 0, 0, 64, 0, b'N', 0, 1, b'n']);
    s.extend(frame(b'd', &x));
    let d = describe_all(&s, BACKEND).expect("walks");
    let got: Vec<_> = d.iter().map(|d| (d.layer, d.type_name)).collect();
    assert_eq!(
        got,
        [
            (Layer::Backend, "CopyBothResponse"),
            (Layer::Backend, "CopyData"),
            (Layer::Replication, "XLogData"),
            (Layer::PgOutput, "Stream Start"),
            (Layer::Backend, "CopyData"),
            (Layer::Replication, "XLogData"),
            (Layer::PgOutput, "Insert"),
        ]
    );
    assert_eq!(d[6].fields[0], ("xid", Value::Int(7)));
    assert_eq!(d[6].offset, 8 + 5 + 25 + 6 + 5 + 25);
}

#[test]
fn errors_name_the_byte_offset() {
    let mut s = frame(b'Z', b"I");
    s.extend(frame(b'Z', b"X"));
    let e = describe_all(&s, BACKEND).expect_err("bad status");
    assert_eq!((e.offset, e.message_offset), (11, 6));
    let e = describe_all(&s[..8], BACKEND).expect_err("truncated");
    assert_eq!((e.offset, e.message_offset), (8, 6));
    assert!(e.to_string().contains("byte offset 8"), "{e}");
}

#[test]
fn frontend_sasl_then_password_inference() {
    let mut s = Vec::new();
    s.extend_from_slice(&8u32.to_be_bytes());
    s.extend_from_slice(&crate::frame::SSL_REQUEST_CODE.to_be_bytes());
    let mut body = b"SCRAM-SHA-256\0".to_vec();
    body.extend_from_slice(&3i32.to_be_bytes());
    body.extend_from_slice(b"n,,");
    s.extend_from_slice(&[0, 0, 0, 13, 0, 3, 0, 0, b'u', 0, b'x', 0, 0]);
    s.extend(frame(b'p', &body));
    s.extend(frame(b'p', b"c=biws,r=abc"));
    let opts = WalkOptions {
        side: Side::Frontend,
        replication: false,
    };
    let d = describe_all(&s, opts).expect("walks");
    let names: Vec<_> = d.iter().map(|d| d.type_name).collect();
    assert_eq!(
        names,
        [
            "SSLRequest",
            "StartupMessage",
            "SASLInitialResponse",
            "SASLResponse"
        ]
    );
    assert_eq!(d[1].tag, None);
}
