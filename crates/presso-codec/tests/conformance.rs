//! One conformance suite over every codec × backend: round trips of awkward inputs, the verdicts
//! the policy promises, and typed errors (never a panic, never a write past the record) for
//! corrupted, truncated and lying frames.

mod common;

use common::{backends, random, text};
use presso_codec::frame::{FrameHeader, HEADER_LEN, MAX_RECORD_SIZE};
use presso_codec::{
    decode_frame, decode_frame_with, BackendKind, CodecId, CodecSpec, DecodeOptions, DeflateEngine,
    Engine, EngineConfig, FrameError, Offload, Record, Verdict,
};

fn inputs() -> Vec<(&'static str, Vec<u8>)> {
    let mut mixed = text(200_000, 5);
    mixed[50_000..120_000].fill(0);
    let mut cases = vec![
        ("empty", Vec::new()),
        ("one byte", vec![b'x']),
        ("one zero byte", vec![0]),
        ("zeros 128K", vec![0u8; 128 << 10]),
        ("random 64K", random(64 << 10, 1)),
        ("random 3 bytes", random(3, 2)),
        ("text 1M", text(1 << 20, 3)),
        ("text+zeros 200K", mixed),
    ];
    for (i, len) in [1usize, 17, 4095, 4096, 4097, 65_537, 131_072, 300_001]
        .into_iter()
        .enumerate()
    {
        cases.push(("text of an odd size", text(len, 100 + i as u64)));
    }
    cases
}

fn expected_verdict(spec: CodecSpec, data: &[u8], verdict: Verdict) -> bool {
    if data.is_empty() || spec.codec == CodecId::Off {
        return verdict == Verdict::Uncompressed;
    }
    if data.iter().all(|&b| b == 0) {
        return verdict == Verdict::Hole;
    }
    true
}

