//! LZ4 block format through liblz4.

use std::os::raw::{c_char, c_int};

use super::CodecError;

/// Compresses into `out`; `None` when it does not fit.
pub fn compress(input: &[u8], out: &mut [u8]) -> Result<Option<usize>, CodecError> {
    if input.is_empty() {
        return Ok(None);
    }
    let src_len = c_int::try_from(input.len())
        .map_err(|_| CodecError::Engine("record too large for lz4".into()))?;
    let cap = c_int::try_from(out.len()).unwrap_or(c_int::MAX);
    // SAFETY: both pointers are valid for the lengths passed; liblz4 writes at most `cap` bytes
    // into `out` and returns 0 when the output would not fit.
    let written = unsafe {
        lz4::liblz4::LZ4_compress_default(
            input.as_ptr() as *const c_char,
            out.as_mut_ptr() as *mut c_char,
            src_len,
            cap,
        )
    };
    Ok((written > 0).then_some(written as usize))
}

/// Decodes into exactly `out.len()` bytes.
pub fn decompress(input: &[u8], out: &mut [u8]) -> Result<(), CodecError> {
    let too_large = || CodecError::Corrupt("lz4 payload too large".into());
    let src_len = c_int::try_from(input.len()).map_err(|_| too_large())?;
    let cap = c_int::try_from(out.len()).map_err(|_| too_large())?;
    // SAFETY: LZ4_decompress_safe never reads past `src_len` nor writes past `cap` bytes, whatever
    // the input holds.
    let written = unsafe {
        lz4::liblz4::LZ4_decompress_safe(
            input.as_ptr() as *const c_char,
            out.as_mut_ptr() as *mut c_char,
            src_len,
            cap,
        )
    };
    if written < 0 {
        return Err(CodecError::Corrupt("lz4: malformed block".into()));
    }
    if written as usize != out.len() {
        return Err(super::short(out.len(), written as usize));
    }
    Ok(())
}
