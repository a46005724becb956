//! Object caches: magpie_cache_* as a typed, safe pool.
//!
//! Semantics are magpie's (include/magpie.h, after umem_cache_create): the initializer builds an
//! object when it enters the cache, before it is first handed out; freeing a [`CacheBox`]
//! returns the object to the cache *without* dropping it, so the next allocation may receive it
//! in the state its last user left (a buffer keeps its capacity, a connection stays open); the
//! object is dropped only when the cache gives its memory back (magpie's reaping and trimming,
//! or the cache's own drop). Invariants that make this safe:
//! - every object the cache hands out holds a valid `T` (built by the initializer, then only
//!   mutated through `&mut T`), so the drop that magpie's destructor runs drops a valid value;
//! - a [`CacheBox`] borrows its cache, so the cache cannot be destroyed while objects are out;
//! - the initializer and the drop may run on any thread (whichever allocates, magpie's reaper
//!   thread), hence `T: Send` and an initializer that is `Send + Sync`.
use std::ffi::CString;
use std::fmt;
use std::io;
use std::marker::PhantomData;
use std::mem;
use std::ops::{Deref, DerefMut};
use std::os::raw::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::{self, NonNull};

use magpie_sys as sys;

type Init<T> = dyn Fn() -> T + Send + Sync;

/// A cache of objects of type `T`, built by an initializer and kept built across reuse.
///
/// ```
/// use magpie::ObjectCache;
///
/// // Buffers that keep their 64 KiB from one request to the next.
/// let buffers = ObjectCache::new("buffers", || Vec::<u8>::with_capacity(64 << 10)).unwrap();
/// let mut buf = buffers.alloc();
/// buf.clear(); // whatever the last user left
/// buf.extend_from_slice(b"request");
/// assert!(buf.capacity() >= 64 << 10);
/// ```
pub struct ObjectCache<T: Send> {
    raw: NonNull<sys::magpie_cache_t>,
    /// The constructor's argument: magpie holds this pointer until the cache is destroyed.
    init: *mut Box<Init<T>>,
    _owns: PhantomData<T>,
}

// SAFETY: magpie's caches are thread-safe; objects move between threads through the cache and are
// built and dropped on any thread, which T: Send permits; the initializer is Send + Sync.
unsafe impl<T: Send> Send for ObjectCache<T> {}
unsafe impl<T: Send> Sync for ObjectCache<T> {}

/// magpie's constructor: builds a T in place with the cache's initializer. A panic in the
/// initializer must not unwind into C: it makes this allocation fail instead.
unsafe extern "C" fn construct<T>(obj: *mut c_void, arg: *mut c_void, _flags: c_int) -> c_int {
    // SAFETY: arg is the cache's `init`, alive until magpie_cache_destroy returns.
    let init = unsafe { &*(arg as *const Box<Init<T>>) };
    match catch_unwind(AssertUnwindSafe(init)) {
        Ok(value) => {
            // SAFETY: obj is a block of the cache, sized and aligned for T, holding no value.
            unsafe { ptr::write(obj as *mut T, value) };
            0
        }
        Err(_) => 1,
    }
}

/// magpie's destructor: drops the T the object holds. A panic there cannot unwind into C, and
/// leaving the value half-dropped would be unsound: abort.
unsafe extern "C" fn destruct<T>(obj: *mut c_void, _arg: *mut c_void) {
    // SAFETY: magpie destructs only objects it constructed, each once.
    let dropped = catch_unwind(AssertUnwindSafe(|| unsafe { ptr::drop_in_place(obj as *mut T) }));
    if dropped.is_err() {
        std::process::abort();
    }
}

impl<T: Send> ObjectCache<T> {
    /// A cache named `name` (in magpie's reports) whose objects `init` builds. Fails with magpie's
    /// errno: EINVAL when T is larger than 1 MiB or aligned to more than 64 KiB, ENOMEM.
    pub fn new<F>(name: &str, init: F) -> io::Result<Self>
    where
        F: Fn() -> T + Send + Sync + 'static,
    {
        let cname =
            CString::new(name).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let init: *mut Box<Init<T>> = Box::into_raw(Box::new(Box::new(init)));
        // magpie copies the name; a zero-sized T still needs distinct addresses.
        // SAFETY: the callbacks match magpie's signatures and expect exactly this argument.
        let raw = unsafe {
            sys::magpie_cache_create(
                cname.as_ptr(),
                mem::size_of::<T>().max(1),
                mem::align_of::<T>(),
                Some(construct::<T>),
                Some(destruct::<T>),
                init as *mut c_void,
                0,
            )
        };
        match NonNull::new(raw) {
            Some(raw) => Ok(ObjectCache { raw, init, _owns: PhantomData }),
            None => {
                let err = io::Error::last_os_error();
                // SAFETY: magpie kept no copy of a cache it did not create.
                drop(unsafe { Box::from_raw(init) });
                Err(err)
            }
        }
    }

    /// An object, built by the initializer or left by its last user; None when memory is
    /// exhausted or the initializer panicked.
    pub fn try_alloc(&self) -> Option<CacheBox<'_, T>> {
        // SAFETY: a live cache.
        let obj = unsafe { sys::magpie_cache_alloc(self.raw.as_ptr(), sys::MAGPIE_DEFAULT) };
        NonNull::new(obj as *mut T).map(|obj| CacheBox { cache: self, obj })
    }

    /// An object, as [`try_alloc`](Self::try_alloc); panics when there is none.
    pub fn alloc(&self) -> CacheBox<'_, T> {
        self.try_alloc().expect("magpie object cache: out of memory, or the initializer panicked")
    }
}

impl<T: Send> Drop for ObjectCache<T> {
    fn drop(&mut self) {
        // Every CacheBox borrowed the cache, so all objects are back: magpie drops them all.
        // SAFETY: the cache is live and destroyed once; `init` outlives it.
        unsafe {
            sys::magpie_cache_destroy(self.raw.as_ptr());
            drop(Box::from_raw(self.init));
        }
    }
}

impl<T: Send> fmt::Debug for ObjectCache<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectCache").field("raw", &self.raw).finish()
    }
}

/// An object of an [`ObjectCache`]: dereferences to the `T`, and returns it to the cache, still
/// built, when dropped.
pub struct CacheBox<'a, T: Send> {
    cache: &'a ObjectCache<T>,
    obj: NonNull<T>,
}

// SAFETY: a CacheBox owns its T as a Box does; returning it to the cache from another thread is
// allowed by magpie.
unsafe impl<T: Send> Send for CacheBox<'_, T> {}
unsafe impl<T: Send + Sync> Sync for CacheBox<'_, T> {}

impl<T: Send> Deref for CacheBox<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the object holds a valid T, and this box has it alone.
        unsafe { self.obj.as_ref() }
    }
}

impl<T: Send> DerefMut for CacheBox<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in deref, and &mut self makes the access unique.
        unsafe { self.obj.as_mut() }
    }
}

impl<T: Send> Drop for CacheBox<'_, T> {
    fn drop(&mut self) {
        // SAFETY: the object came from this cache and is returned once, its T still valid.
        unsafe { sys::magpie_cache_free(self.cache.raw.as_ptr(), self.obj.as_ptr() as *mut c_void) }
    }
}

impl<T: Send + fmt::Debug> fmt::Debug for CacheBox<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}
