//! Typed message builders, the driver fast path: plain slices in, one reservation per
//! message, the length written directly.

use bytes::{BufMut, BytesMut};

use super::{raw_frame, tag, Target};
use crate::frame::{
    count_u16, len_i32, put_cstr, put_frame, put_i16s, put_nullable, put_values, values_size,
    EncodeError,
};

/// Writes a Parse.
///
/// The hot builders (Parse, Bind, Describe, Execute, Sync) validate everything first, then
/// compute the exact length and write the header with it, so nothing is patched or undone
/// and fixed-size runs of fields go out in one copy.
#[inline]
pub fn encode_parse(
    name: &[u8],
    query: &[u8],
    param_types: &[u32],
    buf: &mut BytesMut,
) -> Result<(), EncodeError> {
    check_cstr(name, "statement name")?;
    check_cstr(query, "query")?;
    let n = count_u16(param_types.len(), "OID count")?;
    let len = 4 + name.len() + 1 + query.len() + 1 + 2 + 4 * param_types.len();
    let h = header(tag::PARSE, len)?;
    buf.reserve(len + 1);
    put_header_cstr(buf, h, name);
    buf.put_slice(query);
    let c = n.to_be_bytes();
    match *param_types {
        [] => buf.put_slice(&[0, c[0], c[1]]),
        [t] => {
            let t = t.to_be_bytes();
            buf.put_slice(&[0, c[0], c[1], t[0], t[1], t[2], t[3]]);
        }
        _ => {
            buf.put_slice(&[0, c[0], c[1]]);
            for &t in param_types {
                buf.put_u32(t);
            }
        }
    }
    Ok(())
}

/// Writes a Bind.
#[inline]
pub fn encode_bind(
    portal: &[u8],
    statement: &[u8],
    param_formats: &[i16],
    params: &[Option<&[u8]>],
    result_formats: &[i16],
    buf: &mut BytesMut,
) -> Result<(), EncodeError> {
    check_cstr(portal, "portal name")?;
    check_cstr(statement, "statement name")?;
    let npf = count_u16(param_formats.len(), "parameter format count")?;
    let nv = count_u16(params.len(), "value count")?;
    let nrf = count_u16(result_formats.len(), "result format count")?;
    let mut values_len = 0usize;
    for v in params.iter().flatten() {
        len_i32(v.len(), "value")?;
        values_len += v.len();
    }
    let len = 4
        + portal.len()
        + 1
        + statement.len()
        + 1
        + 2
        + 2 * param_formats.len()
        + 2
        + 4 * params.len()
        + values_len
        + 2
        + 2 * result_formats.len();
    let h = header(tag::BIND, len)?;
    buf.reserve(len + 1);
    let c = npf.to_be_bytes();
    let v = nv.to_be_bytes();
    if portal.is_empty() && statement.is_empty() {
        // The common case (unnamed portal and statement): one copy up to the value count.
        match *param_formats {
            [] => buf.put_slice(&[h[0], h[1], h[2], h[3], h[4], 0, 0, c[0], c[1], v[0], v[1]]),
            [f] => {
                let f = f.to_be_bytes();
                buf.put_slice(&[
                    h[0], h[1], h[2], h[3], h[4], 0, 0, c[0], c[1], f[0], f[1], v[0], v[1],
                ]);
            }
            _ => {
                buf.put_slice(&[h[0], h[1], h[2], h[3], h[4], 0, 0, c[0], c[1]]);
                for &f in param_formats {
                    buf.put_i16(f);
                }
                buf.put_slice(&v);
            }
        }
    } else {
        put_header_cstr(buf, h, portal);
        buf.put_slice(statement);
        buf.put_slice(&[0, c[0], c[1]]);
        for &f in param_formats {
            buf.put_i16(f);
        }
        buf.put_slice(&v);
    }
    for v in params {
        match v {
            None => buf.put_slice(&[0xff; 4]),
            Some(v) => {
                // Checked above to fit an Int32.
                buf.put_u32(v.len() as u32);
                buf.put_slice(v);
            }
        }
    }
    let c = nrf.to_be_bytes();
    match *result_formats {
        [] => buf.put_slice(&c),
        [f] => {
            let f = f.to_be_bytes();
            buf.put_slice(&[c[0], c[1], f[0], f[1]]);
        }
        _ => {
            buf.put_slice(&c);
            for &f in result_formats {
                buf.put_i16(f);
            }
        }
    }
    Ok(())
}

/// Writes a Describe.
#[inline]
pub fn encode_describe(target: Target, name: &[u8], buf: &mut BytesMut) -> Result<(), EncodeError> {
    check_cstr(name, "name")?;
    let len = 4 + 1 + name.len() + 1;
    let h = header(tag::DESCRIBE, len)?;
    buf.reserve(len + 1);
    if name.is_empty() {
        buf.put_slice(&[h[0], h[1], h[2], h[3], h[4], target.byte(), 0]);
    } else {
        buf.put_slice(&[h[0], h[1], h[2], h[3], h[4], target.byte()]);
        buf.put_slice(name);
        buf.put_u8(0);
    }
    Ok(())
}

/// Writes a Close.
pub fn encode_close(target: Target, name: &[u8], buf: &mut BytesMut) -> Result<(), EncodeError> {
    put_frame(buf, tag::CLOSE, name.len() + 2, |b| {
        b.put_u8(target.byte());
        put_cstr(b, name, "name")
    })
}

