//! Raw deflate (RFC 1951) through three interchangeable engines. Each writes a standard stream, so
//! any engine decodes what any other wrote: the property that lets the accelerator and the CPU share
//! a pool.
//!
//! A [`DeflateEngine`] is an implementation run inline on the calling thread; an accelerator
//! ([`crate::accel`]) is an execution backend that runs one (ISA-L's, today) on threads or a
//! device of its own. The frame records only the format (gzip), never which of them ran.

use std::cell::RefCell;

use serde::{Deserialize, Serialize};

use super::CodecError;

/// A deflate implementation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeflateEngine {
    /// libdeflate: the fastest software deflate, Presso's CPU path.
    #[default]
    Libdeflate,
    /// zlib: the reference (what ZFS's software gzip runs).
    Zlib,
    /// ISA-L igzip run inline on the calling thread: the same code the `isal` accelerator
    /// ([`crate::accel::isal`]) runs on its own threads, here as a plain software engine (tests,
    /// benches, decoding). Production compression reaches ISA-L through the accelerator, not
    /// through this variant.
    Isal,
}

impl DeflateEngine {
    /// Every engine, for tests and benches.
    pub const ALL: [DeflateEngine; 3] = [
        DeflateEngine::Libdeflate,
        DeflateEngine::Zlib,
        DeflateEngine::Isal,
    ];

    /// Short lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            DeflateEngine::Libdeflate => "libdeflate",
            DeflateEngine::Zlib => "zlib",
            DeflateEngine::Isal => "isal",
        }
    }
}

/// libdeflate level used for a gzip level. libdeflate's levels compress harder than zlib's at the
/// same number, so gzip-N runs at libdeflate N−1 (N = 1 stays 1), which matches zlib's ratio at
/// N best (on 128 KiB records of the corpus: gzip-6 → libdeflate 5 gives zlib-6's ratio within
/// 0.9% on source text and 1.3% on FASTQ at 2.9x and 5.2x zlib's speed; see docs/design.md).
pub fn libdeflate_level(gzip_level: u8) -> i32 {
    (gzip_level as i32 - 1).max(1)
}

thread_local! {
    static LIBDEFLATE_COMPRESSORS: RefCell<Vec<Option<libdeflater::Compressor>>> =
        RefCell::new((0..=12).map(|_| None).collect());
    static LIBDEFLATE_DECOMPRESSOR: RefCell<libdeflater::Decompressor> =
        RefCell::new(libdeflater::Decompressor::new());
    static ZLIB_COMPRESSORS: RefCell<Vec<Option<flate2::Compress>>> =
        RefCell::new((0..=9).map(|_| None).collect());
    static ZLIB_DECOMPRESSOR: RefCell<flate2::Decompress> =
        RefCell::new(flate2::Decompress::new(false));
}

/// Compresses with `engine` at gzip `level` (1..=9) into `out`; `None` when it does not fit.
pub fn compress(
    engine: DeflateEngine,
    level: u8,
    input: &[u8],
    out: &mut [u8],
) -> Result<Option<usize>, CodecError> {
    match engine {
        DeflateEngine::Libdeflate => {
            let level = libdeflate_level(level);
            let lvl = libdeflater::CompressionLvl::new(level)
                .map_err(|_| CodecError::Engine(format!("libdeflate has no level {level}")))?;
            LIBDEFLATE_COMPRESSORS.with(|cache| {
                let mut cache = cache.borrow_mut();
                let compressor =
                    cache[level as usize].get_or_insert_with(|| libdeflater::Compressor::new(lvl));
                // libdeflate returns 0 (InsufficientSpace) when the output does not fit.
                Ok(compressor.deflate_compress(input, out).ok())
            })
        }
        DeflateEngine::Zlib => ZLIB_COMPRESSORS.with(|cache| {
            let mut cache = cache.borrow_mut();
            let compressor = cache[level as usize].get_or_insert_with(|| {
                flate2::Compress::new(flate2::Compression::new(level as u32), false)
            });
            compressor.reset();
            let status = compressor
                .compress(input, out, flate2::FlushCompress::Finish)
                .map_err(|e| CodecError::Engine(format!("zlib: {e}")))?;
            Ok(match status {
                flate2::Status::StreamEnd => Some(compressor.total_out() as usize),
                _ => None,
            })
        }),
        DeflateEngine::Isal => {
            #[cfg(feature = "isal")]
            return super::isal::compress(super::isal::level_for_gzip(level), &[input], out);
            #[cfg(not(feature = "isal"))]
            return Err(CodecError::NotBuiltIn("the ISA-L engine"));
        }
    }
}

/// Inflates `input` into exactly `out.len()` bytes with `engine`.
pub fn decompress(engine: DeflateEngine, input: &[u8], out: &mut [u8]) -> Result<(), CodecError> {
    match engine {
        DeflateEngine::Libdeflate => LIBDEFLATE_DECOMPRESSOR.with(|d| {
            let written = d
                .borrow_mut()
                .deflate_decompress(input, out)
                .map_err(|e| CodecError::Corrupt(format!("libdeflate: {e}")))?;
            if written != out.len() {
                return Err(super::short(out.len(), written));
            }
            Ok(())
        }),
        DeflateEngine::Zlib => ZLIB_DECOMPRESSOR.with(|d| {
            let mut d = d.borrow_mut();
            d.reset(false);
            let status = d
                .decompress(input, out, flate2::FlushDecompress::Finish)
                .map_err(|e| CodecError::Corrupt(format!("zlib: {e}")))?;
            let written = d.total_out() as usize;
            if status != flate2::Status::StreamEnd {
                return Err(CodecError::Corrupt(if written == out.len() {
                    format!("zlib: stream continues past the declared {written} bytes")
                } else {
                    "zlib: stream is truncated".to_string()
                }));
            }
            if written != out.len() {
                return Err(super::short(out.len(), written));
            }
            Ok(())
        }),
        DeflateEngine::Isal => {
            #[cfg(feature = "isal")]
            return super::isal::decompress(input, out);
            #[cfg(not(feature = "isal"))]
            return Err(CodecError::NotBuiltIn("the ISA-L engine"));
        }
    }
}
