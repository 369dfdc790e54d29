//! ISA-L igzip through its C API (isal-sys), with reused per-thread stream state and level buffers.
//!
//! This is the one ISA-L deflate implementation, used two ways: by the `isal` accelerator
//! ([`crate::accel::isal`], an execution backend for the gzip format with threads and a queue of
//! its own, what production uses), and inline on the caller's thread as
//! [`DeflateEngine::Isal`](super::DeflateEngine::Isal) (a software deflate engine, for tests,
//! benches and decoding).
//!
//! The compressor streams over a scatter/gather list: each segment is fed to `isal_deflate` in
//! place, so a record split over several buffers is never gathered into one.
//!
//! gzip level → ISA-L level (ISA-L has levels 0..=3; 0 trades much ratio for speed and is unused):
//!
//! | gzip  | ISA-L |
//! |-------|-------|
//! | 1–3   | 1     |
//! | 4–6   | 2     |
//! | 7–9   | 3     |
//!
//! Measured on 128 KiB records of the corpus against zlib at gzip-6: ISA-L 2 keeps 86% of its ratio
//! on source text and 87% on FASTQ at 9x and 30x its speed; ISA-L 3 keeps 90% at 6.5x on text but
//! is no better than 2 on FASTQ. docs/design.md has the table.

use std::cell::RefCell;

use isal_sys::igzip_lib as isal;

use super::CodecError;

/// The ISA-L level that serves a gzip level (see the module table).
pub fn level_for_gzip(gzip_level: u8) -> u32 {
    match gzip_level {
        0..=3 => 1,
        4..=6 => 2,
        _ => 3,
    }
}

const LEVEL_BUF_LEN: usize = isal::ISAL_DEF_LVL3_DEFAULT as usize;

struct DeflateState {
    stream: Box<isal::isal_zstream>,
    level_buf: Vec<u8>,
}

struct InflateState {
    state: Box<isal::inflate_state>,
}

thread_local! {
    static DEFLATE: RefCell<Option<DeflateState>> = const { RefCell::new(None) };
    static INFLATE: RefCell<Option<InflateState>> = const { RefCell::new(None) };
}

fn zeroed_box<T>() -> Box<T> {
    // SAFETY: isal_zstream and inflate_state are plain C structs of integers, pointers and arrays,
    // for which all-zero bytes are a valid value; ISA-L's init functions then set them up.
    unsafe { Box::<T>::new_zeroed().assume_init() }
}

/// Compresses the concatenation of `segments` at ISA-L `level` (0..=3) into `out`.
/// `None` when the stream does not fit in `out`.
pub fn compress(
    level: u32,
    segments: &[&[u8]],
    out: &mut [u8],
) -> Result<Option<usize>, CodecError> {
    if level > isal::ISAL_DEF_MAX_LEVEL {
        return Err(CodecError::Engine(format!("ISA-L has no level {level}")));
    }
    let out_cap = u32::try_from(out.len()).unwrap_or(u32::MAX);
    DEFLATE.with(|cell| {
        let mut cell = cell.borrow_mut();
        let state = cell.get_or_insert_with(|| DeflateState {
            stream: zeroed_box(),
            level_buf: vec![0u8; LEVEL_BUF_LEN],
        });
        let stream: &mut isal::isal_zstream = &mut state.stream;
        // SAFETY: `stream` is a valid, exclusively borrowed isal_zstream. Every pointer handed to
        // ISA-L (level buffer, segments, output) outlives this call, and the lengths given are the
        // slices' own, so ISA-L reads and writes only inside them.
        unsafe {
            isal::isal_deflate_init(stream);
            stream.level = level;
            stream.level_buf = state.level_buf.as_mut_ptr();
            stream.level_buf_size = LEVEL_BUF_LEN as u32;
            stream.gzip_flag = isal::IGZIP_DEFLATE as u16;
            stream.flush = isal::NO_FLUSH as u16;
            stream.next_out = out.as_mut_ptr();
            stream.avail_out = out_cap;
            let empty: [&[u8]; 1] = [&[]];
            let segments = if segments.is_empty() {
                &empty[..]
            } else {
                segments
            };
            for (index, segment) in segments.iter().enumerate() {
                stream.next_in = segment.as_ptr() as *mut u8;
                stream.avail_in = u32::try_from(segment.len())
                    .map_err(|_| CodecError::Engine("segment too large for ISA-L".into()))?;
                stream.end_of_stream = u16::from(index + 1 == segments.len());
                loop {
                    let ret = isal::isal_deflate(stream);
                    if ret != isal::COMP_OK as i32 {
                        return Err(CodecError::Engine(format!("isal_deflate returned {ret}")));
                    }
                    let finished =
                        stream.internal_state.state == isal::isal_zstate_state_ZSTATE_END;
                    if finished || (stream.avail_in == 0 && stream.end_of_stream == 0) {
                        break;
                    }
                    if stream.avail_out == 0 {
                        return Ok(None);
                    }
                }
            }
            if stream.internal_state.state != isal::isal_zstate_state_ZSTATE_END {
                return Ok(None);
            }
            Ok(Some(stream.total_out as usize))
        }
    })
}

