//! ObjectCache: the initializer builds each object once, a freed object comes back in the state
//! its last user left, the cache's drop drops every object it built, objects move between
//! threads, alignment is T's, and a failing initializer fails the allocation.
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{mpsc, Arc};
use std::thread;

use magpie::ObjectCache;

/// An object worth caching: a buffer whose capacity survives reuse. Counts its drops.
struct Conn {
    buf: Vec<u8>,
    uses: u32,
    drops: Arc<AtomicUsize>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Relaxed);
    }
}

/// A cache of Conn, with counters of the objects its initializer built and those dropped.
fn conn_cache() -> (ObjectCache<Conn>, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let built = Arc::new(AtomicUsize::new(0));
    let drops = Arc::new(AtomicUsize::new(0));
    let (b, d) = (built.clone(), drops.clone());
    let cache = ObjectCache::new("conn", move || {
        b.fetch_add(1, Relaxed);
        Conn { buf: Vec::with_capacity(4096), uses: 0, drops: d.clone() }
    })
    .unwrap();
    (cache, built, drops)
}

#[test]
fn objects_are_built_once_and_kept_built() {
    let (cache, built, drops) = conn_cache();
    let mut a = cache.alloc();
    assert!(built.load(Relaxed) >= 1);
    assert_eq!((a.uses, a.buf.len()), (0, 0));
    assert!(a.buf.capacity() >= 4096);
    a.uses = 7;
    a.buf.extend_from_slice(b"kept");
    let addr = &*a as *const Conn;
    let built_then = built.load(Relaxed);
    drop(a);
    // The thread's magazine is LIFO: the same object, not rebuilt, as its last user left it.
    let b = cache.alloc();
    assert_eq!(&*b as *const Conn, addr);
    assert_eq!((b.uses, &b.buf[..]), (7, &b"kept"[..]));
    assert_eq!(built.load(Relaxed), built_then);
    assert_eq!(drops.load(Relaxed), 0);
    drop(b);
    drop(cache);
    assert_eq!(drops.load(Relaxed), built.load(Relaxed));
}

#[test]
fn objects_move_between_threads() {
    let (cache, built, drops) = conn_cache();
    thread::scope(|s| {
        let (tx, rx) = mpsc::channel();
        for t in 0..8u32 {
            let (cache, tx) = (&cache, tx.clone());
            s.spawn(move || {
                let mut held = Vec::new();
                for i in 0..2000u32 {
                    let mut c = cache.alloc();
                    c.uses = t << 16 | i;
                    held.push(c);
                    if held.len() == 50 {
                        for c in held.drain(..) {
                            tx.send(c).unwrap(); // freed by the receiving thread
                        }
                    }
                }
                held.len()
            });
        }
        drop(tx);
        let mut seen = 0;
        for c in rx {
            assert!(c.uses >> 16 < 8 && c.uses & 0xffff < 2000);
            seen += 1;
        }
        assert_eq!(seen, 8 * 2000);
    });
    assert!(built.load(Relaxed) >= 50);
    drop(cache);
    assert_eq!(drops.load(Relaxed), built.load(Relaxed));
}

#[test]
fn alignment_is_the_types() {
    #[repr(align(4096))]
    struct Page([u8; 4096]);
    let pages = ObjectCache::new("pages", || Page([3; 4096])).unwrap();
    let held: Vec<_> = (0..20).map(|_| pages.alloc()).collect();
    for p in &held {
        assert_eq!(&**p as *const Page as usize % 4096, 0);
        assert!(p.0.iter().all(|b| *b == 3));
    }
    let units = ObjectCache::new("units", || ()).unwrap();
    let (u1, u2) = (units.alloc(), units.alloc());
    assert_ne!(&*u1 as *const (), &*u2 as *const ());
    struct Huge(#[allow(dead_code)] [u8; 2 << 20]);
    let err = ObjectCache::new("huge", || Huge([0; 2 << 20])).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(22)); // EINVAL: magpie's objects stop at 1 MiB
}

#[test]
fn failing_initializer_fails_the_allocation() {
    let cache: ObjectCache<u64> =
        ObjectCache::new("failing", || panic!("no object today")).unwrap();
    assert!(cache.try_alloc().is_none());
}
