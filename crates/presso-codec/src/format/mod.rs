//! Software implementations of every codec format, and the entry points each row of the codec
//! table ([`CODECS`](crate::codec::CODECS)) points at.
//!
//! Compression gets an output slice whose length is the budget: a codec that cannot fit returns
//! `Ok(None)` and the engine stores the record raw (codecs never decide "not worth it" themselves).
//! Decompression gets an output slice of exactly the record's logical length and fails unless the
//! payload fills it exactly, so no decoder can write past the declared length.

pub mod deflate;
#[cfg(feature = "isal")]
pub mod isal;
#[cfg(feature = "lz4")]
mod lz4;
pub mod zle;
#[cfg(feature = "zstd")]
mod zstd;

pub use deflate::DeflateEngine;

use crate::codec::{CodecId, CodecSpec};

/// A codec failed on input it should handle, or rejected a payload.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CodecError {
    /// The payload is not valid for the codec, or decodes to the wrong length.
    #[error("{0}")]
    Corrupt(String),
    /// The codec or engine is not compiled into this build.
    #[error("{0} is not built into this Presso")]
    NotBuiltIn(&'static str),
    /// The engine itself failed (not the data's fault).
    #[error("engine failure: {0}")]
    Engine(String),
}

/// A codec's compressor, as its [`CODECS`](crate::codec::CODECS) row names it: compresses `input`
/// at `level` into `out`; `Ok(None)` when the result does not fit in `out.len()` bytes. `deflate`
/// picks the deflate engine and is ignored by other formats.
pub type CompressFn = fn(
    level: u8,
    deflate: DeflateEngine,
    input: &[u8],
    out: &mut [u8],
) -> Result<Option<usize>, CodecError>;

/// A codec's decompressor, as its [`CODECS`](crate::codec::CODECS) row names it: decodes `input`
/// into exactly `out.len()` bytes.
pub type DecompressFn =
    fn(deflate: DeflateEngine, input: &[u8], out: &mut [u8]) -> Result<(), CodecError>;

/// Compresses `input` into `out` with a software engine, through the codec's table row.
/// `Ok(None)`: the result does not fit in `out.len()` bytes. `deflate` picks the engine for gzip.
pub fn compress(
    spec: CodecSpec,
    deflate: DeflateEngine,
    input: &[u8],
    out: &mut [u8],
) -> Result<Option<usize>, CodecError> {
    (spec.codec.info().compress)(spec.level, deflate, input, out)
}

/// Decompresses `input` into exactly `out.len()` bytes, through the codec's table row.
pub fn decompress(
    codec: CodecId,
    deflate: DeflateEngine,
    input: &[u8],
    out: &mut [u8],
) -> Result<(), CodecError> {
    (codec.info().decompress)(deflate, input, out)
}

// The entry points the codec table points at: one pair per codec, each adapting its format
// module to the uniform signatures above. A codec compiled out keeps its pair, which refuses with
// `NotBuiltIn`.

pub(crate) fn off_compress(
    _level: u8,
    _deflate: DeflateEngine,
    input: &[u8],
    out: &mut [u8],
) -> Result<Option<usize>, CodecError> {
    if input.len() > out.len() {
        return Ok(None);
    }
    out[..input.len()].copy_from_slice(input);
    Ok(Some(input.len()))
}

pub(crate) fn off_decompress(
    _deflate: DeflateEngine,
    input: &[u8],
    out: &mut [u8],
) -> Result<(), CodecError> {
    if input.len() != out.len() {
        return Err(short(out.len(), input.len()));
    }
    out.copy_from_slice(input);
    Ok(())
}

pub(crate) fn zle_compress(
    _level: u8,
    _deflate: DeflateEngine,
    input: &[u8],
    out: &mut [u8],
) -> Result<Option<usize>, CodecError> {
    Ok(zle::compress(input, out))
}

pub(crate) fn zle_decompress(
    _deflate: DeflateEngine,
    input: &[u8],
    out: &mut [u8],
) -> Result<(), CodecError> {
    zle::decompress(input, out)
}

pub(crate) fn gzip_compress(
    level: u8,
    deflate: DeflateEngine,
    input: &[u8],
    out: &mut [u8],
) -> Result<Option<usize>, CodecError> {
    deflate::compress(deflate, level, input, out)
}

pub(crate) fn gzip_decompress(
    deflate: DeflateEngine,
    input: &[u8],
    out: &mut [u8],
) -> Result<(), CodecError> {
    deflate::decompress(deflate, input, out)
}

pub(crate) fn lz4_compress(
    _level: u8,
    _deflate: DeflateEngine,
    _input: &[u8],
    _out: &mut [u8],
) -> Result<Option<usize>, CodecError> {
    #[cfg(feature = "lz4")]
    return lz4::compress(_input, _out);
    #[cfg(not(feature = "lz4"))]
    return Err(CodecError::NotBuiltIn("lz4"));
}

pub(crate) fn lz4_decompress(
    _deflate: DeflateEngine,
    _input: &[u8],
    _out: &mut [u8],
) -> Result<(), CodecError> {
    #[cfg(feature = "lz4")]
    return lz4::decompress(_input, _out);
    #[cfg(not(feature = "lz4"))]
    return Err(CodecError::NotBuiltIn("lz4"));
}

pub(crate) fn zstd_compress(
    _level: u8,
    _deflate: DeflateEngine,
    _input: &[u8],
    _out: &mut [u8],
) -> Result<Option<usize>, CodecError> {
    #[cfg(feature = "zstd")]
    return zstd::compress(_level, _input, _out);
    #[cfg(not(feature = "zstd"))]
    return Err(CodecError::NotBuiltIn("zstd"));
}

pub(crate) fn zstd_decompress(
    _deflate: DeflateEngine,
    _input: &[u8],
    _out: &mut [u8],
) -> Result<(), CodecError> {
    #[cfg(feature = "zstd")]
    return zstd::decompress(_input, _out);
    #[cfg(not(feature = "zstd"))]
    return Err(CodecError::NotBuiltIn("zstd"));
}

/// The error for a payload that decodes to a length other than the declared one.
pub(crate) fn short(expected: usize, got: usize) -> CodecError {
    CodecError::Corrupt(format!(
        "decodes to {got} bytes, the frame declares {expected}"
    ))
}
