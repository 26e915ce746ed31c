//! A minimal DER reader for the few certificate fields pgyard needs (the signature algorithm
//! for `tls-server-end-point`, the names a host is checked against): single-byte tags and
//! definite lengths of at most four bytes. Certificates come from the network, so every read
//! is bounds-checked and a malformed element is an error, never a panic.

/// Why an element could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DerError {
    /// The input ends inside the element.
    Truncated,
    /// A tag of more than one byte (none occurs in the fields read here).
    MultiByteTag,
    /// An indefinite length, or one of more than four bytes.
    UnsupportedLength,
    /// Another tag than the one expected.
    UnexpectedTag,
}

impl DerError {
    /// A short description, for error messages.
    pub fn text(self) -> &'static str {
        match self {
            DerError::Truncated => "truncated DER element",
            DerError::MultiByteTag => "multi-byte DER tag",
            DerError::UnsupportedLength => "unsupported DER length",
            DerError::UnexpectedTag => "unexpected DER tag",
        }
    }
}

/// Reads the element at the front of `input`: its tag, its contents, and what follows it.
pub fn element(input: &[u8]) -> Result<(u8, &[u8], &[u8]), DerError> {
    let (&tag, rest) = input.split_first().ok_or(DerError::Truncated)?;
    if tag & 0x1f == 0x1f {
        return Err(DerError::MultiByteTag);
    }
    let (&first, mut rest) = rest.split_first().ok_or(DerError::Truncated)?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 {
            return Err(DerError::UnsupportedLength);
        }
        if rest.len() < count {
            return Err(DerError::Truncated);
        }
        let (len_bytes, after) = rest.split_at(count);
        rest = after;
        // At most four bytes: fits a usize on every platform pgyard builds for.
        len_bytes
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b))
    };
    if rest.len() < len {
        return Err(DerError::Truncated);
    }
    let (contents, after) = rest.split_at(len);
    Ok((tag, contents, after))
}

/// Reads the element at the front of `input`, which must have tag `tag`: its contents and what
/// follows it.
pub fn expect(input: &[u8], tag: u8) -> Result<(&[u8], &[u8]), DerError> {
    match input.first() {
        Some(&t) if t != tag => Err(DerError::UnexpectedTag),
        _ => element(input).map(|(_, contents, after)| (contents, after)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_long_lengths_and_every_malformed_case() {
        assert_eq!(
            element(&[0x04, 2, 7, 8, 9]),
            Ok((0x04, &[7u8, 8][..], &[9u8][..]))
        );
        let mut long = vec![0x04, 0x81, 200];
        long.extend(std::iter::repeat_n(1u8, 200));
        assert_eq!(
            element(&long).map(|(_, c, r)| (c.len(), r.len())),
            Ok((200, 0))
        );
        assert_eq!(element(&[]), Err(DerError::Truncated));
        assert_eq!(element(&[0x04]), Err(DerError::Truncated));
        assert_eq!(element(&[0x04, 3, 1]), Err(DerError::Truncated));
        assert_eq!(element(&[0x04, 0x82, 1]), Err(DerError::Truncated));
        assert_eq!(element(&[0x1f, 1, 0]), Err(DerError::MultiByteTag));
        assert_eq!(element(&[0x04, 0x80]), Err(DerError::UnsupportedLength));
        assert_eq!(
            element(&[0x04, 0x85, 0, 0, 0, 0, 1]),
            Err(DerError::UnsupportedLength)
        );
        assert_eq!(expect(&[0x30, 0], 0x04), Err(DerError::UnexpectedTag));
        assert_eq!(expect(&[0x30, 1, 5], 0x30), Ok((&[5u8][..], &[][..])));
    }
}
