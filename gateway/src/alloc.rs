//! A global allocator that keeps a forged length in a request from aborting
//! the process.
//!
//! The `kafka-protocol` decoders size a `Vec` from an array length read off
//! the wire before decoding a single element, so a few bytes claiming two
//! billion elements ask for hundreds of gigabytes. The system allocator
//! refuses, and Rust aborts the process: one malformed frame would take down
//! every connection. This allocator serves requests of 1 GiB and more with
//! an anonymous `MAP_NORESERVE` mapping instead: address space, no memory
//! until touched. The decoder then fails on the short input after a few
//! elements, the mapping is released, and the connection gets an error.
//! Every allocation below 1 GiB goes to the system allocator unchanged.
//!
//! The binary installs it with `#[global_allocator]`; so do the tests and
//! fuzz targets that decode hostile frames. (With the kernel's strict
//! overcommit mode, `vm.overcommit_memory = 2`, the mapping is refused too
//! and the guard cannot help.)
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::ptr;

use rustix::mm::{mmap_anonymous, munmap, MapFlags, ProtFlags};

/// Allocations at least this large are lazy mappings.
const HUGE: usize = 1 << 30;
/// Alignment a fresh mapping guarantees.
const PAGE: usize = 4096;

/// The allocator; see the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct GuardedAlloc;

fn is_huge(layout: &Layout) -> bool {
    layout.size() >= HUGE && layout.align() <= PAGE
}

// SAFETY: every block is served either by `System` (with the same layout
// rules) or by a private anonymous mapping of at least `layout.size()` bytes,
// page-aligned (which satisfies any alignment up to `PAGE`, checked by
// `is_huge`). `dealloc` and `realloc` tell the two apart by the layout the
// caller must pass back unchanged, so each block returns to where it came
// from.
unsafe impl GlobalAlloc for GuardedAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !is_huge(&layout) {
            // SAFETY: forwarded with the caller's guarantees.
            return unsafe { System.alloc(layout) };
        }
        let flags = MapFlags::PRIVATE | MapFlags::NORESERVE;
        // SAFETY: a fresh anonymous mapping at an address the kernel picks
        // aliases nothing.
        match unsafe {
            mmap_anonymous(
                ptr::null_mut(),
                layout.size(),
                ProtFlags::READ | ProtFlags::WRITE,
                flags,
            )
        } {
            Ok(p) => p.cast(),
            Err(_) => ptr::null_mut(),
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !is_huge(&layout) {
            // SAFETY: forwarded with the caller's guarantees.
            return unsafe { System.alloc_zeroed(layout) };
        }
        // SAFETY: anonymous mappings are zero-filled.
        unsafe { self.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if !is_huge(&layout) {
            // SAFETY: this block came from `System` with this layout.
            return unsafe { System.dealloc(ptr, layout) };
        }
        // SAFETY: this block is a mapping of `layout.size()` bytes made by
        // `alloc`; nothing uses it any more.
        let _ = unsafe { munmap(ptr.cast(), layout.size()) };
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `new_size` forms a valid layout with
        // the same alignment.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        if !is_huge(&layout) && !is_huge(&new_layout) {
            // SAFETY: both blocks belong to `System`.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // SAFETY: a new block, the overlap copied, the old block returned to
        // where it came from.
        unsafe {
            let new = self.alloc(new_layout);
            if !new.is_null() {
                ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
            new
        }
    }
}