/// Inflates a raw deflate stream into exactly `out.len()` bytes.
pub fn decompress(input: &[u8], out: &mut [u8]) -> Result<(), CodecError> {
    let in_len = u32::try_from(input.len())
        .map_err(|_| CodecError::Corrupt("deflate payload too large".into()))?;
    let out_len =
        u32::try_from(out.len()).map_err(|_| CodecError::Corrupt("record too large".into()))?;
    INFLATE.with(|cell| {
        let mut cell = cell.borrow_mut();
        let state = cell.get_or_insert_with(|| InflateState {
            state: zeroed_box(),
        });
        let st: &mut isal::inflate_state = &mut state.state;
        // SAFETY: `st` is a valid, exclusively borrowed inflate_state; ISA-L reads at most
        // `in_len` bytes of `input` and writes at most `out_len` bytes of `out`.
        let ret = unsafe {
            isal::isal_inflate_init(st);
            st.next_in = input.as_ptr() as *mut u8;
            st.avail_in = in_len;
            st.next_out = out.as_mut_ptr();
            st.avail_out = out_len;
            st.crc_flag = isal::ISAL_DEFLATE;
            isal::isal_inflate_stateless(st)
        };
        match ret {
            r if r == isal::ISAL_DECOMP_OK as i32 => {
                let written = st.total_out as usize;
                if written != out.len() {
                    return Err(super::short(out.len(), written));
                }
                Ok(())
            }
            r if r == isal::ISAL_OUT_OVERFLOW as i32 => Err(CodecError::Corrupt(format!(
                "isal: stream continues past the declared {} bytes",
                out.len()
            ))),
            r if r == isal::ISAL_END_INPUT as i32 => {
                Err(CodecError::Corrupt("isal: stream is truncated".into()))
            }
            r => Err(CodecError::Corrupt(format!(
                "isal_inflate_stateless returned {r}"
            ))),
        }
    })
}

/// Compresses and decodes a small sample to prove the engine works on this CPU.
pub fn self_test() -> Result<(), CodecError> {
    let sample: Vec<u8> = (0..8192u32)
        .map(|i| (i % 251) as u8 ^ (i / 1024) as u8)
        .collect();
    let mut packed = vec![0u8; sample.len()];
    let n = compress(1, &[&sample], &mut packed)?
        .ok_or_else(|| CodecError::Engine("self-test sample did not compress".into()))?;
    let mut back = vec![0u8; sample.len()];
    decompress(&packed[..n], &mut back)?;
    if back != sample {
        return Err(CodecError::Engine("self-test round trip differs".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(len: usize) -> Vec<u8> {
        (0..len as u32)
            .map(|i| b"ACGT quality=IIIIHHHGG line\n"[(i as usize * 7 + i as usize / 97) % 28])
            .collect()
    }

    #[test]
    fn every_level_round_trips_over_segments_with_reused_state() {
        // Level 0 included: a one-shot wrapper elsewhere has returned corrupt output at level 0.
        let data = sample(300_000);
        for level in 0..=isal::ISAL_DEF_MAX_LEVEL {
            for cuts in [vec![], vec![1], vec![4096, 4097, 150_000], vec![299_999]] {
                let mut bounds = vec![0];
                bounds.extend(cuts);
                bounds.push(data.len());
                let segments: Vec<&[u8]> = bounds.windows(2).map(|w| &data[w[0]..w[1]]).collect();
                let mut out = vec![0u8; data.len()];
                let n = compress(level, &segments, &mut out).unwrap().expect("fits");
                let mut back = vec![0u8; data.len()];
                decompress(&out[..n], &mut back).unwrap();
                assert!(back == data, "level {level}, segments {}", segments.len());
                // Another engine reads it too: the output is standard deflate.
                let mut z = flate2::Decompress::new(false);
                let mut back2 = vec![0u8; data.len()];
                z.decompress(&out[..n], &mut back2, flate2::FlushDecompress::Finish)
                    .unwrap();
                assert!(back2 == data, "zlib reads level {level}");
            }
        }
    }

    #[test]
    fn too_small_output_is_over_budget_not_an_error() {
        let data = sample(100_000);
        for budget in [0, 1, 10, 100, 1000] {
            let mut out = vec![0u8; budget];
            assert_eq!(
                compress(2, &[&data], &mut out).unwrap(),
                None,
                "budget {budget}"
            );
        }
        assert!(compress(4, &[&data], &mut [0u8; 10]).is_err(), "no level 4");
    }

    #[test]
    fn empty_input_is_a_valid_empty_stream() {
        let mut out = vec![0u8; 64];
        let n = compress(1, &[], &mut out).unwrap().unwrap();
        decompress(&out[..n], &mut []).unwrap();
    }
}
