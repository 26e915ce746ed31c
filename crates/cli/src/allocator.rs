//! The process's allocator: mimalloc, entered where the layout allows through its plain
//! `malloc`-style calls.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as mi;

/// Every mimalloc block is aligned to a machine word (its size classes are whole words: a
/// 24-byte block is only 8-aligned, so `MI_MAX_ALIGN_SIZE`, 16, is not a bound a plain call
/// keeps), so a layout asking no more needs none of the aligned calls' bookkeeping.
const PLAIN_ALIGN: usize = std::mem::size_of::<usize>();

/// mimalloc through its unaligned entry points for ordinary layouts. `mimalloc::MiMalloc`
/// sends every request through `mi_malloc_aligned`, whose extra layer showed as 3 % of the
/// simulator's time, which allocates and frees several thousand small blocks per seed.
pub struct Allocator;

// SAFETY: each call hands its request to mimalloc, which returns null or a block of at least
// `layout.size()` bytes aligned to `layout.align()`: the plain calls only where the alignment
// asked for is at most a word (which every mimalloc block has), the aligned calls otherwise.
// A block is freed and resized only by mimalloc, which allocated it, and resized by the call
// of the same kind, as the layout's alignment does not change.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Allocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: see the impl.
        unsafe {
            if layout.align() <= PLAIN_ALIGN {
                mi::mi_malloc(layout.size()).cast()
            } else {
                mi::mi_malloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: see the impl.
        unsafe {
            if layout.align() <= PLAIN_ALIGN {
                mi::mi_zalloc(layout.size()).cast()
            } else {
                mi::mi_zalloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: see the impl; `ptr` came from this allocator.
        unsafe { mi::mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: see the impl; `ptr` came from this allocator with `layout`.
        unsafe {
            if layout.align() <= PLAIN_ALIGN {
                mi::mi_realloc(ptr.cast::<c_void>(), new_size).cast()
            } else {
                mi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::alloc::{GlobalAlloc, Layout};

    #[test]
    #[allow(unsafe_code)]
    fn blocks_keep_their_alignment_and_contents() {
        let a = super::Allocator;
        for align in [1usize, 2, 8, 16, 32, 64, 4096] {
            for size in [1usize, 7, 8, 16, 24, 40, 56, 100, 5000, 70_000] {
                let layout = Layout::from_size_align(size, align).expect("valid layout");
                // SAFETY: non-zero sizes, valid layouts; every block is freed with its layout.
                unsafe {
                    let p = a.alloc(layout);
                    assert!(!p.is_null());
                    assert_eq!(p as usize % align, 0, "size {size} align {align}");
                    p.write_bytes(0xA5, size);
                    let q = a.realloc(p, layout, size * 3);
                    assert_eq!(q as usize % align, 0, "grown: size {size} align {align}");
                    assert!((0..size).all(|i| *q.add(i) == 0xA5));
                    a.dealloc(q, Layout::from_size_align(size * 3, align).expect("valid"));
                    let z = a.alloc_zeroed(layout);
                    assert_eq!(z as usize % align, 0);
                    assert!((0..size).all(|i| *z.add(i) == 0));
                    a.dealloc(z, layout);
                }
            }
        }
    }
}
