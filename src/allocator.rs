//! The process's allocator: glibc's malloc, except for `inject`, which switches to
//! mimalloc before it starts. `inject` allocates and frees a tree node per YAML value,
//! across threads, and spends about a fifth less CPU with mimalloc; `serve` keeps glibc,
//! with which it holds less memory after a burst (README, Benchmarks, for both).

use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};

use mimalloc::MiMalloc;

unsafe extern "C" {
    /// mimalloc's own test of whether a block is one of its own (a page-map lookup).
    fn mi_is_in_heap_region(p: *const c_void) -> bool;
}

static MIMALLOC: AtomicBool = AtomicBool::new(false);

/// New blocks come from mimalloc from now on; blocks allocated before stay glibc's and
/// are freed (or grown) by glibc. Call it before starting threads.
pub fn use_mimalloc() {
    MIMALLOC.store(true, Ordering::Relaxed);
}

/// glibc's malloc or mimalloc, as `use_mimalloc` says; every block goes back to the one
/// that gave it.
pub struct Switchable;

fn mimalloc_on() -> bool {
    MIMALLOC.load(Ordering::Relaxed)
}

fn from_mimalloc(ptr: *mut u8) -> bool {
    // Until the switch no block can be mimalloc's: no lookup.
    // SAFETY: the lookup only reads mimalloc's page map; any address may be asked about.
    mimalloc_on() && unsafe { mi_is_in_heap_region(ptr.cast()) }
}

/// The allocator for a new block.
fn chosen() -> &'static dyn GlobalAlloc {
    if mimalloc_on() { &MiMalloc } else { &System }
}

/// The allocator that gave `ptr`.
fn owner(ptr: *mut u8) -> &'static dyn GlobalAlloc {
    if from_mimalloc(ptr) { &MiMalloc } else { &System }
}

// SAFETY: each call goes to one of two allocators that uphold `GlobalAlloc`'s contract,
// with the caller's guarantees, and a block is always freed or grown by the allocator
// that gave it.
unsafe impl GlobalAlloc for Switchable {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        unsafe { chosen().alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        unsafe { chosen().alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { owner(ptr).dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        unsafe { owner(ptr).realloc(ptr, layout, new_size) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The switch is process-wide: blocks from before it must still be grown and freed
    /// by glibc, and the new ones come from mimalloc.
    #[test]
    fn blocks_go_back_to_the_allocator_that_gave_them() {
        let before: Vec<u64> = (0..1000).collect();
        let mut grown = vec![1u8; 100];
        use_mimalloc();
        assert!(!from_mimalloc(before.as_ptr().cast_mut().cast()));
        let after: Vec<u64> = (0..1000).collect();
        assert!(from_mimalloc(after.as_ptr().cast_mut().cast()));
        grown.extend(std::iter::repeat_n(2u8, 100_000));
        assert_eq!(grown.len(), 100_100);
        assert_eq!(before.iter().sum::<u64>(), after.iter().sum::<u64>());
        drop((before, after, grown));
    }
}
