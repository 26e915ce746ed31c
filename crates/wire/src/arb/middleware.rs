//! Generators for the proposed middleware message ([`OwnedMiddleware`]).

use arbitrary::{Arbitrary, Result, Unstructured};

use super::bytes;
use crate::middleware::{MiddlewareClass, MiddlewareMessage, POSTGRES_CLASS_MAX};

/// A generated middleware message: a class in either range (PostgreSQL project's or
/// external) at and around the boundary, and a payload; [`OwnedMiddleware::message`] lends it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedMiddleware {
    class: MiddlewareClass,
    payload: Vec<u8>,
}

impl<'a> Arbitrary<'a> for OwnedMiddleware {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let class = match u.int_in_range(0u8..=6)? {
            0 => 0,
            1 => POSTGRES_CLASS_MAX,
            2 => POSTGRES_CLASS_MAX + 1,
            3 => i64::MAX,
            _ => u.int_in_range(0..=i64::MAX)?,
        };
        let Some(class) = MiddlewareClass::new(class) else {
            return Err(arbitrary::Error::IncorrectFormat);
        };
        // Up to the splitter's default limit, at it, and one past it (the codec itself has no
        // limit below i32).
        let payload = match u.int_in_range(0u8..=15)? {
            0 => vec![0x5a; crate::middleware::DEFAULT_MIDDLEWARE_LEN_MAX as usize - 12],
            1 => vec![0xff; crate::middleware::DEFAULT_MIDDLEWARE_LEN_MAX as usize - 11],
            _ => bytes(u, 8 * 1024)?,
        };
        Ok(OwnedMiddleware { class, payload })
    }
}

impl OwnedMiddleware {
    /// The generated message, borrowing from `self`.
    pub fn message(&self) -> MiddlewareMessage<'_> {
        MiddlewareMessage {
            class: self.class,
            payload: &self.payload,
        }
    }
}
