//! Zstandard frames through libzstd, with one compression and one decompression context per thread.

use std::cell::RefCell;

use super::CodecError;

thread_local! {
    static COMPRESSOR: RefCell<Option<zstd::bulk::Compressor<'static>>> = const { RefCell::new(None) };
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

/// Compresses at `level` into `out`; `None` when it does not fit.
pub fn compress(level: u8, input: &[u8], out: &mut [u8]) -> Result<Option<usize>, CodecError> {
    COMPRESSOR.with(|cell| {
        let mut cell = cell.borrow_mut();
        let compressor = match cell.as_mut() {
            Some(c) => c,
            None => cell.insert(
                zstd::bulk::Compressor::new(level as i32)
                    .map_err(|e| CodecError::Engine(format!("zstd: {e}")))?,
            ),
        };
        compressor
            .set_compression_level(level as i32)
            .map_err(|e| CodecError::Engine(format!("zstd: {e}")))?;
        // The only way compress_to_buffer fails on valid parameters is a too-small destination.
        Ok(compressor.compress_to_buffer(input, out).ok())
    })
}

/// Decodes into exactly `out.len()` bytes.
pub fn decompress(input: &[u8], out: &mut [u8]) -> Result<(), CodecError> {
    DECOMPRESSOR.with(|cell| {
        let mut cell = cell.borrow_mut();
        let decompressor = match cell.as_mut() {
            Some(d) => d,
            None => cell.insert(
                zstd::bulk::Decompressor::new()
                    .map_err(|e| CodecError::Engine(format!("zstd: {e}")))?,
            ),
        };
        let written = decompressor
            .decompress_to_buffer(input, out)
            .map_err(|e| CodecError::Corrupt(format!("zstd: {e}")))?;
        if written != out.len() {
            return Err(super::short(out.len(), written));
        }
        Ok(())
    })
}
