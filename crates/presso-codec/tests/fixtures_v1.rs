//! Frames written by format version 1, checked in, must decode forever. When the frame format gets
//! a version 2, add a `frames-v2.bin` beside this one and keep this test unchanged.
//!
//! Regenerate (only when adding codecs, never to "fix" a failure):
//! `cargo test -p presso-codec --test fixtures_v1 -- --ignored write_fixture`

use presso_codec::frame::FrameHeader;
use presso_codec::{
    decode_frame_with, BackendKind, CodecId, CodecSpec, DecodeOptions, DeflateEngine, Engine,
    EngineConfig, Offload, Record,
};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/frames-v1.bin");

/// The fixture's logical content: deterministic text from a fixed generator (not `rand`, whose
/// output may change between versions), so the test can rebuild it exactly.
fn content(seed: u32, len: usize) -> Vec<u8> {
    const WORDS: [&[u8]; 12] = [
        b"segment ",
        b"record ",
        b"ACGT",
        b"TTGA",
        b"\n",
        b"frame ",
        b"pool ",
        b"zero ",
        b"42 ",
        b"gzip ",
        b"{ ",
        b"} ",
    ];
    let mut state = seed;
    let mut out = Vec::with_capacity(len + 16);
    while out.len() < len {
        state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        out.extend_from_slice(WORDS[(state >> 16) as usize % WORDS.len()]);
    }
    out.truncate(len);
    out
}

/// (spec, deflate engine, content) of every frame in the fixture, in order.
fn cases() -> Vec<(&'static str, DeflateEngine, Vec<u8>)> {
    let text = content(1, 20_000);
    let mut mixed = content(2, 20_000);
    mixed[5_000..15_000].fill(0);
    vec![
        ("off", DeflateEngine::Libdeflate, text.clone()),
        ("zle", DeflateEngine::Libdeflate, mixed.clone()),
        ("lz4", DeflateEngine::Libdeflate, text.clone()),
        ("gzip-6", DeflateEngine::Zlib, text.clone()),
        ("gzip-6", DeflateEngine::Libdeflate, text.clone()),
        ("gzip-6", DeflateEngine::Isal, text.clone()),
        ("gzip-9", DeflateEngine::Libdeflate, mixed),
        ("zstd-3", DeflateEngine::Libdeflate, text.clone()),
        ("zstd-19", DeflateEngine::Libdeflate, text),
        ("gzip-6", DeflateEngine::Libdeflate, vec![0u8; 8192]),
    ]
}

#[test]
#[ignore = "writes the fixture; run by hand only"]
fn write_fixture() {
    let mut out = Vec::new();
    for (spec, deflate, data) in cases() {
        let spec: CodecSpec = spec.parse().unwrap();
        let engine = if deflate == DeflateEngine::Isal {
            Engine::new(EngineConfig {
                workers: 1,
                offload: Offload::On,
                ..EngineConfig::default()
            })
            .unwrap()
        } else {
            let config = EngineConfig {
                workers: 1,
                offload: Offload::Off,
                deflate,
                ..EngineConfig::default()
            };
            Engine::with_accelerator(config, None)
        };
        let encoded = engine.compress(Record::from(data), spec);
        let expected = if deflate == DeflateEngine::Isal {
            BackendKind::Accelerator
        } else {
            encoded.backend
        };
        assert_eq!(encoded.backend, expected);
        out.extend_from_slice(&encoded.frame.contiguous());
    }
    std::fs::write(FIXTURE, out).unwrap();
}

#[test]
fn version_1_frames_still_decode() {
    let fixture = std::fs::read(FIXTURE).expect("the checked-in fixture");
    let mut at = 0;
    for (index, (spec, _, expected)) in cases().into_iter().enumerate() {
        let header =
            FrameHeader::parse(&fixture[at..]).unwrap_or_else(|e| panic!("frame {index}: {e}"));
        let frame = &fixture[at..at + header.frame_len()];
        let spec: CodecSpec = spec.parse().unwrap();
        if expected.iter().all(|&b| b == 0) {
            assert!(header.hole, "frame {index}");
        } else if spec.codec != CodecId::Off {
            assert_eq!(
                (header.codec, header.level),
                (spec.codec, spec.level),
                "frame {index}"
            );
        }
        for deflate in DeflateEngine::ALL {
            let decoded = decode_frame_with(frame, DecodeOptions { deflate })
                .unwrap_or_else(|e| panic!("frame {index} ({spec}) with {}: {e}", deflate.name()));
            assert!(
                decoded == expected,
                "frame {index} ({spec}) decodes differently"
            );
        }
        at += header.frame_len();
    }
    assert_eq!(at, fixture.len(), "no frames beyond the known ones");
    // The first header, byte for byte: an accidental change to the layout fails here.
    let first = FrameHeader::parse(&fixture).unwrap();
    assert_eq!(&fixture[..8], &[b'P', b'R', b'S', b'F', 1, 0, 0, 0]);
    assert_eq!(first.logical_len, 20_000);
    assert_eq!(first.stored_len, 20_000);
    assert_eq!(first.logical_crc, crc32fast::hash(&content(1, 20_000)));
}
