//! magpie, a multithreaded memory allocator, for Rust programs.
//!
//! [`Magpie`] is a [`GlobalAlloc`]: with
//!
//! ```
//! #[global_allocator]
//! static GLOBAL: magpie::Magpie = magpie::Magpie;
//!
//! fn main() {
//!     let squares: Vec<u64> = (0..1000).map(|i| i * i).collect();
//!     assert!(magpie::Stats::read().unwrap().allocs > 0);
//!     # drop(squares);
//! }
//! ```
//!
//! every Box, Vec, String and HashMap of the program comes from magpie's per-thread magazines.
//! [`ObjectCache`] is magpie's object cache (umem_cache_create semantics): objects of one type,
//! built by an initializer when they enter the cache and kept built across free and the next
//! allocation. [`Stats`] and [`report`] read magpie's statistics.
//!
//! By default only the magpie_* names of the C library are linked: the Rust heap is magpie's and
//! C code in the same process keeps the system malloc (the two never free each other's blocks).
//! The `override` feature links the whole library, which replaces malloc, free and C++
//! new/delete for the entire process too.
#![deny(unsafe_op_in_unsafe_fn)]

mod cache;
mod stats;

pub use cache::{CacheBox, ObjectCache};
pub use magpie_sys as sys;
pub use stats::{report, Format, Stats};

use std::alloc::{GlobalAlloc, Layout};
use std::os::raw::c_void;
use std::ptr;

/// magpie as a global allocator (a unit struct: the allocator's state is the C library's).
#[derive(Clone, Copy, Debug, Default)]
pub struct Magpie;

/// magpie_malloc's alignment for every block of at least this size: the fundamental alignment of
/// the C library on x86-64 and aarch64 glibc, which magpie keeps.
const MALLOC_ALIGN: usize = 16;

/// Whether magpie_malloc alone satisfies the layout (as the system allocator decides: a block is
/// aligned to the largest power of two up to MALLOC_ALIGN that divides its size).
#[inline]
fn malloc_fits(layout: &Layout) -> bool {
    layout.align() <= MALLOC_ALIGN && layout.align() <= layout.size()
}

unsafe impl GlobalAlloc for Magpie {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the C functions accept any size; Layout's alignment is a power of two.
        unsafe {
            if malloc_fits(&layout) {
                sys::magpie_malloc(layout.size()) as *mut u8
            } else {
                sys::magpie_aligned_alloc(layout.align(), layout.size()) as *mut u8
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if malloc_fits(&layout) {
            // calloc skips the clearing of pages fresh from the kernel.
            // SAFETY: as in alloc.
            return unsafe { sys::magpie_calloc(1, layout.size()) as *mut u8 };
        }
        // SAFETY: alloc's contract is ours; the block has layout.size() writable bytes.
        unsafe {
            let p = self.alloc(layout);
            if !p.is_null() {
                ptr::write_bytes(p, 0, layout.size());
            }
            p
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // magpie finds every block's size and class from its address (its page map), so the
        // layout adds nothing; magpie.h has no sized free.
        // SAFETY: the caller passes a block this allocator returned.
        unsafe { sys::magpie_free(ptr as *mut c_void) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new_layout = Layout::from_size_align(new_size, layout.align());
        match new_layout {
            // SAFETY: ptr is magpie's; magpie_realloc keeps the old block valid on failure.
            Ok(new) if malloc_fits(&new) => unsafe {
                sys::magpie_realloc(ptr as *mut c_void, new_size) as *mut u8
            },
            // An alignment realloc does not keep: a new block, the bytes copied, the old freed.
            // SAFETY: the caller's contract (new_size non-zero, fits isize with this alignment).
            Ok(new) => unsafe {
                let p = self.alloc(new);
                if !p.is_null() {
                    ptr::copy_nonoverlapping(ptr, p, layout.size().min(new_size));
                    self.dealloc(ptr, layout);
                }
                p
            },
            Err(_) => ptr::null_mut(),
        }
    }
}

/// Returns every free page magpie holds to the operating system; returns the bytes released.
pub fn trim() -> usize {
    // SAFETY: no preconditions.
    unsafe { sys::magpie_trim() }
}

/// Checks every cache, slab and arena of the heap. Returns the number of errors found (0: the
/// heap is sound); a broken heap is reported on stderr, and magpie aborts the process unless
/// MAGPIE_DEBUG asked it to continue.
pub fn verify() -> usize {
    // SAFETY: no preconditions.
    unsafe { sys::magpie_verify() as usize }
}
