//! The building blocks of what jsservice writes for itself: the stream
//! log's entries, state snapshots and catch-up chunks. Every field is
//! little-endian; text and bytes carry a `u32` length before them.

use bytes::{Buf, BufMut, Bytes, BytesMut};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("stream entry cut short")]
    Short,
    #[error("unknown stream entry kind {0}")]
    Kind(u8),
    #[error("stream entry text is not UTF-8")]
    Utf8,
}

pub(crate) fn put_bytes(b: &mut BytesMut, v: &[u8]) {
    b.put_u32_le(v.len() as u32);
    b.put_slice(v);
}

pub(crate) fn get_bytes(b: &mut &[u8]) -> Result<Bytes, DecodeError> {
    get_bytes_in(b, None)
}

/// A length-prefixed field: a slice of `owner` when given (`b` must then
/// be a part of it), else a copy.
pub(crate) fn get_bytes_in(b: &mut &[u8], owner: Option<&Bytes>) -> Result<Bytes, DecodeError> {
    if b.remaining() < 4 {
        return Err(DecodeError::Short);
    }
    let n = b.get_u32_le() as usize;
    if b.remaining() < n {
        return Err(DecodeError::Short);
    }
    let field = &b[..n];
    let v = match owner {
        Some(owner) => owner.slice_ref(field),
        None => Bytes::copy_from_slice(field),
    };
    b.advance(n);
    Ok(v)
}

pub(crate) fn get_string(b: &mut &[u8]) -> Result<String, DecodeError> {
    String::from_utf8(get_bytes(b)?.to_vec()).map_err(|_| DecodeError::Utf8)
}

/// A message's subject, optional headers and payload.
pub(crate) fn put_msg(b: &mut BytesMut, subject: &str, headers: Option<&[u8]>, payload: &[u8]) {
    put_bytes(b, subject.as_bytes());
    match headers {
        Some(h) => {
            b.put_u8(1);
            put_bytes(b, h);
        }
        None => b.put_u8(0),
    }
    put_bytes(b, payload);
}

pub(crate) fn get_msg(b: &mut &[u8]) -> Result<(String, Option<Bytes>, Bytes), DecodeError> {
    get_msg_in(b, None)
}

/// A message, its headers and payload slices of `owner` when given (see
/// [`get_bytes_in`]).
pub(crate) fn get_msg_in(
    b: &mut &[u8],
    owner: Option<&Bytes>,
) -> Result<(String, Option<Bytes>, Bytes), DecodeError> {
    let subject = get_string(b)?;
    if b.remaining() < 1 {
        return Err(DecodeError::Short);
    }
    let headers = match b.get_u8() {
        0 => None,
        _ => Some(get_bytes_in(b, owner)?),
    };
    Ok((subject, headers, get_bytes_in(b, owner)?))
}

pub(crate) fn put_opt(b: &mut BytesMut, v: &Option<String>) {
    match v {
        Some(v) => {
            b.put_u8(1);
            put_bytes(b, v.as_bytes());
        }
        None => b.put_u8(0),
    }
}

pub(crate) fn get_opt(b: &mut &[u8]) -> Result<Option<String>, DecodeError> {
    if b.remaining() < 1 {
        return Err(DecodeError::Short);
    }
    match b.get_u8() {
        0 => Ok(None),
        _ => Ok(Some(get_string(b)?)),
    }
}
