//! Frame decoding must never panic, hang or write past the record, whatever the bytes.
//!
//! Four paths per input: the bytes as a frame (header and checksums first); the bytes as a
//! payload behind a forged header whose checksums are correct, so every codec decoder meets
//! arbitrary data too; the bytes as a record, encoded with one codec spec (every codec and
//! level of the table, picked by the first byte), decoded back exactly, then with one payload
//! byte changed and the stored hash made right again, so the decoders meet damaged streams of
//! their own format; and a hole frame of the record's length, whole and with a byte changed.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use presso_codec::format::compress;
use presso_codec::frame::{
    decode_frame_into, decode_frame_shared, hole_frame, seal_frame, stored_hash, FrameHeader,
    HEADER_LEN,
};
use presso_codec::{decode_frame_with, CodecId, CodecSpec, DecodeOptions, DeflateEngine};

/// The record encoded with `spec`, decoded back, then with one payload byte changed.
fn encoded_and_damaged(spec: CodecSpec, deflate: DeflateEngine, edit: u8, record: &[u8]) {
    let options = DecodeOptions { deflate };
    if record.is_empty() {
        // Nothing shrinks an empty record: the engine stores it as codec off.
        return;
    }
    let mut payload = vec![0u8; record.len().saturating_sub(1)];
    let Ok(Some(n)) = compress(spec, deflate, record, &mut payload) else {
        return;
    };
    let mut frame = vec![0u8; HEADER_LEN];
    frame.extend_from_slice(&payload[..n]);
    let mut header = seal_frame(&mut frame, spec, &[record]);
    assert_eq!(
        decode_frame_with(&frame, options).expect("a valid frame decodes"),
        record
    );
    if n == 0 {
        return;
    }
    let at = HEADER_LEN + (usize::from(edit) * 257 + record.len()) % n;
    frame[at] ^= edit.max(1);
    header.stored_hash = stored_hash(&frame[HEADER_LEN..]);
    frame[..HEADER_LEN].copy_from_slice(&header.to_bytes());
    for deflate in DeflateEngine::ALL {
        if let Ok(out) = decode_frame_with(&frame, DecodeOptions { deflate }) {
            // Another stream may decode to the same record; anything else fails its CRC.
            assert_eq!(crc32fast::hash(&out), header.logical_crc);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    for deflate in DeflateEngine::ALL {
        let _ = decode_frame_with(data, DecodeOptions { deflate });
    }
    let _ = decode_frame_shared(Bytes::copy_from_slice(data), DecodeOptions::default());
    if data.len() < 4 {
        return;
    }
    // First 4 bytes choose codec, level and logical length; the rest is the payload.
    let Some(codec) = CodecId::from_u8(data[0] % 5) else {
        return;
    };
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
    if FrameHeader::parse(&frame).is_ok() {
        for deflate in DeflateEngine::ALL {
            let mut out = vec![0xA5u8; logical_len as usize + 16];
            let result = decode_frame_into(
                &frame,
                &mut out[..logical_len as usize],
                DecodeOptions { deflate },
            );
            assert!(
                out[logical_len as usize..].iter().all(|&b| b == 0xA5),
                "decoder wrote past the record"
            );
            // The forged CRC is 0: a success would mean the CRC check was skipped.
            if let Ok(h) = result {
                assert!(
                    crc32fast::hash(&out[..logical_len as usize]) == 0,
                    "{:?}",
                    h
                );
            }
        }
    }

    // The record paths use the payload forged above as the record.
    let specs: Vec<CodecSpec> = CodecSpec::all().collect();
    let spec = specs[usize::from(data[0]) % specs.len()];
    let deflate = DeflateEngine::ALL[usize::from(data[1]) % DeflateEngine::ALL.len()];
    encoded_and_damaged(spec, deflate, data[2], payload);

    let mut hole = hole_frame(payload.len());
    assert_eq!(
        decode_frame_with(&hole, DecodeOptions::default()).expect("a hole decodes"),
        vec![0u8; payload.len()]
    );
    let at = usize::from(data[3]) % hole.len();
    hole[at] ^= data[2].max(1);
    assert!(
        decode_frame_with(&hole, DecodeOptions::default()).is_err(),
        "a changed hole header decodes"
    );
});
