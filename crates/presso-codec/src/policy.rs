//! "Is it worth compressing?", decided once, here, for every codec: the zero check, the cheap
//! compressibility probe and the output budget.

use serde::{Deserialize, Serialize};

use crate::codec::{CodecId, CodecSpec};

/// Minimum saving a record must achieve to be stored compressed, as a fraction of its size.
/// The codec's output budget is `(1 − threshold) × input`; over budget, the record is stored raw.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Threshold(f64);

/// Why a threshold was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ThresholdError {
    /// Not a number.
    #[error("threshold '{0}' is not a percentage: give one from 0% to 50% (e.g. 12.5%)")]
    NotANumber(String),
    /// A number outside 0% to 50%.
    #[error("threshold {0} is out of range: give a percentage from 0% to 50% (e.g. 12.5%)")]
    OutOfRange(String),
    /// A bare number between 0 and 1, which reads as a fraction to some and a percentage to
    /// others.
    #[error(
        "threshold '{given}' is ambiguous: write '{percent}%' for {percent} percent, or \
         '{given}%' for {given} percent"
    )]
    BareFraction {
        /// The number as given.
        given: String,
        /// The percentage it would be as a fraction.
        percent: String,
    },
}

impl Threshold {
    /// The default: 12.5%, as ZFS.
    pub const DEFAULT: Threshold = Threshold(0.125);
    /// The largest threshold accepted.
    pub const MAX: f64 = 0.5;

    /// A threshold from a fraction in `0.0..=0.5`.
    pub fn from_fraction(fraction: f64) -> Result<Threshold, ThresholdError> {
        if !(0.0..=Self::MAX).contains(&fraction) {
            return Err(ThresholdError::OutOfRange(format!("{}%", fraction * 100.0)));
        }
        Ok(Threshold(fraction))
    }

    /// The fraction (0.125 for 12.5%).
    pub fn fraction(self) -> f64 {
        self.0
    }

    /// Largest payload accepted for a record of `len` bytes: strictly less than `len`, so a stored
    /// compressed payload is always shorter than its record.
    pub fn budget(self, len: usize) -> usize {
        let budget = (len as f64 * (1.0 - self.0)).floor() as usize;
        budget.min(len.saturating_sub(1))
    }
}

impl Default for Threshold {
    fn default() -> Self {
        Threshold::DEFAULT
    }
}

impl std::str::FromStr for Threshold {
    type Err = ThresholdError;

    /// The one threshold parser (properties, `presso bench`, configuration). A threshold is a
    /// percentage from 0% to 50%, with or without the `%` sign: `12.5%`, `12.5` and `20` mean
    /// 12.5 and 20 percent; `0.5%` is half a percent.
    ///
    /// A bare number strictly between 0 and 1 (`0.2`) is refused, with an error saying to write
    /// `20%` or `0.2%`: read as a fraction it would be 20%, read as a percentage 0.2%, and either
    /// guess silently stores records differently from what half the readers meant. With the `%`
    /// sign there is no doubt, so `0.2%` is accepted. Surrounding blanks are ignored; the
    /// [`Display`](std::fmt::Display) spelling (`12.5%`) parses back to the same value.
    fn from_str(text: &str) -> Result<Threshold, ThresholdError> {
        let trimmed = text.trim();
        let (number, has_sign) = match trimmed.strip_suffix('%') {
            Some(number) => (number.trim(), true),
            None => (trimmed, false),
        };
        let percent: f64 = number
            .parse()
            .map_err(|_| ThresholdError::NotANumber(trimmed.to_string()))?;
        if !percent.is_finite() {
            return Err(ThresholdError::NotANumber(trimmed.to_string()));
        }
        if !has_sign && percent > 0.0 && percent < 1.0 {
            // Rounded so that 0.07 suggests 7%, not 7.000000000000001%.
            let as_fraction = (percent * 100.0 * 1e9).round() / 1e9;
            return Err(ThresholdError::BareFraction {
                given: number.to_string(),
                percent: as_fraction.to_string(),
            });
        }
        Threshold::from_fraction(percent / 100.0)
            .map_err(|_| ThresholdError::OutOfRange(trimmed.to_string()))
    }
}

impl std::fmt::Display for Threshold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}%", self.0 * 100.0)
    }
}

/// Whether every byte of the segments is zero.
pub fn is_all_zero(segments: &[&[u8]]) -> bool {
    segments.iter().all(|s| {
        let (head, words, tail) = {
            // SAFETY: every bit pattern is a valid u64; align_to only splits the slice.
            unsafe { s.align_to::<u64>() }
        };
        head.iter().all(|&b| b == 0)
            && words.iter().all(|&w| w == 0)
            && tail.iter().all(|&b| b == 0)
    })
}

/// What the probe concluded about a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// Worth handing to the codec.
    Compress,
    /// Will not fit the budget: store it raw without trying.
    Skip,
}

