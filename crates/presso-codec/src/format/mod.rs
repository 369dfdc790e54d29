//! Software implementations of every codec format, and the dispatch from a [`CodecId`] to them.
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

/// Compresses `input` into `out` with a software engine. `Ok(None)`: the result does not fit in
/// `out.len()` bytes. `deflate` picks the engine for gzip.
pub fn compress(
    spec: CodecSpec,
    deflate: DeflateEngine,
    input: &[u8],
    out: &mut [u8],
) -> Result<Option<usize>, CodecError> {
    match spec.codec {
        CodecId::Off => {
            if input.len() > out.len() {
                return Ok(None);
            }
            out[..input.len()].copy_from_slice(input);
            Ok(Some(input.len()))
        }
        CodecId::Zle => Ok(zle::compress(input, out)),
        CodecId::Gzip => deflate::compress(deflate, spec.level, input, out),
        CodecId::Lz4 => {
            #[cfg(feature = "lz4")]
            return lz4::compress(input, out);
            #[cfg(not(feature = "lz4"))]
            return Err(CodecError::NotBuiltIn("lz4"));
        }
        CodecId::Zstd => {
            #[cfg(feature = "zstd")]
            return zstd::compress(spec.level, input, out);
            #[cfg(not(feature = "zstd"))]
            return Err(CodecError::NotBuiltIn("zstd"));
        }
    }
}

/// Decompresses `input` into exactly `out.len()` bytes.
pub fn decompress(
    codec: CodecId,
    deflate: DeflateEngine,
    input: &[u8],
    out: &mut [u8],
) -> Result<(), CodecError> {
    match codec {
        CodecId::Off => {
            if input.len() != out.len() {
                return Err(short(out.len(), input.len()));
            }
            out.copy_from_slice(input);
            Ok(())
        }
        CodecId::Zle => zle::decompress(input, out),
        CodecId::Gzip => deflate::decompress(deflate, input, out),
        CodecId::Lz4 => {
            #[cfg(feature = "lz4")]
            return lz4::decompress(input, out);
            #[cfg(not(feature = "lz4"))]
            return Err(CodecError::NotBuiltIn("lz4"));
        }
        CodecId::Zstd => {
            #[cfg(feature = "zstd")]
            return zstd::decompress(input, out);
            #[cfg(not(feature = "zstd"))]
            return Err(CodecError::NotBuiltIn("zstd"));
        }
    }
}

/// The error for a payload that decodes to a length other than the declared one.
pub(crate) fn short(expected: usize, got: usize) -> CodecError {
    CodecError::Corrupt(format!(
        "decodes to {got} bytes, the frame declares {expected}"
    ))
}
