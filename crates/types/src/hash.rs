//! A fast hasher for in-process hash maps whose keys are short byte strings and small
//! integers: eight bytes per multiply-rotate step. Not resistant to chosen keys: for maps
//! whose keys come from the program's own data, where SipHash cost more than the lookup.

use std::hash::Hasher;

/// Eight bytes at a time, multiply-rotate, with a final fold so that the low bits (which
/// pick buckets) depend on the high ones. Use with `BuildHasherDefault<WordHasher>`.
#[derive(Clone, Copy, Debug, Default)]
pub struct WordHasher(u64);

impl WordHasher {
    fn mix(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for WordHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.mix(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            // The length keeps "a" and "a\0" apart.
            self.mix(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 59));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.mix(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.mix(u64::from(n));
    }

    fn write_usize(&mut self, n: usize) {
        self.mix(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 29)
    }
}

#[cfg(test)]
mod tests {
    use super::WordHasher;
    use std::hash::Hasher;

    fn hash(bytes: &[u8]) -> u64 {
        let mut h = WordHasher::default();
        h.write(bytes);
        h.finish()
    }

    #[test]
    fn trailing_zeros_and_word_boundaries_change_the_hash() {
        let inputs: [&[u8]; 6] = [b"", b"a", b"a\0", b"abcdefgh", b"abcdefgh\0", b"abcdefghi"];
        for (i, a) in inputs.iter().enumerate() {
            for b in &inputs[i + 1..] {
                assert_ne!(hash(a), hash(b), "{a:?} and {b:?}");
            }
        }
    }
}