/// Bytes sampled per probe window.
const SAMPLE_CHUNK: usize = 32;
/// Distance between sampled windows (btrfs samples 16 of every 256 bytes; this reads 1/16 too).
const SAMPLE_STRIDE: usize = 512;
/// Where window `k` starts inside its stride: one of 16 slots, varied pseudo-randomly. A fixed
/// phase aliases with data built of power-of-two blocks (fio's compressible buffers are 512-byte
/// chunks of random bytes followed by zeros, and a fixed phase saw only the random part).
fn window_jitter(k: usize) -> usize {
    let slots = SAMPLE_STRIDE / SAMPLE_CHUNK;
    ((k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 59) as usize % slots * SAMPLE_CHUNK
}

/// Corrected order-0 entropy (bits/byte) above which data is treated as random.
const RANDOM_BITS: f64 = 7.9;

/// Estimates the order-0 entropy of a sample of the record, in bits per byte, with the
/// Miller–Madow correction for the sample's size (an uncorrected estimate of a small sample of
/// random bytes reads well under 8).
pub fn sampled_entropy(segments: &[&[u8]]) -> f64 {
    let mut counts = [0u32; 256];
    let mut total = 0u32;
    let mut seg_start = 0usize;
    for segment in segments {
        let seg_end = seg_start + segment.len();
        // Windows are numbered over the whole record, so a window split by a segment boundary
        // is counted once, part in each segment.
        let mut k = seg_start / SAMPLE_STRIDE;
        loop {
            let start = k * SAMPLE_STRIDE + window_jitter(k);
            if start >= seg_end {
                break;
            }
            let (from, to) = (start.max(seg_start), (start + SAMPLE_CHUNK).min(seg_end));
            if from < to {
                for &b in &segment[from - seg_start..to - seg_start] {
                    counts[b as usize] += 1;
                    total += 1;
                }
            }
            k += 1;
        }
        seg_start = seg_end;
    }
    if total == 0 {
        return 0.0;
    }
    let n = total as f64;
    let mut bits = 0.0;
    let mut distinct = 0u32;
    for &c in counts.iter().filter(|&&c| c > 0) {
        let p = c as f64 / n;
        bits -= p * p.log2();
        distinct += 1;
    }
    bits + (distinct as f64 - 1.0) / (2.0 * n * std::f64::consts::LN_2)
}

/// The cheap pre-check: a sampled entropy estimate, then, where that is inconclusive, an LZ4 trial
/// (the OpenZFS zstd early-abort idea) before an expensive codec runs.
///
/// - entropy ≥ 7.9 bits/byte: random-looking (already compressed, encrypted) → skip;
/// - entropy below `8 × (1 − threshold)`: Huffman coding alone fits the budget → compress;
/// - in between only repeats could make it fit: an LZ4 trial within the budget decides.
pub fn probe(spec: CodecSpec, segments: &[&[u8]], budget: usize, logical_len: usize) -> Probe {
    if matches!(spec.codec, CodecId::Off | CodecId::Zle) {
        return Probe::Compress;
    }
    let entropy = sampled_entropy(segments);
    if entropy >= RANDOM_BITS {
        return Probe::Skip;
    }
    let huffman_fits = entropy / 8.0 < budget as f64 / logical_len.max(1) as f64;
    if huffman_fits || spec.codec == CodecId::Lz4 || !cfg!(feature = "lz4") {
        return Probe::Compress;
    }
    lz4_trial(segments, budget)
}

fn lz4_trial(segments: &[&[u8]], budget: usize) -> Probe {
    let gathered;
    let input: &[u8] = match segments {
        [one] => one,
        many => {
            gathered = many.concat();
            &gathered
        }
    };
    let mut scratch = vec![0u8; budget];
    let lz4 = CodecSpec {
        codec: CodecId::Lz4,
        level: 0,
    };
    match crate::format::compress(lz4, Default::default(), input, &mut scratch) {
        Ok(Some(_)) => Probe::Compress,
        _ => Probe::Skip,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngCore, SeedableRng};

    fn random(len: usize) -> Vec<u8> {
        let mut data = vec![0u8; len];
        rand::rngs::StdRng::seed_from_u64(7).fill_bytes(&mut data);
        data
    }

    #[test]
    fn sampling_does_not_alias_with_block_structured_data() {
        // fio's buffer_compress_percentage=70: each 512-byte chunk is 30% random, then zeros.
        let noise = random(1 << 17);
        let mut data = Vec::with_capacity(1 << 17);
        for chunk in noise.chunks(512) {
            data.extend_from_slice(&chunk[..154]);
            data.extend(std::iter::repeat_n(0u8, 358));
        }
        let entropy = sampled_entropy(&[&data]);
        assert!(entropy < 7.0, "sampled entropy {entropy} misses the zeros");
        let gzip: CodecSpec = "gzip-6".parse().unwrap();
        let budget = Threshold::DEFAULT.budget(data.len());
        assert_eq!(probe(gzip, &[&data], budget, data.len()), Probe::Compress);
        // Split anywhere, the estimate is the same.
        let (a, b) = data.split_at(40_000 + 17);
        assert_eq!(sampled_entropy(&[a, b]), entropy);
    }

    #[test]
    fn budget_is_strictly_smaller() {
        assert_eq!(Threshold::DEFAULT.budget(131072), 114688);
        assert_eq!(Threshold::from_fraction(0.0).unwrap().budget(100), 99);
        assert_eq!(Threshold::DEFAULT.budget(0), 0);
    }

    #[test]
    fn parses_thresholds() {
        assert_eq!("12.5%".parse::<Threshold>().unwrap().fraction(), 0.125);
        assert_eq!("10".parse::<Threshold>().unwrap().fraction(), 0.10);
        assert_eq!("0%".parse::<Threshold>().unwrap().fraction(), 0.0);
        assert_eq!("50%".parse::<Threshold>().unwrap().fraction(), 0.5);
        for bad in ["51%", "-1%", "abc", "NaN%", "inf"] {
            let err = bad.parse::<Threshold>().unwrap_err();
            assert!(err.to_string().contains("0% to 50%"), "{bad}: {err}");
        }
    }

    #[test]
    fn one_threshold_rule_percent_with_or_without_sign() {
        let fraction = |text: &str| text.parse::<Threshold>().map(Threshold::fraction);
        assert_eq!(fraction(" 20 "), Ok(0.2));
        assert_eq!(fraction("20%"), Ok(0.2));
        assert_eq!(fraction("20 %"), Ok(0.2));
        assert_eq!(fraction("1"), Ok(0.01));
        assert_eq!(fraction("0"), Ok(0.0));
        assert_eq!(fraction("0.2%"), Ok(0.002));
        assert_eq!(fraction("0.5%"), Ok(0.005));
        for t in [Threshold::DEFAULT, Threshold::from_fraction(0.005).unwrap()] {
            assert_eq!(t.to_string().parse::<Threshold>(), Ok(t), "{t}");
        }
    }

    #[test]
    fn a_bare_fraction_is_refused_with_both_readings() {
        for (bad, write) in [("0.2", "'20%'"), ("0.125", "'12.5%'"), (".07", "'7%'")] {
            let err = bad.parse::<Threshold>().unwrap_err();
            assert!(matches!(err, ThresholdError::BareFraction { .. }), "{bad}");
            let text = err.to_string();
            assert!(text.contains(write), "{bad}: {text}");
            assert!(text.contains(&format!("'{bad}%'")), "{bad}: {text}");
        }
    }

    #[test]
    fn zero_check_sees_every_byte() {
        let mut data = vec![0u8; 4099];
        assert!(is_all_zero(&[&data[..1], &data[1..]]));
        for i in [0, 7, 8, 2048, 4098] {
            data[i] = 1;
            assert!(!is_all_zero(&[&data]), "byte {i}");
            assert!(!is_all_zero(&[&data[..3], &data[3..]]), "byte {i} split");
            data[i] = 0;
        }
        assert!(is_all_zero(&[]));
    }

    #[test]
    fn random_data_is_skipped_and_text_is_compressed() {
        let gzip: CodecSpec = "gzip-6".parse().unwrap();
        let data = random(128 << 10);
        let budget = Threshold::DEFAULT.budget(data.len());
        assert!(sampled_entropy(&[&data]) > 7.95);
        assert_eq!(probe(gzip, &[&data], budget, data.len()), Probe::Skip);

        let text = "the quick brown fox jumps over the lazy dog, again and again. ".repeat(2100);
        let budget = Threshold::DEFAULT.budget(text.len());
        assert_eq!(
            probe(gzip, &[text.as_bytes()], budget, text.len()),
            Probe::Compress
        );
    }

    #[test]
    #[cfg(feature = "lz4")]
    fn lz4_trial_decides_the_middle_zone() {
        // Bytes drawn from 180 symbols: about 7.5 bits/byte, above what Huffman alone can fit in
        // the 12.5% budget (7 bits/byte) and below the random cut-off.
        let symbols: Vec<u8> = random(128 << 10)
            .iter()
            .map(|b| (*b as u32 * 180 / 256) as u8)
            .collect();
        let gzip: CodecSpec = "gzip-6".parse().unwrap();
        let budget = Threshold::DEFAULT.budget(symbols.len());
        let entropy = sampled_entropy(&[&symbols]);
        assert!((7.3..7.7).contains(&entropy), "{entropy}");
        assert_eq!(probe(gzip, &[&symbols], budget, symbols.len()), Probe::Skip);

        // Same symbol statistics, but a block of just over 8 KiB repeated: LZ4 finds the repeats.
        let repeated: Vec<u8> = symbols[..8229]
            .iter()
            .copied()
            .cycle()
            .take(128 << 10)
            .collect();
        let entropy = sampled_entropy(&[&repeated]);
        assert!((7.3..7.7).contains(&entropy), "{entropy}");
        assert_eq!(
            probe(gzip, &[&repeated], budget, repeated.len()),
            Probe::Compress
        );
    }
}