#[test]
fn every_codec_and_backend_round_trips() {
    let inputs = inputs();
    for backend in backends() {
        let specs: Vec<CodecSpec> = CodecSpec::all()
            .filter(|s| backend.name == "cpu-libdeflate" || s.codec == CodecId::Gzip)
            .collect();
        for spec in specs {
            let mut batch = backend.engine.batch();
            for (_, data) in &inputs {
                batch.submit(Record::from(data.clone()), spec);
            }
            for ((name, data), encoded) in inputs.iter().zip(batch.wait()) {
                let ctx = format!("{} / {spec} / {name} ({} bytes)", backend.name, data.len());
                assert!(
                    encoded.frame.len() <= HEADER_LEN + data.len(),
                    "{ctx}: frame grew"
                );
                assert!(
                    expected_verdict(spec, data, encoded.verdict),
                    "{ctx}: {:?}",
                    encoded.verdict
                );
                let decoded = backend
                    .engine
                    .decode(&encoded.frame.contiguous())
                    .unwrap_or_else(|e| panic!("{ctx}: {e}"));
                assert!(decoded == *data, "{ctx}: decoded bytes differ");
                // The header the engine hands back is the one it wrote, and decodes the frame
                // without being parsed again.
                assert_eq!(
                    FrameHeader::parse(&encoded.frame.contiguous()),
                    Ok(encoded.header),
                    "{ctx}: header"
                );
                let shared = backend
                    .engine
                    .decode_parsed_shared(&encoded.header, encoded.frame.clone().into_vec().into())
                    .unwrap_or_else(|e| panic!("{ctx}: {e}"));
                assert!(shared == *data, "{ctx}: decode_parsed_shared differs");
                if spec.codec == CodecId::Gzip {
                    // Interchangeable formats: every deflate engine reads what any engine wrote.
                    for engine in DeflateEngine::ALL {
                        let decoded = decode_frame_with(
                            &encoded.frame.contiguous(),
                            DecodeOptions { deflate: engine },
                        )
                        .unwrap_or_else(|e| panic!("{ctx}: {} cannot read it: {e}", engine.name()));
                        assert!(
                            decoded == *data,
                            "{ctx}: {} decodes differently",
                            engine.name()
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn text_compresses_and_random_is_stored_raw() {
    for backend in backends() {
        let spec: CodecSpec = "gzip-6".parse().unwrap();
        let encoded = backend
            .engine
            .compress(Record::from(text(128 << 10, 9)), spec);
        assert_eq!(encoded.verdict, Verdict::Compressed, "{}", backend.name);
        assert!(
            encoded.frame.len() < (128 << 10) / 2,
            "{}: {}",
            backend.name,
            encoded.frame.len()
        );
        let expected = if backend.name.starts_with("isal-") {
            BackendKind::Accelerator
        } else {
            BackendKind::Software
        };
        assert_eq!(encoded.backend, expected, "{}", backend.name);

        let encoded = backend
            .engine
            .compress(Record::from(random(128 << 10, 9)), spec);
        assert_eq!(encoded.verdict, Verdict::Skipped, "{}", backend.name);
        let header = FrameHeader::parse(&encoded.frame.contiguous()).unwrap();
        assert_eq!(header.codec, CodecId::Off);
    }
}

/// A record its codec cannot shrink enough (a few bytes of text, whose output outgrows the
/// record) must leave the codec ready for the next record on the same thread. libzstd's context
/// once kept such a failed frame open, and every later record on that worker was stored raw.
#[test]
fn a_record_that_does_not_fit_leaves_the_codec_working() {
    // gzip on every deflate engine; the other codecs do not use one.
    let cases = DeflateEngine::ALL.into_iter().flat_map(|deflate| {
        CodecSpec::all()
            .filter(move |s| {
                s.codec == CodecId::Gzip
                    || (s.codec != CodecId::Off && deflate == DeflateEngine::ALL[0])
            })
            .map(move |s| (deflate, s))
    });
    for (deflate, spec) in cases {
        // One worker, so both records meet the same thread and its codec context; no pre-check,
        // so the codec itself runs on the short record.
        let engine = Engine::with_accelerator(
            EngineConfig {
                workers: 1,
                offload: Offload::Off,
                precheck: false,
                deflate,
                ..EngineConfig::default()
            },
            None,
        );
        // The same codec at another level, where it has one: the next record may be another
        // file's, whose pool or directory asks for another level.
        let other = CodecSpec::all()
            .find(|s| s.codec == spec.codec && s.level != spec.level)
            .unwrap_or(spec);
        let short = engine.compress(Record::from(text(40, 11)), spec);
        let ctx = format!("{spec} (deflate engine {})", deflate.name());
        assert_eq!(short.verdict, Verdict::StoredRaw, "{ctx}: 40 bytes of text");
        for (round, spec) in [other, spec, other].into_iter().enumerate() {
            let round = round as u64;
            // Half zeros, so zle (which squeezes only zero runs) compresses it too.
            let mut data = text(128 << 10, 12 + round);
            data[32 << 10..96 << 10].fill(0);
            let encoded = engine.compress(Record::from(data.clone()), spec);
            assert_eq!(
                encoded.verdict,
                Verdict::Compressed,
                "{ctx}, then {spec}: 128K of text after a record that did not fit (round {round})"
            );
            assert!(
                engine.decode(&encoded.frame.contiguous()).unwrap() == data,
                "{ctx}, then {spec}"
            );
        }
    }
}

#[test]
fn largest_record_round_trips() {
    let data = text(MAX_RECORD_SIZE, 11);
    for backend in backends() {
        for spec in ["gzip-1", "gzip-6", "zstd-1", "lz4", "zle", "off"] {
            let spec: CodecSpec = spec.parse().unwrap();
            if backend.name != "cpu-libdeflate" && spec.codec != CodecId::Gzip {
                continue;
            }
            let encoded = backend.engine.compress(Record::from(data.clone()), spec);
            let decoded = backend.engine.decode(&encoded.frame.contiguous()).unwrap();
            assert!(decoded == data, "{} / {spec}", backend.name);
        }
    }
}

#[test]
fn scattered_records_equal_contiguous_ones() {
    use bytes::Bytes;
    let data = Bytes::from(text(256 << 10, 12));
    let pieces = [0usize, 1, 4096, 100_000, 100_001, 256 << 10];
    let scattered = Record::from_segments(pieces.windows(2).map(|w| data.slice(w[0]..w[1])));
    for backend in backends() {
        let spec: CodecSpec = "gzip-6".parse().unwrap();
        let a = backend.engine.compress(scattered.clone(), spec);
        assert_eq!(
            backend.engine.decode(&a.frame.contiguous()).unwrap(),
            data,
            "{}",
            backend.name
        );
    }
}

// ---- corrupted, truncated and lying frames -------------------------------------------------

/// Rewrites header bytes and fixes the header CRC, as a buggy or hostile writer would.
fn forge(frame: &[u8], edit: impl FnOnce(&mut [u8])) -> Vec<u8> {
    let mut forged = frame.to_vec();
    edit(&mut forged[..HEADER_LEN]);
    let crc = crc32fast::hash(&forged[..28]);
    forged[28..32].copy_from_slice(&crc.to_le_bytes());
    forged
}

/// Fixes the stored hash after a payload edit, so the codec itself meets the damage.
fn rehash(frame: &mut Vec<u8>) {
    let hash = xxhash_rust_hash(&frame[HEADER_LEN..]);
    let fixed = forge(frame, |h| h[20..28].copy_from_slice(&hash.to_le_bytes()));
    *frame = fixed;
}

fn xxhash_rust_hash(payload: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(payload)
}

/// The stored hash is XXH3-64 as every earlier build computed it (with another implementation
/// of the same function): on every length up to past XXH3's short-input paths and its first
/// blocks, and on records of the sizes pools use; also when a raw record's hash is taken over
/// several buffers.
#[test]
fn the_stored_hash_is_the_xxh3_earlier_builds_stored() {
    let data = random(MAX_RECORD_SIZE / 8 + 7, 99);
    for len in (0..=2_500).chain([4_096, 65_536, 131_072, 1 << 20, data.len()]) {
        assert_eq!(
            presso_codec::frame::stored_hash(&data[..len]),
            xxhash_rust_hash(&data[..len]),
            "length {len}"
        );
    }
    for cut in [0, 1, 63, 64, 65, 1_000, 100_000] {
        let record = Record::from_segments([
            bytes::Bytes::copy_from_slice(&data[..cut]),
            bytes::Bytes::copy_from_slice(&data[cut..131_072]),
        ]);
        let (_, header) = presso_codec::frame::raw_record(&record);
        assert_eq!(
            header.stored_hash,
            xxhash_rust_hash(&data[..131_072]),
            "cut at {cut}"
        );
    }
}

fn compressed_frames() -> Vec<(CodecSpec, Vec<u8>, Vec<u8>)> {
    let backend = backends().remove(0);
    let mut data = text(64 << 10, 21);
    data[1000..20000].fill(0);
    ["gzip-6", "zstd-3", "lz4", "zle"]
        .iter()
        .map(|s| {
            let spec: CodecSpec = s.parse().unwrap();
            let encoded = backend.engine.compress(Record::from(data.clone()), spec);
            assert_eq!(encoded.verdict, Verdict::Compressed, "{spec}");
            (spec, data.clone(), encoded.frame.into_vec())
        })
        .collect()
}

/// Decodes with every deflate engine into a buffer with guard bytes around the record.
fn decode_guarded(frame: &[u8], logical_len: usize) -> Vec<Result<(), FrameError>> {
    DeflateEngine::ALL
        .iter()
        .map(|&deflate| {
            let mut buf = vec![0xA5u8; logical_len + 64];
            let result = presso_codec::frame::decode_frame_into(
                frame,
                &mut buf[32..32 + logical_len],
                DecodeOptions { deflate },
            );
            assert!(
                buf[..32].iter().all(|&b| b == 0xA5),
                "wrote before the record"
            );
            assert!(
                buf[32 + logical_len..].iter().all(|&b| b == 0xA5),
                "wrote past the record"
            );
            result.map(|_| ())
        })
        .collect()
}

#[test]
fn payload_damage_is_a_checksum_error() {
    for (spec, data, frame) in compressed_frames() {
        for at in [HEADER_LEN, HEADER_LEN + 7, frame.len() - 1] {
            let mut bad = frame.clone();
            bad[at] ^= 0x10;
            assert!(
                matches!(decode_frame(&bad), Err(FrameError::StoredChecksum { .. })),
                "{spec} at {at}"
            );
        }
        assert_eq!(decode_frame(&frame).unwrap(), data);
    }
}

#[test]
fn damage_behind_a_valid_hash_is_caught_by_the_codec_or_the_crc() {
    for (spec, data, frame) in compressed_frames() {
        let payload_len = frame.len() - HEADER_LEN;
        for step in 0..40 {
            let mut bad = frame.clone();
            let at = HEADER_LEN + (step * 7919) % payload_len;
            bad[at] = bad[at].wrapping_add(1 + step as u8);
            rehash(&mut bad);
            for result in decode_guarded(&bad, data.len()) {
                assert!(
                    matches!(
                        result,
                        Err(FrameError::Corrupt { .. } | FrameError::LogicalChecksum { .. })
                    ),
                    "{spec}: byte {at}: {result:?}"
                );
            }
            // A decoder that met a damaged stream still decodes a good one on this thread.
            for result in decode_guarded(&frame, data.len()) {
                assert_eq!(
                    result,
                    Ok(()),
                    "{spec}: the good frame after damage at {at}"
                );
            }
        }
    }
}

#[test]
fn truncated_frames_are_typed_errors() {
    for (spec, _, frame) in compressed_frames() {
        for cut in [0, 1, 31, 32, 33, frame.len() / 2, frame.len() - 1] {
            let result = decode_frame(&frame[..cut]);
            assert!(
                matches!(result, Err(FrameError::Truncated { .. })),
                "{spec} cut at {cut}: {result:?}"
            );
        }
        // A payload cut short with a header that agrees (stored length and hash fixed up).
        let short = frame.len() - 5;
        let mut bad = forge(&frame[..short], |h| {
            h[12..16].copy_from_slice(&((short - HEADER_LEN) as u32).to_le_bytes())
        });
        rehash(&mut bad);
        let data_len = u32::from_le_bytes(frame[8..12].try_into().unwrap()) as usize;
        for result in decode_guarded(&bad, data_len) {
            assert!(
                matches!(
                    result,
                    Err(FrameError::Corrupt { .. } | FrameError::LogicalChecksum { .. })
                ),
                "{spec}: {result:?}"
            );
        }
    }
}

#[test]
fn unknown_codec_ids_and_versions_are_refused() {
    let (_, _, frame) = compressed_frames().remove(0);
    for id in [5u8, 6, 100, 255] {
        let bad = forge(&frame, |h| h[5] = id);
        assert_eq!(
            decode_frame(&bad),
            Err(FrameError::UnknownCodec { id, max: 4 })
        );
    }
    let bad = forge(&frame, |h| h[4] = 2);
    assert_eq!(
        decode_frame(&bad),
        Err(FrameError::UnsupportedVersion { found: 2 })
    );
    let mut bad = frame.clone();
    bad[0] = b'X';
    assert!(matches!(
        decode_frame(&bad),
        Err(FrameError::BadMagic { .. })
    ));
    let mut bad = frame.clone();
    bad[5] = 4; // codec changed without fixing the header CRC
    assert!(matches!(
        decode_frame(&bad),
        Err(FrameError::HeaderChecksum { .. })
    ));
}

#[test]
fn lying_logical_lengths_never_write_past_the_record() {
    for (spec, data, frame) in compressed_frames() {
        for claimed in [
            data.len() - 1,
            data.len() + 1,
            data.len() / 2,
            data.len() * 2,
        ] {
            let bad = forge(&frame, |h| {
                h[8..12].copy_from_slice(&(claimed as u32).to_le_bytes())
            });
            for result in decode_guarded(&bad, claimed) {
                assert!(
                    matches!(
                        result,
                        Err(FrameError::Corrupt { .. }
                            | FrameError::BadHeader(_)
                            | FrameError::LogicalChecksum { .. })
                    ),
                    "{spec}: claimed {claimed}: {result:?}"
                );
            }
        }
        // A claim beyond the record limit is refused before anything is allocated.
        let bad = forge(&frame, |h| {
            h[8..12].copy_from_slice(&u32::MAX.to_le_bytes())
        });
        assert!(
            matches!(decode_frame(&bad), Err(FrameError::BadHeader(_))),
            "{spec}"
        );
        // The caller's buffer must be the record's size.
        let mut small = vec![0u8; data.len() - 1];
        assert!(matches!(
            presso_codec::frame::decode_frame_into(&frame, &mut small, DecodeOptions::default()),
            Err(FrameError::OutputSize { .. })
        ));
    }
}

#[test]
fn frames_carry_codec_level_and_gzip_crc() {
    let backend = backends().remove(2);
    let data = text(100_000, 31);
    let encoded = backend
        .engine
        .compress(Record::from(data.clone()), "gzip-9".parse().unwrap());
    let header = FrameHeader::parse(&encoded.frame.contiguous()).unwrap();
    assert_eq!((header.codec, header.level), (CodecId::Gzip, 9));
    assert_eq!(header.logical_len as usize, data.len());
    assert_eq!(header.logical_crc, crc32fast::hash(&data));

    // A deflate frame is a gzip member without recompression: header + payload + CRC + ISIZE.
    let mut member = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255];
    member.extend_from_slice(&encoded.frame.contiguous()[HEADER_LEN..]);
    member.extend_from_slice(&header.logical_crc.to_le_bytes());
    member.extend_from_slice(&header.logical_len.to_le_bytes());
    let mut gunzipped = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::GzDecoder::new(&member[..]),
        &mut gunzipped,
    )
    .unwrap();
    assert_eq!(gunzipped, data);
}
