//! Deterministic test data: a seeded generator, random bytes, log-like text and FASTQ-like
//! records.

/// The pool's default record size: all-zero records of this size are stored as holes.
pub const RECORD: usize = 128 << 10;

/// A deterministic pseudo-random generator (SplitMix64), so every run sees the same data.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// A number in `lo..hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo)
    }

    /// Fills `buf` with random bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }

    /// Shuffles `items` (Fisher–Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

/// `n` random (incompressible) bytes.
pub fn random_bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut v = vec![0; n];
    Rng::new(seed).fill(&mut v);
    v
}

const WORDS: &[&str] = &[
    "request",
    "served",
    "GET",
    "POST",
    "PUT",
    "/index.html",
    "/api/v1/items",
    "/api/v1/users",
    "status",
    "200",
    "201",
    "304",
    "404",
    "500",
    "user",
    "agent",
    "bytes",
    "latency",
    "ms",
    "cache",
    "hit",
    "miss",
    "upstream",
    "timeout",
    "retry",
    "session",
    "token",
    "expired",
    "worker",
    "queue",
    "depth",
    "scheduler",
    "compaction",
    "segment",
    "flushed",
    "committed",
];

/// `n` bytes of log-like text lines.
pub fn text_like(seed: u64, n: usize) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut data = Vec::with_capacity(n + 256);
    let mut line = 0u64;
    while data.len() < n {
        let level = ["INFO", "DEBUG", "WARN", "ERROR"][rng.below(4) as usize];
        data.extend_from_slice(
            format!(
                "2024-05-{:02}T{:02}:{:02}:{:02}.{:03}Z {level} [pid {}] ",
                line / 86_400 % 28 + 1,
                line / 3600 % 24,
                line / 60 % 60,
                line % 60,
                rng.below(1000),
                1000 + rng.below(64)
            )
            .as_bytes(),
        );
        for _ in 0..rng.range(4, 14) {
            data.extend_from_slice(WORDS[rng.below(WORDS.len() as u64) as usize].as_bytes());
            data.push(b' ');
        }
        data.extend_from_slice(format!("id={:x}\n", rng.next_u64() >> 24).as_bytes());
        line += 1;
    }
    data.truncate(n);
    data
}

/// `n` bytes of FASTQ-like sequencing records.
pub fn fastq_like(seed: u64, n: usize) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut data = Vec::with_capacity(n + 512);
    let mut read = 0u64;
    while data.len() < n {
        read += 1;
        let len = 100 + rng.below(51) as usize;
        data.extend_from_slice(
            format!(
                "@SIM:1:FCX:{}:{}:{}:{} 1:N:0:ACGTAC\n",
                1 + read % 8,
                1101 + read % 16,
                rng.below(30_000),
                rng.below(30_000)
            )
            .as_bytes(),
        );
        for _ in 0..len {
            data.push(b"ACGT"[rng.below(4) as usize]);
        }
        data.extend_from_slice(b"\n+\n");
        // Qualities drift slowly, as real ones do.
        let mut q = 30 + rng.below(10) as i64;
        for _ in 0..len {
            q = (q + rng.below(5) as i64 - 2).clamp(2, 41);
            data.push(b'!' + q as u8);
        }
        data.push(b'\n');
    }
    data.truncate(n);
    data
}
