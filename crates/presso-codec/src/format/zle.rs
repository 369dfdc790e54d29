//! Zero-run encoding, the scheme of ZFS's `zle` with the same split at 64.
//!
//! The payload is a sequence of runs, each introduced by one control byte `c`:
//! - `c < 64`: `c + 1` literal bytes follow (1..=64);
//! - `c >= 64`: `c - 63` zero bytes (1..=192), nothing follows.
//!
//! A literal run ends before two consecutive zeros, so single zeros inside text stay literal.

const SPLIT: usize = 64;
const MAX_LITERALS: usize = SPLIT;
const MAX_ZEROS: usize = 255 - SPLIT + 1;

/// Encodes `input` into `out`; `None` when the encoding would not fit.
pub fn compress(input: &[u8], out: &mut [u8]) -> Option<usize> {
    let mut read = 0;
    let mut written = 0;
    while read < input.len() {
        if input[read] == 0 {
            let run = input[read..]
                .iter()
                .take(MAX_ZEROS)
                .take_while(|&&b| b == 0)
                .count();
            *out.get_mut(written)? = (SPLIT - 1 + run) as u8;
            written += 1;
            read += run;
        } else {
            let mut end = read + 1;
            while end < input.len()
                && end - read < MAX_LITERALS
                && !(input[end] == 0 && input.get(end + 1) == Some(&0))
            {
                end += 1;
            }
            let run = end - read;
            let dest = out.get_mut(written..written + 1 + run)?;
            dest[0] = (run - 1) as u8;
            dest[1..].copy_from_slice(&input[read..end]);
            written += 1 + run;
            read = end;
        }
    }
    Some(written)
}

/// Decodes `input` into exactly `out.len()` bytes.
pub fn decompress(input: &[u8], out: &mut [u8]) -> Result<(), super::CodecError> {
    let mut read = 0;
    let mut written = 0;
    let overflow = || super::CodecError::Corrupt("zle run overflows the record".into());
    while read < input.len() {
        let control = input[read] as usize;
        read += 1;
        if control < SPLIT {
            let run = control + 1;
            let src = input
                .get(read..read + run)
                .ok_or_else(|| super::CodecError::Corrupt("zle literal run is truncated".into()))?;
            out.get_mut(written..written + run)
                .ok_or_else(overflow)?
                .copy_from_slice(src);
            read += run;
            written += run;
        } else {
            let run = control - SPLIT + 1;
            out.get_mut(written..written + run)
                .ok_or_else(overflow)?
                .fill(0);
            written += run;
        }
    }
    if written != out.len() {
        return Err(super::short(out.len(), written));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn squeezes_zero_runs() {
        let mut input = vec![0u8; 4096];
        input[100] = 7;
        let mut out = vec![0u8; 4096];
        let n = compress(&input, &mut out).unwrap();
        assert!(n < 64, "{n}");
        let mut back = vec![1u8; 4096];
        decompress(&out[..n], &mut back).unwrap();
        assert_eq!(back, input);
    }

    proptest! {
        #[test]
        fn round_trips(input in proptest::collection::vec(prop_oneof![Just(0u8), any::<u8>()], 0..2000)) {
            let mut out = vec![0u8; input.len() * 2 + 8];
            let n = compress(&input, &mut out).unwrap();
            let mut back = vec![0u8; input.len()];
            decompress(&out[..n], &mut back).unwrap();
            prop_assert_eq!(back, input);
        }

        #[test]
        fn budget_is_respected(input in proptest::collection::vec(any::<u8>(), 0..500), budget in 0usize..600) {
            let mut out = vec![0u8; budget];
            if let Some(n) = compress(&input, &mut out) {
                prop_assert!(n <= budget);
            }
        }

        #[test]
        fn garbage_never_overflows(payload in proptest::collection::vec(any::<u8>(), 0..300), len in 0usize..1000) {
            let mut out = vec![0u8; len];
            let _ = decompress(&payload, &mut out);
        }
    }
}
