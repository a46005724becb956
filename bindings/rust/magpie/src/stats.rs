//! magpie's statistics from Rust: the report magpie_stats_write produces (the same as
//! `MAGPIE_OPTIONS=stats=1` and `magpie run --stats`), read back through an anonymous in-memory
//! file, and the process-wide figures of its JSON form as a struct.
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::raw::{c_char, c_int, c_uint};
use std::os::unix::io::{AsRawFd, FromRawFd};

extern "C" {
    // glibc 2.27+.
    fn memfd_create(name: *const c_char, flags: c_uint) -> c_int;
}
const MFD_CLOEXEC: c_uint = 1;

/// The form of a [`report`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Human-readable text.
    Text,
    /// JSON (docs/design.md, "Statistics").
    Json,
}

/// magpie's statistics report, whole.
pub fn report(format: Format) -> io::Result<String> {
    // SAFETY: a NUL-terminated name; the fd returned, if any, is ours to own.
    let fd = unsafe { memfd_create(b"magpie-stats\0".as_ptr() as *const c_char, MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor nothing else owns.
    let mut file = unsafe { File::from_raw_fd(fd) };
    let code = match format {
        Format::Text => magpie_sys::MAGPIE_STATS_TEXT,
        Format::Json => magpie_sys::MAGPIE_STATS_JSON,
    };
    // SAFETY: a valid descriptor and format.
    if unsafe { magpie_sys::magpie_stats_write(file.as_raw_fd(), code) } != 0 {
        return Err(io::Error::new(io::ErrorKind::Other, "magpie_stats_write failed"));
    }
    file.seek(SeekFrom::Start(0))?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    Ok(text)
}

/// The process-wide figures of magpie's report (its JSON form's top level; per-class and
/// large-block figures are in [`report`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Blocks handed out (malloc family and object caches), since the start.
    pub allocs: u64,
    /// Blocks freed.
    pub frees: u64,
    pub bytes_requested: u64,
    /// Bytes in blocks handed out and not yet freed.
    pub live_bytes: u64,
    pub peak_live_bytes: u64,
    /// Bytes magpie has mapped from the kernel.
    pub mapped_bytes: u64,
    pub peak_mapped_bytes: u64,
    pub threads_live: u64,
    pub threads_total: u64,
}

impl Stats {
    /// The figures now. Per-thread counters are read without stopping the threads, so a figure
    /// can lag a concurrent thread's latest operations.
    pub fn read() -> io::Result<Stats> {
        let json = report(Format::Json)?;
        // The top-level figures come before the per-class table, whose names repeat some.
        let head = json.split(",\"classes\"").next().unwrap_or("");
        let field = |key: &str| -> io::Result<u64> {
            let pattern = format!("\"{}\":", key);
            head.find(&pattern)
                .map(|at| &head[at + pattern.len()..])
                .and_then(|rest| {
                    let end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
                    rest[..end].parse().ok()
                })
                .ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("no {} in magpie's report", key),
                    )
                })
        };
        Ok(Stats {
            allocs: field("allocs")?,
            frees: field("frees")?,
            bytes_requested: field("bytes_requested")?,
            live_bytes: field("live_bytes")?,
            peak_live_bytes: field("peak_live_bytes")?,
            mapped_bytes: field("mapped_bytes")?,
            peak_mapped_bytes: field("peak_mapped_bytes")?,
            threads_live: field("threads_live")?,
            threads_total: field("threads_total")?,
        })
    }
}
