//! Zstandard frames through libzstd, with one compression and one decompression context per thread.

use std::cell::RefCell;

use super::CodecError;

/// A thread's compression context and the level it is set to.
struct LevelledCompressor {
    compressor: zstd::bulk::Compressor<'static>,
    level: i32,
}

thread_local! {
    static COMPRESSOR: RefCell<Option<LevelledCompressor>> = const { RefCell::new(None) };
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

fn engine_error(e: impl std::fmt::Display) -> CodecError {
    CodecError::Engine(format!("zstd: {e}"))
}

/// Compresses at `level` into `out`; `None` when it does not fit.
pub fn compress(level: u8, input: &[u8], out: &mut [u8]) -> Result<Option<usize>, CodecError> {
    let level = level as i32;
    COMPRESSOR.with(|cell| {
        let mut cell = cell.borrow_mut();
        let c = match cell.as_mut() {
            Some(c) => c,
            None => cell.insert(LevelledCompressor {
                compressor: zstd::bulk::Compressor::new(level).map_err(engine_error)?,
                level,
            }),
        };
        // Setting the level reloads the context's (empty) dictionary: done only when it changes.
        if c.level != level {
            c.compressor
                .set_compression_level(level)
                .map_err(engine_error)?;
            c.level = level;
        }
        let result = c.compressor.compress_to_buffer(input, out);
        // The only way this fails on valid parameters is a too-small destination. libzstd then
        // leaves the context mid-frame, refusing a new level until its session is reset: else
        // every later record on this thread would fail. A context that cannot even be reset is
        // dropped, and the next record builds a new one.
        if result.is_err()
            && c.compressor
                .context_mut()
                .reset(zstd::zstd_safe::ResetDirective::SessionOnly)
                .is_err()
        {
            *cell = None;
        }
        Ok(result.ok())
    })
}

/// Decodes into exactly `out.len()` bytes.
pub fn decompress(input: &[u8], out: &mut [u8]) -> Result<(), CodecError> {
    DECOMPRESSOR.with(|cell| {
        let mut cell = cell.borrow_mut();
        let decompressor = match cell.as_mut() {
            Some(d) => d,
            None => cell.insert(zstd::bulk::Decompressor::new().map_err(engine_error)?),
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
