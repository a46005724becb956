//! Raw declarations of magpie's C API, `include/magpie.h`, written by hand: the header is short
//! and stable, and a hand-written list needs no bindgen or libclang at build time. Names, types
//! and semantics are the header's; read it for the contract of each function. Everything here is
//! `unsafe`; the `magpie` crate is the safe interface.
//!
//! Linking this crate links magpie (see build.rs): by default its magpie_* names only; with the
//! `override` feature the whole library, which also replaces the process's malloc and free.
#![allow(non_camel_case_types)]

use std::os::raw::{c_char, c_int, c_void};

/// An object cache (opaque).
#[repr(C)]
pub struct magpie_cache_t {
    _opaque: [u8; 0],
}

/// Object constructor: returns 0 on success; non-zero makes the allocation fail.
pub type magpie_ctor_t =
    unsafe extern "C" fn(obj: *mut c_void, arg: *mut c_void, flags: c_int) -> c_int;
/// Object destructor, run when the cache gives the object's memory back.
pub type magpie_dtor_t = unsafe extern "C" fn(obj: *mut c_void, arg: *mut c_void);

/// `magpie_cache_alloc` flag: may return NULL on memory exhaustion.
pub const MAGPIE_DEFAULT: c_int = 0x0;
/// `magpie_cache_alloc` flag: never returns NULL (reports and aborts instead).
pub const MAGPIE_NOFAIL: c_int = 0x1;

/// `magpie_stats_write` format: human-readable text.
pub const MAGPIE_STATS_TEXT: c_int = 0;
/// `magpie_stats_write` format: JSON.
pub const MAGPIE_STATS_JSON: c_int = 1;

extern "C" {
    pub fn magpie_malloc(size: usize) -> *mut c_void;
    pub fn magpie_free(ptr: *mut c_void);
    pub fn magpie_calloc(nmemb: usize, size: usize) -> *mut c_void;
    pub fn magpie_realloc(ptr: *mut c_void, size: usize) -> *mut c_void;
    pub fn magpie_aligned_alloc(alignment: usize, size: usize) -> *mut c_void;
    pub fn magpie_posix_memalign(out: *mut *mut c_void, alignment: usize, size: usize) -> c_int;
    pub fn magpie_usable_size(ptr: *mut c_void) -> usize;
    pub fn magpie_trim() -> usize;

    pub fn magpie_cache_create(
        name: *const c_char,
        size: usize,
        align: usize,
        ctor: Option<magpie_ctor_t>,
        dtor: Option<magpie_dtor_t>,
        arg: *mut c_void,
        flags: c_int,
    ) -> *mut magpie_cache_t;
    pub fn magpie_cache_alloc(cache: *mut magpie_cache_t, flags: c_int) -> *mut c_void;
    pub fn magpie_cache_free(cache: *mut magpie_cache_t, obj: *mut c_void);
    pub fn magpie_cache_destroy(cache: *mut magpie_cache_t);

    pub fn magpie_verify() -> c_int;
    pub fn magpie_stats_write(fd: c_int, format: c_int) -> c_int;
}
