//! magpie as the global allocator of a test program: many threads churning std collections, then
//! proof that magpie served them (its own counters, and its usable size of the program's
//! blocks, which it would report as foreign if they were glibc's); realloc, alloc_zeroed and
//! alignments up to 2 MiB through the GlobalAlloc interface.
use std::alloc::{self, GlobalAlloc, Layout};
use std::collections::HashMap;
use std::thread;

use magpie::{Format, Magpie, Stats};

#[global_allocator]
static GLOBAL: Magpie = Magpie;

const THREADS: usize = 8;
const ROUNDS: usize = 3000;

fn usable_size<T>(p: *const T) -> usize {
    // SAFETY: p is a live block of the global allocator, magpie.
    unsafe { magpie::sys::magpie_usable_size(p as *mut _) }
}

#[test]
fn threads_churn_on_magpie() {
    let before = Stats::read().unwrap();
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            thread::spawn(move || {
                let mut map: HashMap<String, Vec<usize>> = HashMap::new();
                let mut kept = Vec::new();
                for i in 0..ROUNDS {
                    let key = format!("thread {} key {}", t, i % 97);
                    let v: Vec<usize> = (0..i % 200).map(|k| k * t).collect();
                    if let Some(old) = map.insert(key.clone(), v) {
                        assert!(old.iter().enumerate().all(|(k, x)| *x == k * t));
                    }
                    if i % 7 == 0 {
                        map.remove(&key);
                    }
                    kept.push(key.into_bytes().into_boxed_slice());
                    if kept.len() > 64 {
                        kept.drain(..32);
                    }
                }
                // A block this thread still holds is magpie's.
                let v = map.values().max_by_key(|v| v.len()).unwrap();
                assert!(usable_size(v.as_ptr()) >= v.len() * std::mem::size_of::<usize>());
                map.len()
            })
        })
        .collect();
    // A key stays in the map unless the last round that wrote it removed it.
    let kept_keys = (0..97).filter(|k| ((ROUNDS - 1 - k) / 97 * 97 + k) % 7 != 0).count();
    for w in workers {
        assert_eq!(w.join().unwrap(), kept_keys);
    }
    let after = Stats::read().unwrap();
    // Each round allocates a key, its clone, a vector and a boxed slice: at least 3 blocks.
    let allocs = after.allocs - before.allocs;
    assert!(allocs >= (THREADS * ROUNDS * 3) as u64, "magpie counted {} allocations", allocs);
    assert!(after.frees - before.frees >= (THREADS * ROUNDS * 2) as u64);
}

#[test]
fn blocks_are_magpies() {
    let small = Box::new(7u64);
    let big = vec![1u8; 300 << 10]; // past the size classes: a large block
    assert!(usable_size(&*small) >= 8);
    assert!(usable_size(big.as_ptr()) >= big.len());
    let text = magpie::report(Format::Text).unwrap();
    assert!(text.starts_with("== magpie (pid "), "report: {}", text);
    let s = Stats::read().unwrap();
    assert!(s.allocs > 0 && s.live_bytes >= big.len() as u64 && s.peak_live_bytes >= s.live_bytes);
    assert!(s.mapped_bytes >= s.live_bytes);
    assert_eq!(magpie::verify(), 0);
}

#[test]
fn realloc_keeps_contents() {
    let mut v: Vec<u32> = Vec::new();
    for i in 0..(1u32 << 20) {
        v.push(i ^ 0x5a5a);
    }
    assert!(v.iter().enumerate().all(|(i, x)| *x == i as u32 ^ 0x5a5a));
    v.truncate(1000);
    v.shrink_to_fit();
    assert!(v.iter().enumerate().all(|(i, x)| *x == i as u32 ^ 0x5a5a));
    let mut s = String::from("magpie");
    for _ in 0..12 {
        s.push_str(&s.clone());
    }
    assert_eq!(s.len(), 6 << 12);
    assert!(s.as_bytes().chunks(6).all(|c| c == b"magpie"));
}

/// Fills a block of `layout`, so that a later zeroed block of the same size cannot be zero by luck.
fn dirty(layout: Layout) {
    // SAFETY: a non-zero-sized layout; the block is freed with it.
    unsafe {
        let p = alloc::alloc(layout);
        assert!(!p.is_null());
        p.write_bytes(0xa5, layout.size());
        alloc::dealloc(p, layout);
    }
}

#[test]
fn alloc_zeroed_is_zero() {
    for (size, align) in [(24, 8), (4000, 16), (100 << 10, 64), (5000, 4096), (1 << 20, 1 << 21)] {
        let layout = Layout::from_size_align(size, align).unwrap();
        for _ in 0..4 {
            dirty(layout);
            // SAFETY: as in dirty.
            unsafe {
                let p = alloc::alloc_zeroed(layout);
                assert!(!p.is_null() && p as usize % align == 0);
                assert!(std::slice::from_raw_parts(p, size).iter().all(|b| *b == 0));
                alloc::dealloc(p, layout);
            }
        }
    }
    let v = vec![0u64; 1 << 16];
    assert!(v.iter().all(|x| *x == 0));
}

#[test]
fn alignments_up_to_2mib() {
    for align in [1, 2, 8, 16, 32, 64, 4096, 64 << 10, 2 << 20] {
        for size in [1, 3, 24, align, 3 * align + 5] {
            let layout = Layout::from_size_align(size, align).unwrap();
            // SAFETY: non-zero sizes; each block is used within its size and freed once with
            // the layout it has at that point.
            unsafe {
                let p = GLOBAL.alloc(layout);
                assert!(!p.is_null() && p as usize % align == 0, "align {} size {}", align, size);
                assert!(usable_size(p) >= size);
                for i in 0..size {
                    *p.add(i) = i as u8;
                }
                let grown = GLOBAL.realloc(p, layout, 2 * size + 100);
                assert!(!grown.is_null() && grown as usize % align == 0);
                assert!((0..size).all(|i| *grown.add(i) == i as u8));
                let grown_layout = Layout::from_size_align(2 * size + 100, align).unwrap();
                let shrunk = GLOBAL.realloc(grown, grown_layout, (size + 1) / 2);
                assert!(!shrunk.is_null() && shrunk as usize % align == 0);
                assert!((0..(size + 1) / 2).all(|i| *shrunk.add(i) == i as u8));
                GLOBAL.dealloc(shrunk, Layout::from_size_align((size + 1) / 2, align).unwrap());
            }
        }
    }
}
