//! A minimal, safe binding of Debian's libpq 15 `PQconninfoParse`, linked by `build.rs`.
//!
//! Only what the benchmark and the corpus test need: parse a C string, walk the option array,
//! free it. The declarations mirror `/usr/include/postgresql/libpq-fe.h`.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr::NonNull;

/// `PQconninfoOption` from `libpq-fe.h`, field for field.
#[repr(C)]
struct PQconninfoOption {
    keyword: *mut c_char,
    envvar: *mut c_char,
    compiled: *mut c_char,
    val: *mut c_char,
    label: *mut c_char,
    dispchar: *mut c_char,
    dispsize: c_int,
}

extern "C" {
    fn PQconninfoParse(conninfo: *const c_char, errmsg: *mut *mut c_char) -> *mut PQconninfoOption;
    fn PQconninfoFree(conn_options: *mut PQconninfoOption);
    fn PQfreemem(ptr: *mut c_void);
}

/// The option array `PQconninfoParse` returned; freed with `PQconninfoFree` on drop.
pub struct Options {
    ptr: NonNull<PQconninfoOption>,
}

impl Options {
    /// Every option of libpq's table in order: its keyword and its value, if the string set it.
    pub fn iter(&self) -> impl Iterator<Item = (&CStr, Option<&CStr>)> + '_ {
        let base = self.ptr.as_ptr();
        (0..)
            .map(move |i| {
                // SAFETY: libpq terminates the array with an entry whose `keyword` is NULL, and
                // `take_while` below stops at that entry, so `i` never passes the terminator.
                unsafe { &*base.add(i) }
            })
            .take_while(|opt| !opt.keyword.is_null())
            .map(|opt| {
                // SAFETY: `keyword` is non-NULL (checked above) and points at a static,
                // NUL-terminated string; `val` is NULL or a NUL-terminated string owned by the
                // array, which outlives the borrow of `self`.
                unsafe {
                    let keyword = CStr::from_ptr(opt.keyword);
                    let val = (!opt.val.is_null()).then(|| CStr::from_ptr(opt.val));
                    (keyword, val)
                }
            })
    }
}

impl Drop for Options {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `PQconninfoParse`, is freed exactly once, here.
        unsafe { PQconninfoFree(self.ptr.as_ptr()) }
    }
}

/// Parses `conninfo` with libpq 15's `PQconninfoParse`; on failure, libpq's error message.
pub fn conninfo_parse(conninfo: &CStr) -> Result<Options, String> {
    let mut errmsg: *mut c_char = std::ptr::null_mut();
    // SAFETY: `conninfo` is a valid NUL-terminated string and `errmsg` a valid out-pointer;
    // libpq reads the first and writes NULL or a malloc'd string into the second.
    let ptr = unsafe { PQconninfoParse(conninfo.as_ptr(), &mut errmsg) };
    if let Some(ptr) = NonNull::new(ptr) {
        return Ok(Options { ptr });
    }
    if errmsg.is_null() {
        return Err("out of memory".to_owned());
    }
    // SAFETY: libpq set `errmsg` to a malloc'd, NUL-terminated string that we own; it is copied
    // out before `PQfreemem` releases it, exactly once.
    unsafe {
        let msg = CStr::from_ptr(errmsg).to_string_lossy().into_owned();
        PQfreemem(errmsg.cast());
        Err(msg)
    }
}
