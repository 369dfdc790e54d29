//! Frame decoding must never panic, hang or write past the record, whatever the bytes.
//!
//! Two paths per input: the bytes as a frame (header and checksums first), and the bytes as a
//! payload behind a forged header whose checksums are correct, so every codec decoder meets
//! arbitrary data too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use bytes::Bytes;
use presso_codec::frame::{decode_frame_into, decode_frame_shared, stored_hash, FrameHeader};
use presso_codec::{decode_frame_with, CodecId, DecodeOptions, DeflateEngine};

fuzz_target!(|data: &[u8]| {
    for deflate in DeflateEngine::ALL {
        let _ = decode_frame_with(data, DecodeOptions { deflate });
    }
    let _ = decode_frame_shared(Bytes::copy_from_slice(data), DecodeOptions::default());
    if data.len() < 4 {
        return;
    }
    // First 4 bytes choose codec, level and logical length; the rest is the payload.
    let Some(codec) = CodecId::from_u8(data[0] % 5) else { return };
    let payload = &data[4..];
    let logical_len = u16::from_le_bytes([data[2], data[3]]) as u32;
    let header = FrameHeader {
        codec,
        level: data[1] % 20,
        hole: false,
        logical_len,
        stored_len: payload.len() as u32,
        logical_crc: 0,
        stored_hash: stored_hash(payload),
    };
    let mut frame = header.to_bytes().to_vec();
    frame.extend_from_slice(payload);
    if FrameHeader::parse(&frame).is_err() {
        return;
    }
    for deflate in DeflateEngine::ALL {
        let mut out = vec![0xA5u8; logical_len as usize + 16];
        let result = decode_frame_into(&frame, &mut out[..logical_len as usize], DecodeOptions { deflate });
        assert!(out[logical_len as usize..].iter().all(|&b| b == 0xA5), "decoder wrote past the record");
        // The forged CRC is 0: a success would mean the CRC check was skipped.
        if let Ok(h) = result {
            assert!(crc32fast::hash(&out[..logical_len as usize]) == 0, "{:?}", h);
        }
    }
});
