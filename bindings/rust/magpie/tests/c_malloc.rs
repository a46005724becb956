//! Who serves the C malloc of a Rust program linked with magpie: glibc by default (magpie's
//! counters do not move when C code allocates), magpie with the `override` feature (they do, and
//! magpie knows the blocks' sizes). No #[global_allocator] here: Rust's own allocations go to
//! the system allocator, which is magpie's only under `override`.
use std::os::raw::c_void;

use magpie::Stats;

extern "C" {
    fn malloc(size: usize) -> *mut c_void;
    fn free(ptr: *mut c_void);
}

const BLOCKS: usize = 1000;

#[test]
fn c_malloc_is_magpies_only_with_override() {
    let before = Stats::read().unwrap();
    // SAFETY: blocks of the C malloc, freed once by the C free.
    let blocks: Vec<*mut c_void> = (0..BLOCKS).map(|_| unsafe { malloc(100) }).collect();
    assert!(blocks.iter().all(|p| !p.is_null()));
    let after = Stats::read().unwrap();
    let counted = after.allocs - before.allocs;
    if cfg!(feature = "override") {
        assert!(counted >= BLOCKS as u64, "magpie counted {} of {} C mallocs", counted, BLOCKS);
        // SAFETY: magpie's own blocks (a foreign one would be reported and abort the test).
        assert!(blocks.iter().all(|p| unsafe { magpie::sys::magpie_usable_size(*p) } >= 100));
    } else {
        assert!(counted < BLOCKS as u64, "magpie counted {} C mallocs without override", counted);
    }
    for p in blocks {
        // SAFETY: as above.
        unsafe { free(p) };
    }
}
