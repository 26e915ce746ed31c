//! What the randomized differential tests share: a small seeded generator, so that each case
//! is named by its seed and replays alone on every platform, and the one way they change the
//! process environment that libpq reads.

#![allow(unsafe_code)]

/// SplitMix64: seeded, platform-independent, and enough for drawing test cases.
#[derive(Clone, Debug)]
pub struct Draw(pub u64);

impl Draw {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (the slight modulo bias does not matter here); `n` must not be 0.
    pub fn below(&mut self, n: u64) -> usize {
        (self.next_u64() % n) as usize
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    /// One of `from`, which must not be empty.
    pub fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len() as u64)]
    }
}

/// Sets the environment variable `name` to `value`, or removes it for `None`.
///
/// # Safety
/// No other thread of the process may read or write the environment meanwhile (libpq reads
/// it too): call it only from a test binary holding that one test.
pub unsafe fn set_env(name: &str, value: Option<&str>) {
    // SAFETY: the caller guarantees that no other thread touches the environment.
    match value {
        Some(v) => unsafe { std::env::set_var(name, v) },
        None => unsafe { std::env::remove_var(name) },
    }
}

/// Variables that would let the machine's own settings into a connect: its password and
/// service files, and the defaults `PG…` variables give.
const CONNECT_VARIABLES: [&str; 16] = [
    "PGPASSFILE",
    "PGPASSWORD",
    "PGSERVICE",
    "PGSERVICEFILE",
    "PGSSLMODE",
    "PGREQUIREAUTH",
    "PGOPTIONS",
    "PGAPPNAME",
    "PGTARGETSESSIONATTRS",
    "PGHOST",
    "PGHOSTADDR",
    "PGPORT",
    "PGUSER",
    "PGDATABASE",
    "PGCONNECT_TIMEOUT",
    "PGCHANNELBINDING",
];

/// Points `HOME` at `home` (so no `~/.pgpass` or `~/.pg_service.conf` of the machine's is
/// read) and removes the `PG…` variables that would otherwise set a connect's defaults.
///
/// # Safety
/// As [`set_env`].
pub unsafe fn isolate_env(home: &std::path::Path) {
    // SAFETY: passed on from the caller.
    unsafe {
        set_env("HOME", Some(&home.to_string_lossy()));
        for v in CONNECT_VARIABLES {
            set_env(v, None);
        }
    }
}