/// Writes an Execute.
#[inline]
pub fn encode_execute(portal: &[u8], max_rows: i32, buf: &mut BytesMut) -> Result<(), EncodeError> {
    check_cstr(portal, "portal name")?;
    let len = 4 + portal.len() + 1 + 4;
    let h = header(tag::EXECUTE, len)?;
    let r = max_rows.to_be_bytes();
    buf.reserve(len + 1);
    if portal.is_empty() {
        buf.put_slice(&[h[0], h[1], h[2], h[3], h[4], 0, r[0], r[1], r[2], r[3]]);
    } else {
        buf.put_slice(&h);
        buf.put_slice(portal);
        buf.put_slice(&[0, r[0], r[1], r[2], r[3]]);
    }
    Ok(())
}

/// Writes a Sync.
#[inline]
pub fn encode_sync(buf: &mut BytesMut) {
    buf.put_slice(&[tag::SYNC, 0, 0, 0, 4]);
}

/// Writes a Flush.
#[inline]
pub fn encode_flush(buf: &mut BytesMut) {
    buf.put_slice(&[tag::FLUSH, 0, 0, 0, 4]);
}

/// Writes a Terminate.
pub fn encode_terminate(buf: &mut BytesMut) {
    buf.put_slice(&[tag::TERMINATE, 0, 0, 0, 4]);
}

/// Writes a CopyDone.
pub fn encode_copy_done(buf: &mut BytesMut) {
    buf.put_slice(&[tag::COPY_DONE, 0, 0, 0, 4]);
}

/// Writes a Query.
pub fn encode_query(sql: &[u8], buf: &mut BytesMut) -> Result<(), EncodeError> {
    put_frame(buf, tag::QUERY, sql.len() + 1, |b| {
        put_cstr(b, sql, "query")
    })
}

/// Writes a CopyData (also valid as a backend message: the layout is the same).
pub fn encode_copy_data(data: &[u8], buf: &mut BytesMut) -> Result<(), EncodeError> {
    raw_frame(tag::COPY_DATA, data, buf)
}

/// Writes a CopyFail.
pub fn encode_copy_fail(message: &[u8], buf: &mut BytesMut) -> Result<(), EncodeError> {
    put_frame(buf, tag::COPY_FAIL, message.len() + 1, |b| {
        put_cstr(b, message, "CopyFail message")
    })
}

/// Writes a FunctionCall.
pub fn encode_function_call(
    function_oid: u32,
    arg_formats: &[i16],
    args: &[Option<&[u8]>],
    result_format: i16,
    buf: &mut BytesMut,
) -> Result<(), EncodeError> {
    let size = 8 + 2 * arg_formats.len() + values_size(args);
    put_frame(buf, tag::FUNCTION_CALL, size, |b| {
        b.put_u32(function_oid);
        put_i16s(b, arg_formats, "argument format count")?;
        put_values(b, args)?;
        b.put_i16(result_format);
        Ok(())
    })
}

/// Writes a PasswordMessage (cleartext or `md5…`).
pub fn encode_password(password: &[u8], buf: &mut BytesMut) -> Result<(), EncodeError> {
    put_frame(buf, tag::AUTH_RESPONSE, password.len() + 1, |b| {
        put_cstr(b, password, "password")
    })
}

/// Writes a GSSResponse.
pub fn encode_gss_response(token: &[u8], buf: &mut BytesMut) -> Result<(), EncodeError> {
    raw_frame(tag::AUTH_RESPONSE, token, buf)
}

/// Writes a SASLInitialResponse.
pub fn encode_sasl_initial_response(
    mechanism: &[u8],
    data: Option<&[u8]>,
    buf: &mut BytesMut,
) -> Result<(), EncodeError> {
    let size = mechanism.len() + 5 + data.map_or(0, <[u8]>::len);
    put_frame(buf, tag::AUTH_RESPONSE, size, |b| {
        put_cstr(b, mechanism, "SASL mechanism")?;
        put_nullable(b, data)
    })
}

/// Writes a SASLResponse.
pub fn encode_sasl_response(data: &[u8], buf: &mut BytesMut) -> Result<(), EncodeError> {
    raw_frame(tag::AUTH_RESPONSE, data, buf)
}

/// A typed header for a message whose length word will be `len`.
#[inline]
fn header(tag: u8, len: usize) -> Result<[u8; 5], EncodeError> {
    let l = len_i32(len, "message")?.to_be_bytes();
    Ok([tag, l[0], l[1], l[2], l[3]])
}

/// Writes a header followed by a C string (one copy when the string is empty).
#[inline]
fn put_header_cstr(buf: &mut BytesMut, h: [u8; 5], s: &[u8]) {
    if s.is_empty() {
        buf.put_slice(&[h[0], h[1], h[2], h[3], h[4], 0]);
    } else {
        buf.put_slice(&h);
        buf.put_slice(s);
        buf.put_u8(0);
    }
}

/// Refuses a C string with an embedded NUL.
#[inline]
fn check_cstr(s: &[u8], what: &'static str) -> Result<(), EncodeError> {
    if has_nul(s) {
        Err(EncodeError::NulInString { what })
    } else {
        Ok(())
    }
}

/// Whether `s` holds a zero byte. Statement texts are short to medium, where eight bytes at
/// a time beats both a byte loop and the set-up cost of a SIMD search.
#[inline]
pub(super) fn has_nul(s: &[u8]) -> bool {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let mut chunks = s.chunks_exact(8);
    for c in chunks.by_ref() {
        let x = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        // Non-zero exactly when some byte of `x` is zero.
        if x.wrapping_sub(LO) & !x & HI != 0 {
            return true;
        }
    }
    chunks.remainder().contains(&0)
}
