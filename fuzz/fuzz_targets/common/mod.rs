//! What the fuzz targets share: edits of a valid encoding steered by the fuzz input.
#![allow(dead_code)]

/// Applies edits read from `ops`, five bytes each: a position (24 bits, little-endian, taken
/// modulo the length), an edit kind and a value. Kinds: XOR the byte with the value (a zero value
/// flips bit 0), overwrite it, cut the bytes off there, or insert the value there. Stops after
/// `max_edits` edits, so most inputs stay close to the valid encoding they start from.
pub fn mutate(bytes: &mut Vec<u8>, ops: &[u8], max_edits: usize) {
    for op in ops.chunks_exact(5).take(max_edits) {
        let pos = u32::from_le_bytes([op[0], op[1], op[2], 0]) as usize;
        let value = op[4];
        if bytes.is_empty() {
            bytes.push(value);
            continue;
        }
        let at = pos % bytes.len();
        match op[3] % 4 {
            0 => bytes[at] ^= if value == 0 { 1 } else { value },
            1 => bytes[at] = value,
            2 => bytes.truncate(at),
            _ => bytes.insert(at, value),
        }
    }
}

/// A small deterministic filler: `len` bytes, different for every `seed`, some runs of zeros
/// and some text so that codecs find something to compress.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match (i / 64) % 3 {
                0 => 0,
                1 => b"presso "[i % 7],
                _ => x as u8,
            }
        })
        .collect()
}
