//! Sparse, copy-on-write file content.
//!
//! A file's bytes live in fixed-size chunks shared through [`Arc`]: keeping a durable copy of a
//! file at fsync time clones pointers, not bytes, and the next write to a shared chunk copies only
//! that chunk. Chunks never written are holes and read as zeros.

use std::collections::BTreeMap;
use std::sync::Arc;

/// Bytes per chunk.
const CHUNK: u64 = 64 * 1024;
/// Largest file size accepted (the kernel's own limit for FUSE files is `i64::MAX`).
pub(crate) const MAX_FILE_SIZE: u64 = i64::MAX as u64;

/// The content of a regular file.
///
/// Invariant: every byte at or past `size` inside a stored chunk is zero, so growing the file
/// (truncate up, fallocate) needs no zeroing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Content {
    size: u64,
    chunks: BTreeMap<u64, Arc<Vec<u8>>>,
}

impl Content {
    /// File size in bytes.
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// Bytes of memory backing this content (whole chunks).
    pub(crate) fn allocated(&self) -> u64 {
        (self.chunks.len() as u64).saturating_mul(CHUNK)
    }

    /// Reads up to `len` bytes at `offset`; short at end of file, empty past it.
    pub(crate) fn read(&self, offset: u64, len: u32) -> Vec<u8> {
        if offset >= self.size {
            return Vec::new();
        }
        let end = offset.saturating_add(u64::from(len)).min(self.size);
        // `end - offset` is at most `len`, a u32: it fits in usize.
        let mut out = vec![0u8; (end - offset) as usize];
        let first = offset / CHUNK;
        let last = (end - 1) / CHUNK;
        for (&idx, chunk) in self.chunks.range(first..=last) {
            let chunk_start = idx * CHUNK;
            let from = offset.max(chunk_start);
            let to = end.min(chunk_start + CHUNK);
            let src = &chunk[(from - chunk_start) as usize..(to - chunk_start) as usize];
            out[(from - offset) as usize..(to - offset) as usize].copy_from_slice(src);
        }
        out
    }

    /// Writes `data` at `offset`, growing the file if needed. Fails with `EFBIG` past
    /// [`MAX_FILE_SIZE`].
    pub(crate) fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), libc::c_int> {
        let end = offset.checked_add(data.len() as u64).filter(|&e| e <= MAX_FILE_SIZE).ok_or(libc::EFBIG)?;
        let mut pos = offset;
        let mut rest = data;
        while !rest.is_empty() {
            let idx = pos / CHUNK;
            let within = (pos % CHUNK) as usize;
            let n = rest.len().min(CHUNK as usize - within);
            let chunk = self.chunks.entry(idx).or_insert_with(|| Arc::new(vec![0; CHUNK as usize]));
            Arc::make_mut(chunk)[within..within + n].copy_from_slice(&rest[..n]);
            pos += n as u64;
            rest = &rest[n..];
        }
        self.size = self.size.max(end);
        Ok(())
    }

    /// Sets the size: shrinking drops the bytes past it, growing adds a hole.
    pub(crate) fn truncate(&mut self, size: u64) -> Result<(), libc::c_int> {
        if size > MAX_FILE_SIZE {
            return Err(libc::EFBIG);
        }
        if size < self.size {
            let keep_chunks = size.div_ceil(CHUNK);
            drop(self.chunks.split_off(&keep_chunks));
            let within = (size % CHUNK) as usize;
            if within != 0
                && let Some(chunk) = self.chunks.get_mut(&(size / CHUNK))
            {
                Arc::make_mut(chunk)[within..].fill(0);
            }
        }
        self.size = size;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_write_reads_zero_holes() {
        let mut c = Content::default();
        c.write(3 * CHUNK + 10, b"abc").unwrap();
        assert_eq!(c.size(), 3 * CHUNK + 13);
        assert_eq!(c.allocated(), CHUNK);
        let all = c.read(0, u32::MAX);
        assert_eq!(all.len() as u64, c.size());
        assert!(all[..(3 * CHUNK + 10) as usize].iter().all(|&b| b == 0));
        assert_eq!(&all[(3 * CHUNK + 10) as usize..], b"abc");
        assert!(c.read(c.size(), 10).is_empty());
        assert_eq!(c.read(3 * CHUNK + 11, 100), b"bc");
    }

    #[test]
    fn write_across_chunks_and_copy_on_write() {
        let mut c = Content::default();
        let data: Vec<u8> = (0..3 * CHUNK).map(|i| (i % 251) as u8).collect();
        c.write(5, &data).unwrap();
        let snapshot = c.clone();
        c.write(CHUNK, b"XYZ").unwrap();
        assert_eq!(snapshot.read(5, data.len() as u32), data);
        assert_eq!(c.read(CHUNK, 3), b"XYZ");
        assert_eq!(snapshot.read(CHUNK, 3), data[(CHUNK - 5) as usize..(CHUNK - 2) as usize]);
    }

    #[test]
    fn truncate_down_then_up_reads_zeros() {
        let mut c = Content::default();
        c.write(0, &[7u8; 100_000]).unwrap();
        c.truncate(10).unwrap();
        assert_eq!(c.allocated(), CHUNK);
        c.truncate(100_000).unwrap();
        let all = c.read(0, 200_000);
        assert_eq!(all.len(), 100_000);
        assert_eq!(&all[..10], &[7u8; 10]);
        assert!(all[10..].iter().all(|&b| b == 0));
        c.truncate(0).unwrap();
        assert_eq!(c.allocated(), 0);
    }

    #[test]
    fn limits() {
        let mut c = Content::default();
        assert_eq!(c.write(u64::MAX - 1, b"abc"), Err(libc::EFBIG));
        assert_eq!(c.write(MAX_FILE_SIZE, b"a"), Err(libc::EFBIG));
        assert_eq!(c.truncate(MAX_FILE_SIZE + 1), Err(libc::EFBIG));
        c.truncate(MAX_FILE_SIZE).unwrap();
        assert_eq!(c.read(MAX_FILE_SIZE - 2, 10), vec![0, 0]);
        c.write(0, b"").unwrap();
    }
}
